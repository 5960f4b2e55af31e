"""Future-reference recall: was what the agent used next still in front of it?

A recorded session answers the question without a model or a judge. Each assistant message is the reply
to a request whose prompt was everything before it. The reply's identifiers (:mod:`microcompact.identifiers`:
its text and the values of its tool calls' arguments) that the agent had **first seen in a tool result**
are what it carried over from its work; recall is the share of them still present in the prompt a
compaction policy would have sent at that request.

**The source rule.** Walking the session in order, each identifier gets the role of the first message it
appears in: a tool result (``tool``), the user (``user``), the system prompt (``system``/``developer``) or
the agent itself (``assistant``, its text or its call arguments). Only ``tool`` identifiers are targets:
what a user or a system prompt said is the task, which every policy keeps; what the agent wrote first
(``cat src/x.py``) it can write again. The rule reads the whole session once, so an identifier first
written by the agent in the very reply it is measured at counts as the agent's.

**Presence.** A target is present when some message of the prompt holds it by the same identifier rule
(so a summary that names ``src/app/session.py`` keeps ``session.py`` too, and ``my_session.py`` does not
keep ``session.py``). Everything here is a pure function over message lists; a prompt in another wire
shape is turned into messages first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..identifiers import argument_values, message_identifiers
from ..render import content_text

Message = Mapping[str, Any]


class Source(StrEnum):
    """Who first put an identifier in the conversation."""

    TOOL = "tool"
    USER = "user"
    SYSTEM = "system"
    AGENT = "agent"


_ROLE_SOURCE = {
    "tool": Source.TOOL,
    "function": Source.TOOL,
    "system": Source.SYSTEM,
    "developer": Source.SYSTEM,
    "assistant": Source.AGENT,
}


def source_of(message: Message) -> Source:
    """The source a message's identifiers get when it is the first to hold them (any other role: the user)."""
    return _ROLE_SOURCE.get(str(message.get("role")), Source.USER)


def message_key(message: Message) -> str:
    """What decides a message's identifiers and size: its role, text and tool-call names and arguments
    (metadata, ids and spelling left out), so two copies of one message share cached figures."""
    calls = [
        (str(f.get("name", "")), list(argument_values(f.get("arguments", ""))))
        for c in message.get("tool_calls") or ()
        if isinstance(c, Mapping) and isinstance(f := c.get("function"), Mapping)
    ]
    return json.dumps([message.get("role"), content_text(message), calls], ensure_ascii=False)


class IdentifierReader:
    """``message_identifiers`` with a cache keyed by :func:`message_key`: a session's prompts repeat the
    same messages request after request. ``key`` may be a faster spelling of :func:`message_key` (one
    that remembers the messages it saw)."""

    def __init__(self, key: Callable[[Message], str] = message_key) -> None:
        self._known: dict[str, frozenset[str]] = {}
        self._key = key

    def __call__(self, message: Message) -> frozenset[str]:
        key = self._key(message)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = frozenset(message_identifiers(message))
        return found


def first_sources(messages: Iterable[Message], read: IdentifierReader | None = None) -> dict[str, Source]:
    """Each identifier of the session and the source of the first message holding it."""
    read = read or IdentifierReader()
    sources: dict[str, Source] = {}
    for message in messages:
        source = source_of(message)
        for found in read(message):
            sources.setdefault(found, source)
    return sources


def reply_indexes(messages: Sequence[Message]) -> list[int]:
    """The index of every assistant message: each is the reply to one model request (its prompt: all
    that came before it)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def reply_targets(messages: Sequence[Message], read: IdentifierReader | None = None) -> dict[int, frozenset[str]]:
    """For each reply (by index), the identifiers it uses that the agent first saw in a tool result."""
    read = read or IdentifierReader()
    sources = first_sources(messages, read)
    return {i: frozenset(x for x in read(messages[i]) if sources[x] is Source.TOOL) for i in reply_indexes(messages)}


def missing_from(
    targets: Iterable[str], prompt: Sequence[Message], read: IdentifierReader | None = None
) -> frozenset[str]:
    """The targets no message of ``prompt`` holds."""
    read = read or IdentifierReader()
    left = set(targets)
    for message in prompt:
        if not left:
            break
        left -= read(message)
    return frozenset(left)


@dataclass(frozen=True)
class RequestRecall:
    """One request: the reply's targets and those its prompt had lost."""

    index: int  # the reply's index in the session
    targets: frozenset[str]
    missing: frozenset[str]

    @property
    def present(self) -> int:
        return len(self.targets) - len(self.missing)

    @property
    def recall(self) -> float | None:
        """The share of targets present (None when the reply used nothing a tool showed)."""
        return self.present / len(self.targets) if self.targets else None


def request_recall(
    index: int, targets: frozenset[str], prompt: Sequence[Message], read: IdentifierReader | None = None
) -> RequestRecall:
    return RequestRecall(index, targets, missing_from(targets, prompt, read))


@dataclass(frozen=True)
class RecallTotals:
    """Recall over many requests: pooled over targets (a request using ten identifiers weighs ten)."""

    requests: int = 0
    targets: int = 0
    present: int = 0
    losing: int = 0  # requests whose prompt lost at least one target

    @classmethod
    def of(cls, results: Iterable[RequestRecall]) -> RecallTotals:
        total = cls()
        for r in results:
            total = total + cls(1, len(r.targets), r.present, 1 if r.missing else 0)
        return total

    def __add__(self, other: RecallTotals) -> RecallTotals:
        return RecallTotals(
            self.requests + other.requests,
            self.targets + other.targets,
            self.present + other.present,
            self.losing + other.losing,
        )

    @property
    def recall(self) -> float | None:
        return self.present / self.targets if self.targets else None


__all__ = [
    "IdentifierReader",
    "RecallTotals",
    "RequestRecall",
    "Source",
    "first_sources",
    "message_key",
    "missing_from",
    "reply_indexes",
    "reply_targets",
    "request_recall",
    "source_of",
]
