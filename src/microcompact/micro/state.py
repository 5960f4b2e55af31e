"""What micro-compaction remembers between passes, and the values a pass hands around.

:class:`RollingSummary` is the state: summary text, cursor (first message not yet processed), where the
micro marker sits, failure counts, running totals. It can always be recovered from the transcript.
:class:`Planned` and :class:`Condensed` are the slow halves of a pass and of defrag, computed before anything
is written; :class:`PassResult` is what a pass reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import Outcome, Span
from ..messages import Message
from ..summarizers import Rejection


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
