"""The part every adapter shares: a framework's full history (as OpenAI-format dicts) in, the compacted view
out, each view message saying which client message it is an unchanged copy of.

Adapters convert the framework's messages to OpenAI-format dicts, call :meth:`HistoryCompactor.view`, and
build the framework's messages back: an unchanged copy becomes the framework's original object (so nothing
the dict form leaves out is lost), a marker or a shortened tool output is converted from its dict.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..identity import DIGEST_KEY, digest, hid_of
from ..messages import Message, to_api
from ..router import SessionRouter
from ..session import Convert
from ..summarizers import Summarizer, summarizer_from

if TYPE_CHECKING:
    from ..store import SessionStore

# Names a conversation when the framework gives none: the digest of its opening message.
KeyFunction = Callable[[Sequence[Message]], str]


def require(module: str, extra: str) -> ModuleType:
    """Import a framework, or raise ImportError in one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"microcompact.integrations needs {module!r}: pip install 'microcompact[{extra}]' ({exc})"
        ) from None


def opening_key(history: Sequence[Message]) -> str:
    """A conversation's key from its opening: the messages up to and including the first user message.
    Histories that share an opening go to one key, whose branches
    (:class:`~microcompact.router.SessionRouter`) keep conversations that part ways apart."""
    end = next((i + 1 for i, m in enumerate(history) if m.get("role") == "user"), min(1, len(history)))
    return "conv-" + digest(list(history[:end]))[:20]


def adapter_config(context_length: int | None, config: Config | None) -> Config:
    """``config`` (default: micro-compaction on) with the model's window set when given."""
    base = config or Config().with_overrides(compression={"micro_compact": True})
    if context_length is None:
        return base
    return base.with_overrides(model={"context_length": context_length})


@dataclass(frozen=True)
class ViewEntry:
    """One message of the compacted view."""

    message: Message  # the OpenAI-format message to send (no library metadata)
    origin: int | None  # the client message it stands for (None: a summary marker)
    unchanged: bool  # True: exactly that client message (send the framework's original)


class HistoryCompactor:
    """Routes each full history to its session (one per conversation, forked when a history parts ways)
    and returns the compacted view. Thread-safe; one conversation's calls are serialized."""

    def __init__(
        self,
        context_length: int | None = None,
        *,
        config: Config | None = None,
        store: SessionStore | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.config = adapter_config(context_length, config)
        self.router = SessionRouter(self.config, store=store, summarizer=summarizer)

    def view(self, key: str, history: Sequence[Message], convert: Convert | None = None) -> list[ViewEntry]:
        """The compacted view of ``history`` (OpenAI-format dicts, the conversation's whole list so far).

        The previous turn is finalized when the new messages include one a person wrote, and the
        pre-request passes run, exactly as :meth:`Session.compacted` does; the router picks (or forks) the
        session the history continues."""
        with self.router.lock(key):
            routed = self.router.route(key, history, convert)
            session = routed.session
            if routed.sync.ends_turn:
                session.finalize_turn()
            session.before_request()
            transcript = session.transcript
        return [_entry(m) for m in transcript]

    def close(self) -> None:
        """Close every open session: what is pending is written and the store's writer leases released."""
        self.router.close()


def compactor_for(
    context_length: int | None, summarizer: Any, model: str | None, config: Config | None, store: SessionStore | None
) -> HistoryCompactor:
    """The compactor an adapter's options describe: ``summarizer`` is anything
    :func:`~microcompact.summarizers.summarizer_from` accepts (with ``model``); None: the offline one."""
    chosen = summarizer_from(summarizer, model) if summarizer is not None else None
    return HistoryCompactor(context_length, config=config, store=store, summarizer=chosen)


def _entry(message: Message) -> ViewEntry:
    api = to_api([message])[0]
    origin = hid_of(message)
    unchanged = origin is not None and message.get(DIGEST_KEY) == digest(api)
    return ViewEntry(api, origin, unchanged)
