"""What micro-compaction remembers between passes, and the values a pass hands around.

:class:`RollingSummary` is the state: summary text, cursor (first message not yet processed), where the
micro marker sits, failure counts, running totals. It can always be recovered from the transcript.
:class:`Planned` and :class:`Condensed` are the slow halves of a pass and of defrag, computed before anything
is written; :class:`PassResult` is what a pass reports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..events import Outcome, Span
from ..messages import Message, marker_kind
from ..summarizers import Rejection

log = logging.getLogger("microcompact")


@dataclass(frozen=True)
class MicroStats:
    """The running totals other modules (replay, compare, the report) read."""

    passes_total: int
    tokens_saved_total: int
    largest_pass_tokens: int
    summarizer_ms_total: float


@dataclass
class RollingSummary:
    """Everything micro-compaction remembers between passes; recoverable from the last marker."""

    text: str = ""
    text_tokens: int = 0
    cursor: int | None = None
    marker_index: int | None = None
    failures: dict[str, int] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    gate_floor: tuple[str, int] | None = None  # (span key, tokens) of the last span the reclaim gate refused
    turns: int = 0
    passes_total: int = 0
    tokens_saved_total: int = 0

    def fits(self, msgs: list[Message], head: int) -> bool:
        """True when the cursor lies between ``head`` and the end of ``msgs`` and the marker, if any, is a
        micro marker before it (O(1): no scan)."""
        if self.cursor is None or not head <= self.cursor <= len(msgs):
            return False
        mi = self.marker_index
        return mi is None or (mi < self.cursor and mi < len(msgs) and marker_kind(msgs[mi]) == "micro")

    def memory(self) -> dict[str, Any]:
        """What a stored session carries of it: failures, the gate's floor, the cursor, the running totals."""
        return {
            "failures": dict(self.failures),
            "gate_floor": list(self.gate_floor) if self.gate_floor is not None else None,
            "cursor": self.cursor,
            "marker_index": self.marker_index,
            "passes_total": self.passes_total,
            "tokens_saved_total": self.tokens_saved_total,
        }

    def restore_totals(self, memory: dict[str, Any]) -> None:
        """The running totals of :meth:`memory` (TypeError/ValueError on a malformed value)."""
        self.passes_total = int(memory.get("passes_total", 0))
        self.tokens_saved_total = int(memory.get("tokens_saved_total", 0))

    def restore_position(self, memory: dict[str, Any]) -> None:
        """The cursor and the marker's place of :meth:`memory` (the cursor kept when it carries none)."""
        cursor, marker = memory.get("cursor"), memory.get("marker_index")
        self.cursor = int(cursor) if cursor is not None else self.cursor
        self.marker_index = int(marker) if marker is not None else None

    def restore_failures(self, memory: dict[str, Any]) -> None:
        """The failure counts and the gate's floor of :meth:`memory`."""
        self.failures = {str(k): int(v) for k, v in (memory.get("failures") or {}).items()}
        floor = memory.get("gate_floor")
        self.gate_floor = (str(floor[0]), int(floor[1])) if floor else None

    def count_failure(self, key: str, span: Span, max_failures: int) -> str:
        """A summarizer call failed on the exchange ``key``: counted, and skipped (the cursor moves past it)
        after ``max_failures`` in a row. The outcome to report."""
        self.failures[key] = self.failures.get(key, 0) + 1
        if self.failures[key] < max_failures:
            return Outcome.SUMMARIZE_FAILED
        log.info(
            "Micro-compaction: skipping exchange at cursor %d after %d consecutive failures", span.start, max_failures
        )
        self.failures.pop(key, None)
        self.skipped.add(key)
        self.cursor = span.end
        return Outcome.EXCHANGE_SKIPPED


def last_markers(msgs: list[Message], head: int) -> tuple[int | None, int | None]:
    """(the last marker of any kind, the last micro marker) at or after ``head``; None where there is none."""
    last_any = None
    for i in range(len(msgs) - 1, head - 1, -1):
        kind = marker_kind(msgs[i])
        if kind is None:
            continue
        if last_any is None:
            last_any = i
        if kind == "micro":
            return last_any, i
    return last_any, None


class Refusal:
    """Set once the summarizer refused credentials or quota: retrying cannot help, so no more calls in this
    session (shared by passes and defrag)."""

    def __init__(self) -> None:
        self.error: str | None = None


@dataclass
class Planned:
    """A pass whose summarizer call is done (or failed) but that has not touched the transcript yet."""

    mode: str
    span: Span
    absorbed: tuple[int, ...]
    key: str
    t0: float
    read: int
    base_summary: str
    marker_index: int | None
    identity: tuple[Message, ...]  # the span's message objects when planned, to detect a changed transcript
    summary: str | None = None
    error: Exception | None = None
    summarizer_ms: float = 0.0
    rejected: Rejection | None = None  # the model's answer failed the checks; ``summary`` is deterministic


@dataclass
class Condensed:
    """A defrag result computed ahead of the rewrite (in background mode, on the worker thread)."""

    text: str
    old_tokens: int
    new: str | None = None
    outcome: str = Outcome.DEFRAG
    method: str = "model"
    error: str | None = None
    summarizer_ms: float = 0.0


@dataclass
class PassResult:
    outcome: str
    record: dict[str, Any]
    # A fold's pass already handed on, adopted or spent (``BackgroundPasses.take_spent``): a fold that extends
    # another carries its passes, which are billed once.
    accounted: bool = field(default=False, compare=False)
