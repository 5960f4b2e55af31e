"""Future-reference recall of a live conversation, one reply at a time, written as a content-free line.

:mod:`microcompact.recall` measures a recorded session after the fact. A proxy can measure its own
conversations as they go, since each request brings the reply the agent wrote to the previous one: that
reply's identifiers first seen in a tool result (the same identifier and source rules) are its *targets*,
and the prompt the proxy forwarded for it is what held them or not. :class:`RecallWatch` keeps, per
conversation, the source of every identifier seen so far and the prompt last sent; the counts of each
measured reply go to the log as ``proxy recall telemetry: {json}`` (:class:`RecallLine`), numbers only,
never an identifier, and ``microcompact report`` sums them per session beside the cost.

What it reads is bounded by what is new: each message is read once (by the identity of its content, so
the copies a view is made of share the reading; a marker once per fold). :class:`RecallWatches` keeps a
watch per conversation object and takes each request's prompt as a reference when it goes up, so the
reading is done after the response (the proxy's follow-up), not on the request's way.
A conversation first seen mid-way (a restart, another process's session, a fork) is read whole at that
request to learn the sources; the identifiers of a marker then count as a tool's (what a fold absorbed was
mostly tool output), and absorbed originals are not read back. The reply to the last request of a
conversation is never measured: no request brings it.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..identifiers import message_identifiers
from ..messages import Message, is_marker
from . import RecallTotals, RequestRecall, Source, source_of

RECALL_TAG = "proxy recall telemetry: "


class _Readings:
    """Each message's identifiers, read once per content: keyed by the identity of its ``content`` and
    ``tool_calls`` objects (a shallow copy shares them), holding those objects so an id is never reused."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int], tuple[Any, Any, frozenset[str]]] = {}

    def __call__(self, message: Message) -> frozenset[str]:
        content, calls = message.get("content"), message.get("tool_calls")
        key = (id(content), id(calls))
        hit = self._known.get(key)
        if hit is not None and hit[0] is content and hit[1] is calls:
            return hit[2]
        found = frozenset(message_identifiers(message))
        self._known[key] = (content, calls, found)
        return found

    def keep_only(self, messages: Iterable[Message]) -> None:
        """Forget every reading but those of ``messages`` (the prompt now held)."""
        wanted = {(id(m.get("content")), id(m.get("tool_calls"))) for m in messages}
        self._known = {k: v for k, v in self._known.items() if k in wanted}


class RecallWatch:
    """One conversation: the source of each identifier seen, and the prompt last sent (or that the client's
    own messages went up whole: they hold every target)."""

    def __init__(self) -> None:
        self.sources: dict[str, Source] = {}
        self._read = _Readings()
        self._prompt: list[Message] = []
        self._whole = False
        self._started = False
        self.replies = 0  # replies measured (each RequestRecall's index)

    def sent(self, prompt: Sequence[Message], new: Sequence[Message], whole: bool = False) -> RequestRecall | None:
        """A request: ``prompt`` is what went up (the view, with metadata), ``new`` its messages the
        conversation did not hold before (in order; the first assistant one is the reply to the previous
        prompt), ``whole`` when the client's own messages were forwarded instead. Returns the recall of that
        reply, or None when there is none to measure (no reply among ``new``, or the conversation is new to
        this watch: then all of ``prompt`` is read for its sources, and the next reply is measured)."""
        measured = None
        if not self._started:
            self._started = True
            self._learn(prompt, markers_are_tools=True)
        else:
            self._learn(new)  # in order: what the reply wrote first is the agent's, even if a result echoes it
            reply = next((m for m in new if m.get("role") == "assistant"), None)
            measured = self._measure(reply) if reply is not None else None
        self._prompt, self._whole = list(prompt), whole
        self._read.keep_only(self._prompt)
        return measured

    def _learn(self, messages: Iterable[Message], markers_are_tools: bool = False) -> None:
        for m in messages:
            source = Source.TOOL if markers_are_tools and is_marker(m) else source_of(m)
            for found in self._read(m):
                self.sources.setdefault(found, source)

    def _measure(self, reply: Message) -> RequestRecall:
        """The reply's targets and those the last prompt lacked (every prompt message was read already as
        new, or is a marker or a message a splice copied: read once)."""
        self.replies += 1
        targets = frozenset(x for x in self._read(reply) if self.sources[x] is Source.TOOL)
        left = set() if self._whole else set(targets)
        for m in self._prompt:
            if not left:
                break
            left -= self._read(m)
        return RequestRecall(self.replies, targets, frozenset(left))


class RecallWatches:
    """A :class:`RecallWatch` per conversation object (weakly held: it goes with the object), and the
    requests sent and not yet read. Thread-safe; one conversation's calls come in its own order."""

    def __init__(self) -> None:
        self._watches: weakref.WeakKeyDictionary[object, RecallWatch] = weakref.WeakKeyDictionary()
        self._queued: weakref.WeakKeyDictionary[object, list[_Sent]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def sent(self, conversation: object, prompt: Sequence[Message], new: Sequence[Message], whole: bool) -> None:
        """Note a request (cheap: references only), to be read by :meth:`settle`."""
        with self._lock:
            self._queued.setdefault(conversation, []).append(_Sent(list(prompt), list(new), whole))

    def settle(self, conversation: object) -> list[RequestRecall]:
        """Read the requests noted for ``conversation``, in order: the recall of each reply measured."""
        with self._lock:
            queued = self._queued.pop(conversation, [])
            watch = self._watches.setdefault(conversation, RecallWatch()) if queued else None
        measured = [watch.sent(q.prompt, q.new, q.whole) for q in queued] if watch is not None else []
        return [m for m in measured if m is not None]


@dataclass(frozen=True)
class _Sent:
    prompt: list[Message]
    new: list[Message]
    whole: bool


@dataclass(frozen=True)
class RecallLine:
    """One measured reply's counts (the ``proxy_recall`` record): its targets and those its prompt held."""

    session_id: str
    targets: int
    present: int

    @classmethod
    def of(cls, session_id: str, measured: RequestRecall) -> RecallLine:
        return cls(session_id, len(measured.targets), measured.present)

    def text(self) -> str:
        """The line's text after the logger's own prefix: the tag, then the record as JSON."""
        record = {"event": "proxy_recall", "session_id": self.session_id, "targets": self.targets}
        record["present"] = self.present
        return RECALL_TAG + json.dumps(record, sort_keys=True, separators=(", ", ": "))


def recall_record(line: str) -> RecallLine | None:
    """The ``proxy_recall`` counts a log line holds, or None (another line, or a malformed one: counts that
    are not whole numbers with ``0 <= present <= targets``)."""
    pos = line.find(RECALL_TAG)
    if pos < 0:
        return None
    try:
        record = json.loads(line[pos + len(RECALL_TAG) :])
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") != "proxy_recall":
        return None
    targets, present = _count(record.get("targets")), _count(record.get("present"))
    if targets is None or present is None or present > targets:
        return None
    return RecallLine(str(record.get("session_id") or "(none)"), targets, present)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def totals(lines: Iterable[RecallLine]) -> RecallTotals:
    """The lines pooled: a line is a request, its targets and present counts add up."""
    total = RecallTotals()
    for line in lines:
        total = total + RecallTotals(1, line.targets, line.present, 1 if line.present < line.targets else 0)
    return total


__all__ = ["RECALL_TAG", "RecallLine", "RecallWatch", "RecallWatches", "recall_record", "totals"]
