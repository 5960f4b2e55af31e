"""OpenAI Agents SDK: a ``Session`` backed by the microcompact store, and a model input filter that hands
the model the compacted view.

    session = MicroCompactSession("chat-42", context_length=128_000, store=open_store("agents.db"))
    result = await Runner.run(agent, prompt, session=session, run_config=session.run_config())

The session keeps every item (``get_items`` returns the full history); ``session.input_filter`` (set as
``RunConfig.call_model_input_filter``; ``run_config()`` does it) sends the model the compacted view of it.
Without a session, ``compacting_input_filter(context_length=...)`` does the same for any run, each
conversation keyed by its opening.

Conversion to OpenAI chat messages: a user or system item becomes one message, a tool output one tool
message, and an assistant turn (its reasoning, message and function calls) one assistant message with its
tool calls, as the SDK's own converter sends them to chat-completions models. Items the view keeps
unchanged go back as the SDK's own items (ids, provider data and all); each stored message carries the
items it stands for, so the store alone restores the full history.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..config import Config
from ..keys import BRANCHES_META, HID_KEY, ITEMS_KEY
from ..messages import Message
from ..router import branch_id
from ..session import Convert
from .compactor import HistoryCompactor, KeyFunction, ViewEntry, compactor_for, opening_key, require

require("agents", "openai-agents")

from agents import RunConfig  # noqa: E402
from agents.models.chatcmpl_converter import Converter  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402

if TYPE_CHECKING:
    from ..store import SessionStore

__all__ = ["MicroCompactFilter", "MicroCompactSession", "compacting_input_filter", "flatten"]

Item = dict[str, Any]
_ASSISTANT_PARTS = {"reasoning", "function_call"}


def _is_assistant_message(item: Item) -> bool:
    return item.get("role") == "assistant" and item.get("type", "message") == "message"


def _groups(items: Sequence[Item]) -> list[list[int]]:
    """Item indexes per chat message: an assistant turn (reasoning, its message, its function calls)
    together, every other item alone."""
    groups: list[list[int]] = []
    open_turn = False  # the last group is an assistant turn that may take more
    for i, item in enumerate(items):
        kind = item.get("type")
        if (kind == "function_call" and open_turn) or (
            (kind == "reasoning" or _is_assistant_message(item)) and open_turn and _only_reasoning(items, groups[-1])
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
            open_turn = kind in _ASSISTANT_PARTS or _is_assistant_message(item)
    return groups


def _only_reasoning(items: Sequence[Item], group: list[int]) -> bool:
    return all(items[i].get("type") == "reasoning" for i in group)


def _chat_message(items: list[Item]) -> Message:
    """One group of items as one chat message (the SDK's converter; a JSON rendering for what it cannot
    convert to a single message, so nothing is silently dropped)."""
    try:
        converted = Converter.items_to_messages(cast(Any, copy.deepcopy(items)))
    except Exception:
        converted = []
    if len(converted) == 1:
        return {k: v for k, v in dict(converted[0]).items() if v is not None}
    return {"role": "assistant", "content": json.dumps(items, ensure_ascii=False, default=str)}


def flatten(items: Sequence[Item]) -> tuple[list[Message], list[list[int]]]:
    """SDK items as chat messages, with the item indexes of each."""
    groups = _groups(items)
    return [_chat_message([items[i] for i in g]) for g in groups], groups


def carrying_items(messages: Sequence[Message], groups: Sequence[list[int]], items: Sequence[Item]) -> Convert:
    """The ``convert`` for routing ``messages``: each session message takes along, under ``_items``, the SDK
    items it stands for (kept by the store, so a reopen gives the items back). The library hands ``convert``
    the client's own message object when it carries no ``_`` key, which a chat message never does."""
    by_id = {id(m): [items[i] for i in g] for m, g in zip(messages, groups, strict=True)}

    def convert(message: Message) -> list[Message]:
        return [{**message, ITEMS_KEY: by_id.get(id(message), [])}]

    return convert


def _changed_items(original: list[Item], entry: ViewEntry) -> list[Item]:
    """The items of a message the view shortened (a cut or stubbed tool output, shortened arguments)."""
    message = entry.message
    if message.get("role") == "tool":
        return [{**item, "output": message.get("content")} for item in original]
    args = {c.get("id"): c["function"]["arguments"] for c in message.get("tool_calls") or []}
    text = message.get("content")
    out: list[Item] = []
    for item in original:
        if item.get("type") == "function_call" and item.get("call_id") in args:
            out.append({**item, "arguments": args[item["call_id"]]})
        elif _is_assistant_message(item) and isinstance(text, str) and isinstance(item.get("content"), list):
            out.append({**item, "content": [{"type": "output_text", "text": text, "annotations": []}]})
        else:
            out.append(item)
    return out


