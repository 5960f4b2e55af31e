"""Micro-compaction: after each completed turn, fold the oldest not-yet-summarized exchange into one rolling
summary, kept as a single assistant-role marker message.

Modules, one job each:

- :mod:`.state`: the rolling state and the values a pass hands around (``RollingSummary``, ``Planned``,
  ``Condensed``, ``PassResult``);
- :mod:`.policy`: when a pass runs and how many (``MicroPolicy``, the protocol a replacement implements;
  ``CadencePolicy``, the default: cadence, long turns, cache-aware deferral and catch-up);
- :mod:`.spans`: what it absorbs (boundaries allowed by :mod:`microcompact.properties`, in one ``Window``);
- :mod:`.passes`: the summarizer call of a pass; :mod:`.defrag`: keep the summary short;
- :mod:`.attempt`: one pass as a value that builds its record and ``PassResult`` once;
- :mod:`.engine`: ``MicroCompactor``, which composes the above, commits and applies, and recovers the cursor;
- :mod:`.fold_job`: a fold computed on the background worker (``FoldJob``) and its ``FoldStage``;
- :mod:`.ahead`: ``ShadowFolds``, what the background worker asks about such folds (run, adopt, extend);
- :mod:`.pure`: ``micro_compact()``, the pure-function form.
"""

from ..events import CommitHook
from .defrag import DEFRAG_MAX_RATIO
from .engine import MicroCompactor
from .fold_job import FoldJob, FoldStage
from .policy import MAX_CATCH_UP_PASSES, CadencePolicy, Fold, FoldPlan, MicroPolicy, Moment, PassMode, WorkerMode
from .pure import micro_compact
from .spans import span_key
from .state import Condensed, MicroStats, PassResult, Planned, RollingSummary

__all__ = [
    "DEFRAG_MAX_RATIO",
    "MAX_CATCH_UP_PASSES",
    "CadencePolicy",
    "CommitHook",
    "Condensed",
    "Fold",
    "FoldJob",
    "FoldPlan",
    "FoldStage",
    "MicroCompactor",
    "MicroPolicy",
    "MicroStats",
    "Moment",
    "PassMode",
    "PassResult",
    "Planned",
    "RollingSummary",
    "WorkerMode",
    "micro_compact",
    "span_key",
]
