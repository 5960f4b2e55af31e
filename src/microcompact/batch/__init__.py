"""Batch compaction at the threshold: the long pause micro-compaction postpones, kept for when it is due.

Two phases, cheapest first:

1. **Prune** (no model): old tool outputs in the middle become one-line stubs, identical older outputs
   are de-duplicated, oversized tool-call arguments are shortened while staying valid JSON. If that alone
   frees enough, stop.
2. **Summarize**, in time order: the middle is split at its kept user messages into runs of work; each run
   (with the earlier markers in it as its previous summary) becomes its own batch marker (the same marker
   format as micro-compaction) at the run's place, one summarizer call per run, at most
   ``batch_max_calls`` (older runs: the deterministic extractive summary). User messages stay verbatim and
   individual. Only when they (with a marker frame per run, and earlier markers kept as they are) exceed
   ``batch_user_floor_ratio`` of the threshold are the oldest folded into the run they sit in, and the
   outcome says so (``user_floor_exceeded``).

Failures never change the transcript. A failing summarizer backs off (longer after repeated timeouts,
shorter after malformed output, never retried on authentication or quota errors); when the transcript is
at risk of overflowing the context window, the deterministic extractive summary is used instead so the
session can go on. Two compactions in a row that free too little pause automatic compaction until the
transcript has grown meaningfully.

Modules, one job each:

- :mod:`.policy`: when a compaction is due and how far it goes (:class:`BatchPolicy`, the protocol a
  replacement implements; :class:`ThresholdPolicy`, the default: threshold, pause, risk);
- :mod:`.attempt`: one compaction as a value that builds its record and :class:`BatchResult` once;
- :mod:`.prune`: stubs, shortened tool-call arguments, the head-and-tail cut (pure functions);
- :mod:`.runs`: the middle split into runs of work, and the event that keeps time order;
- :mod:`.summarize`: phase 2, step by step; :mod:`.calls`: one summarizer call, bounded and safe;
- :mod:`.backoff`: when the summarizer may be called again after a failure;
- :mod:`.user_floor`: which user messages stay verbatim, and when the oldest are folded;
- :mod:`.last_resort`: cutting messages when a request would not fit the window;
- :mod:`.engine`: :class:`BatchCompactor`, which composes the above, runs phase 1 and commits.
"""

from .attempt import BatchResult
from .backoff import Backoff
from .calls import FALLBACK_NOTE, OMITTED_MESSAGES, SummarizerCalls
from .engine import BatchCompactor, BatchStats
from .last_resort import CUT_KEEP_TOKENS, CUT_MARGIN_MIN_TOKENS, CUT_MARGIN_SHARE, CUT_MIN_TOKENS, CUT_NOTE_TOKENS
from .policy import BatchPolicy, Fold, Moment, ThresholdPolicy
from .prune import CUT_NOTE, cut_message, plan_prune, shorten_arguments
from .runs import chronological_event, split_runs
from .summarize import SUMMARY_ALLOWANCE_TOKENS
from .user_floor import FOLD_TARGET

__all__ = [
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
    "BatchPolicy",
    "BatchResult",
    "BatchStats",
    "Fold",
    "Moment",
    "SummarizerCalls",
    "ThresholdPolicy",
    "chronological_event",
    "cut_message",
    "plan_prune",
    "shorten_arguments",
    "split_runs",
]