def _rebuild(view: list[ViewEntry], groups: list[list[int]], items: Sequence[Item]) -> list[Item]:
    out: list[Item] = []
    for entry in view:
        if entry.origin is None:  # a summary marker
            out.append({"role": "assistant", "content": str(entry.message.get("content") or "")})
            continue
        original = [items[i] for i in groups[entry.origin]]
        out.extend(original if entry.unchanged else _changed_items(original, entry))
    return out


class MicroCompactFilter:
    """``RunConfig.call_model_input_filter``: the run's full input in, the compacted view out. The
    compaction runs on a worker thread, so the event loop is never blocked."""

    def __init__(self, compactor: HistoryCompactor, key: KeyFunction | None = None) -> None:
        self.compactor = compactor
        self.key = key or opening_key

    def compacted(self, items: Sequence[Item]) -> list[Item]:
        messages, groups = flatten(items)
        view = self.compactor.view(self.key(messages), messages, carrying_items(messages, groups, items))
        return _rebuild(view, groups, items)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = [_plain(i) for i in data.model_data.input]
        view = await asyncio.to_thread(self.compacted, items)
        return ModelInputData(input=view, instructions=data.model_data.instructions)  # type: ignore[arg-type]


def compacting_input_filter(
    context_length: int | None = None,
    *,
    summarizer: Any = None,
    model: str | None = None,
    config: Config | None = None,
    store: SessionStore | None = None,
    key: KeyFunction | None = None,
) -> MicroCompactFilter:
    """A model input filter for runs without a :class:`MicroCompactSession` (conversations keyed by their
    opening). ``summarizer``: what :func:`~microcompact.summarizers.summarizer_from` accepts."""
    return MicroCompactFilter(compactor_for(context_length, summarizer, model, config, store), key)


class MicroCompactSession:
    """An Agents SDK session (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) whose items
    live in microcompact sessions: the full history in, the compacted view out through ``input_filter``.

    With ``store``, every item is written there (as the chat message it belongs to), so another process
    opening the same ``session_id`` gets the same history back. ``pop_item`` and ``clear_session`` never
    delete: the shortened history continues in a new branch (``ID~2``, ...), which is what a later open
    reads; the earlier branch stays in the store."""

    session_settings = None

    def __init__(
        self,
        session_id: str,
        context_length: int | None = None,
        *,
        summarizer: Any = None,
        model: str | None = None,
        config: Config | None = None,
        store: SessionStore | None = None,
    ) -> None:
        self.session_id = session_id
        self.compactor = compactor_for(context_length, summarizer, model, config, store)
        self.store = store
        self.input_filter = MicroCompactFilter(self.compactor, key=lambda _: session_id)
        self._items: list[Item] | None = None
        self._lock = asyncio.Lock()

    def run_config(self, **options: Any) -> RunConfig:
        """A ``RunConfig`` with this session's input filter (``options``: any other RunConfig field)."""
        return RunConfig(call_model_input_filter=self.input_filter, **options)

    async def get_items(self, limit: int | None = None) -> list[Item]:
        async with self._lock:
            items = await self._loaded()
        return [copy.deepcopy(i) for i in (items[-limit:] if limit else items)]

    async def add_items(self, items: list[Item]) -> None:
        async with self._lock:
            full = [*await self._loaded(), *(_plain(i) for i in items)]
            await asyncio.to_thread(self._sync, full)
            self._items = full

    async def pop_item(self) -> Item | None:
        async with self._lock:
            full = list(await self._loaded())
            if not full:
                return None
            last = full.pop()
            await asyncio.to_thread(self._sync, full)
            self._items = full
            return last

    async def clear_session(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._sync, [])
            self._items = []

    def close(self) -> None:
        """Write what is pending and release the store's writer leases."""
        self.compactor.close()

    def _sync(self, items: list[Item]) -> None:
        """Route the full history to its branch (a shorter one forks) and write it to the store."""
        messages, groups = flatten(items)
        with self.compactor.router.lock(self.session_id):
            routed = self.compactor.router.route(self.session_id, messages, carrying_items(messages, groups, items))
            routed.session.flush()

    async def _loaded(self) -> list[Item]:
        if self._items is None:
            self._items = await asyncio.to_thread(self._stored_items)
        return self._items

    def _stored_items(self) -> list[Item]:
        """The items of the session's newest branch, from the store (absorbed rows included)."""
        if self.store is None:
            return []
        branches = int(self.store.session_meta(self.session_id).get(BRANCHES_META, 1))
        rows = self.store.export(branch_id(self.session_id, branches), include_absorbed=True)
        by_origin: dict[int, list[Item]] = {}
        for row in rows:
            hid = row.get(HID_KEY)
            if isinstance(hid, int) and hid not in by_origin and isinstance(row.get(ITEMS_KEY), list):
                by_origin[hid] = row[ITEMS_KEY]
        return [item for hid in sorted(by_origin) for item in by_origin[hid]]


def _plain(item: Any) -> Item:
    """An item as a plain dict (the SDK hands dicts; a pydantic model is dumped)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_unset=True))
    raise TypeError(f"MicroCompactSession.add_items: not an input item: {type(item).__name__}")
