"""Micro-compaction: after each completed turn, fold the oldest not-yet-summarized exchange into one rolling
summary, kept as a single assistant-role marker message.

Modules, one job each:

- :mod:`.state`: the rolling state and the values a pass hands around (``RollingSummary``, ``Planned``,
  ``Condensed``, ``PassResult``);
- :mod:`.scheduling`: when a pass runs (cadence, long turns, cache-aware deferral and catch-up);
- :mod:`.spans`: what it absorbs (boundaries allowed by :mod:`microcompact.properties`, in one ``Window``);
- :mod:`.passes`: plan, commit through the store, apply, report; :mod:`.defrag`: keep the summary short;
- :mod:`.engine`: ``MicroCompactor`` (assembled from the above) and cursor recovery;
- :mod:`.pure`: ``micro_compact()``, the pure-function form.

Every name ``microcompact.micro`` offered when it was one module is importable from here.
"""

from ..events import Absorb, CommitHook, Event, Outcome, Rewrite, Span, apply_event
from .defrag import DEFRAG_MAX_RATIO
from .engine import MicroCompactor
from .passes import commit_or_log, log
from .pure import micro_compact
from .scheduling import MAX_CATCH_UP_PASSES
from .spans import span_key
from .state import Condensed, PassResult, Planned, RollingSummary

__all__ = [
    "DEFRAG_MAX_RATIO",
    "MAX_CATCH_UP_PASSES",
    "Absorb",
    "CommitHook",
    "Condensed",
    "Event",
    "MicroCompactor",
    "Outcome",
    "PassResult",
    "Planned",
    "Rewrite",
    "RollingSummary",
    "Span",
    "apply_event",
    "commit_or_log",
    "log",
    "micro_compact",
    "span_key",
]
