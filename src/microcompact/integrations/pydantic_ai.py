"""pydantic-ai: a history processor that hands the model the compacted view.

    agent = Agent(model, capabilities=[ProcessHistory(microcompact_processor(context_length=128_000))])

(``history_processors=[...]`` on versions of pydantic-ai that still take it.) This pydantic-ai replaces the
run's history with what the processor returns, so the next call brings back our own view plus what came
after it: the processor recognises that view (a digest per message) and puts the full history it stands
for back in its place before syncing. ``full_history(messages)`` gives that full list to the caller.

Conversion to OpenAI-format dicts: a request's parts become one message each (system prompt, user
prompt with its text and image parts, tool return, retry), a response becomes one assistant message (text
and tool calls with their ids). Whatever the view keeps unchanged goes back as pydantic-ai's own object,
so nothing the dict form leaves out (timestamps, thinking, provider details, instructions) is lost.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..identity import digest
from ..messages import Message
from .compactor import HistoryCompactor, KeyFunction, ViewEntry, compactor_for, opening_key, require

_messages = require("pydantic_ai.messages", "pydantic-ai")

from pydantic_ai.messages import (  # noqa: E402
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)

if TYPE_CHECKING:
    from ..store import SessionStore

__all__ = ["MicroCompactProcessor", "flatten", "microcompact_processor"]

# Where a flattened message came from: (index of the ModelMessage, index of the part; None for a response).
Source = tuple[int, int | None]
REMEMBERED_VIEWS = 8  # per conversation: views the next call may continue (a retry reuses an older one)
# pydantic-ai merges adjacent requests (and adjacent synthetic responses, e.g. two summary markers) in the
# history it hands back next time; returning the view in that shape already lets the next call recognise it.
# A private function of pydantic-ai: where it is missing, views are returned as built.
_same_shape_as_pydantic_ai = getattr(_messages, "_merge_consecutive_messages", None)


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, ImageUrl):
            parts.append({"type": "image_url", "image_url": {"url": item.url}})
        elif isinstance(item, BinaryContent) and item.is_image:
            parts.append({"type": "image_url", "image_url": {"url": item.data_uri}})
        else:  # audio, documents, video, cache points: named, not inlined
            kind = getattr(item, "kind", type(item).__name__)
            where = getattr(item, "url", None) or getattr(item, "identifier", "")
            parts.append({"type": "text", "text": f"[{kind}: {where}]"})
    return parts


def _request_part(part: Any) -> Message:
    """One request part as an OpenAI-format message."""
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_content(part.content)}
    text = _part_text(part)
    call_id = getattr(part, "tool_call_id", None)
    if call_id and getattr(part, "tool_name", None):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    return {"role": "user", "content": text}  # feedback the model is shown in the user voice


def _part_text(part: Any) -> str:
    for method in ("model_response_str", "model_response"):
        render = getattr(part, method, None)
        if callable(render):
            return str(render())
    return str(getattr(part, "content", ""))


def _response(message: ModelResponse) -> Message:
    """A response as one assistant message: its text, and its tool calls with their ids."""
    text = "\n\n".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    if not text and not calls:  # thinking only (or a provider-native part): say what it thought
        text = "\n\n".join(p.content for p in message.parts if isinstance(p, ThinkingPart))
    out: Message = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    return out


def flatten(messages: Sequence[ModelMessage]) -> tuple[list[Message], list[Source]]:
    """pydantic-ai messages as OpenAI-format dicts, with where each came from."""
    dicts: list[Message] = []
    sources: list[Source] = []
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            dicts.append(_response(message))
            sources.append((i, None))
            continue
        for k, part in enumerate(message.parts):
            dicts.append(_request_part(part))
            sources.append((i, k))
    return dicts, sources


def _message_digests(messages: Sequence[ModelMessage]) -> list[str]:
    return [digest(flatten([m])[0]) for m in messages]


@dataclass
class _Group:
    """View entries that become one ModelMessage: from one original message (or one marker)."""

    message: int | None
    entries: list[ViewEntry]


def _changed_part(part: Any, entry: ViewEntry) -> Any:
    """A request part carrying the shortened content the view holds (a cut or stubbed tool output)."""
    if dataclasses.is_dataclass(part) and hasattr(part, "content"):
        return dataclasses.replace(part, content=entry.message.get("content"))  # type: ignore[type-var]
    return part


def _changed_response(original: ModelResponse, entry: ViewEntry) -> ModelResponse:
    """A response carrying the view's text and tool arguments (shortened by the last-resort cut or a prune)."""
    args = {c["id"]: c["function"]["arguments"] for c in entry.message.get("tool_calls") or []}
    parts: list[Any] = []
    text_done = False
    for p in original.parts:
        if isinstance(p, TextPart):
            if not text_done:
                parts.append(dataclasses.replace(p, content=str(entry.message.get("content") or "")))
                text_done = True
        elif isinstance(p, ToolCallPart) and p.tool_call_id in args:
            parts.append(dataclasses.replace(p, args=args[p.tool_call_id]))
        else:
            parts.append(p)
    return dataclasses.replace(original, parts=parts)


