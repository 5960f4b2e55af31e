"""Batch compaction at the threshold (see :mod:`.engine`).

Every name ``microcompact.batch`` offered when it was one module is importable from here (the private
helpers too, by redundant aliases).
"""

from ..events import BatchCompact, CommitHook, Outcome, Prune, apply_event, commit_or_log
from .engine import _STORE_ONLY_KEYS as _STORE_ONLY_KEYS
from .engine import (
    CUT_KEEP_TOKENS,
    CUT_MARGIN_MIN_TOKENS,
    CUT_MARGIN_SHARE,
    CUT_MIN_TOKENS,
    CUT_NOTE,
    CUT_NOTE_TOKENS,
    FALLBACK_NOTE,
    FOLD_TARGET,
    OMITTED_MESSAGES,
    SUMMARY_ALLOWANCE_TOKENS,
    Backoff,
    BatchCompactor,
    BatchResult,
    chronological_event,
    cut_message,
    log,
    plan_prune,
    shorten_arguments,
    split_runs,
)
from .engine import _cuttable as _cuttable
from .engine import _digest as _digest
from .engine import _is_stub as _is_stub
from .engine import _Run as _Run

__all__ = [
    "BatchCompact",
    "CommitHook",
    "Outcome",
    "Prune",
    "apply_event",
    "commit_or_log",
    "CUT_KEEP_TOKENS",
    "CUT_MARGIN_MIN_TOKENS",
    "CUT_MARGIN_SHARE",
    "CUT_MIN_TOKENS",
    "CUT_NOTE",
    "CUT_NOTE_TOKENS",
    "FALLBACK_NOTE",
    "FOLD_TARGET",
    "OMITTED_MESSAGES",
    "SUMMARY_ALLOWANCE_TOKENS",
    "Backoff",
    "BatchCompactor",
    "BatchResult",
    "chronological_event",
    "cut_message",
    "log",
    "plan_prune",
    "shorten_arguments",
    "split_runs",
]
