"""Micro-compaction: after each completed turn, fold the oldest not-yet-summarized exchange into one rolling
summary, kept as a single assistant-role marker message.

This package re-exports every name that ``microcompact.micro`` offered when it was one module, so
``from microcompact.micro import X`` keeps working.
"""

from ..events import Absorb, CommitHook, Event, Outcome, Rewrite, Span, apply_event
from .engine import (
    DEFRAG_MAX_RATIO,
    MAX_CATCH_UP_PASSES,
    Condensed,
    MicroCompactor,
    PassResult,
    Planned,
    RollingSummary,
    commit_or_log,
    log,
    micro_compact,
    span_key,
)

__all__ = [
    "Absorb", "CommitHook", "Event", "Outcome", "Rewrite", "Span", "apply_event",
    "DEFRAG_MAX_RATIO", "MAX_CATCH_UP_PASSES", "Condensed", "MicroCompactor", "PassResult", "Planned",
    "RollingSummary", "commit_or_log", "log", "micro_compact", "span_key",
]