def _rebuild(view: list[ViewEntry], sources: list[Source], full: Sequence[ModelMessage]) -> list[ModelMessage]:
    groups: list[_Group] = []
    for entry in view:
        owner = sources[entry.origin][0] if entry.origin is not None else None
        if owner is not None and groups and groups[-1].message == owner:
            groups[-1].entries.append(entry)
        else:
            groups.append(_Group(owner, [entry]))
    out: list[ModelMessage] = []
    for group in groups:
        if group.message is None:
            text = str(group.entries[0].message.get("content") or "")
            out.append(ModelResponse(parts=[TextPart(text)]))
            continue
        original = full[group.message]
        if isinstance(original, ModelResponse):
            entry = group.entries[0]
            out.append(original if entry.unchanged else _changed_response(original, entry))
            continue
        kept = [(sources[e.origin][1], e) for e in group.entries if e.origin is not None]
        if len(kept) == len(original.parts) and all(e.unchanged for _, e in kept):
            out.append(original)
            continue
        parts = [
            original.parts[k] if e.unchanged else _changed_part(original.parts[k], e) for k, e in kept if k is not None
        ]
        out.append(dataclasses.replace(original, parts=parts))
    return out


class MicroCompactProcessor:
    """A pydantic-ai history processor: the run's messages in, the compacted view out.

    Keeps, per conversation, the full history each recent view stands for; a call whose messages start
    with one of those views continues that full history."""

    def __init__(self, compactor: HistoryCompactor, key: KeyFunction | None = None) -> None:
        self.compactor = compactor
        self.key = key or opening_key
        self._lock = threading.Lock()
        # conversation key -> [(digests of a view we returned, the full history it stands for)], newest last
        self._views: OrderedDict[str, list[tuple[list[str], list[ModelMessage]]]] = OrderedDict()

    def close(self) -> None:
        """Write what is pending and release the store's writer leases."""
        self.compactor.close()

    def full_history(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """The full history ``messages`` stands for (``messages`` itself when it continues no view of ours)."""
        digests = _message_digests(messages)
        key = self.key(flatten(messages)[0])
        with self._lock:
            remembered = list(self._views.get(key, []))
        best: tuple[int, list[ModelMessage]] | None = None
        for view, full in remembered:
            if digests[: len(view)] == view and (best is None or len(view) > best[0]):
                best = (len(view), full)
        if best is None:
            return list(messages)
        return [*best[1], *messages[best[0] :]]

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        full = self.full_history(messages)
        dicts, sources = flatten(full)
        key = self.key(dicts)
        out = _rebuild(self.compactor.view(key, dicts), sources, full)
        if _same_shape_as_pydantic_ai is not None:
            out = _same_shape_as_pydantic_ai(out)
        with self._lock:
            views = self._views.setdefault(key, [])
            views.append((_message_digests(out), full))
            del views[:-REMEMBERED_VIEWS]
            self._views.move_to_end(key)
            while len(self._views) > self.compactor.router.max_open:
                self._views.popitem(last=False)
        return out


def microcompact_processor(
    context_length: int | None = None,
    *,
    summarizer: Any = None,
    model: str | None = None,
    config: Config | None = None,
    store: SessionStore | None = None,
    key: KeyFunction | None = None,
) -> MicroCompactProcessor:
    """A history processor for ``ProcessHistory`` (or ``history_processors``). ``summarizer`` takes what
    :func:`~microcompact.summarizers.summarizer_from` accepts (an OpenAI or Anthropic client with
    ``model``, a callable); without one the offline extractive summarizer writes the summaries."""
    return MicroCompactProcessor(compactor_for(context_length, summarizer, model, config, store), key)
