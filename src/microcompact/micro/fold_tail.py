"""The tail a fold's passes leave alone: the configured one, shrunk to the fold's low-water mark.

A fold keeps what its low-water mark holds after its marker, in tokens, and at least
:meth:`~microcompact.config.Config.fold_min_messages` messages. A fold computed ahead (adopted a request
or more later) keeps less of the transcript it ran on, down to nothing: the messages added before it is
adopted are the tail of the view it switches to, and such a fold is adopted only once there are some
(:attr:`~microcompact.micro.fold_job.FoldJob.open_end`). An empty tail still keeps a call at the end whose
results have not come (:func:`~microcompact.window.tail_start`): they come after it, never after a marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..config import FALLBACK_CONTEXT_LIMIT, Config
from ..messages import Message
from ..window import Window, WindowBudget
from .in_use_spans import kept_zone
from .policy import Fold, FoldEstimate
from .state import RollingSummary
from .working_set import WorkingSet

# The smallest tail a fold keeps in tokens, as a share of the tail budget's base (the threshold's tokens):
# 100 tokens at a 200K window.
MIN_TAIL_SHARE = 0.001


def fold_budget(
    config: Config, budget: WindowBudget, tail_tokens: int | None, tail_messages: int | None
) -> WindowBudget:
    """``budget`` (``config``'s) with its protected tail shrunk to ``tail_tokens`` (at least
    ``MIN_TAIL_SHARE`` of the threshold) and to ``tail_messages`` messages; never grown. ``tail_messages=0``
    allows an empty tail, which no user config may ask for: only a fold computed ahead runs with it."""
    if tail_tokens is None or tail_tokens >= budget.tail_tokens:
        return budget.narrowed(None, tail_messages)
    threshold, limit = config.compression.threshold, config.model.context_length or FALLBACK_CONTEXT_LIMIT
    # A share of the threshold's tokens, rounded as the configured tail budget is (Config.tail_budget_tokens).
    share = max(MIN_TAIL_SHARE, tail_tokens / (threshold * limit))
    return budget.narrowed(int(share * threshold * limit), tail_messages)


def fold_estimate(
    msgs: Sequence[Message],
    tokens: Sequence[int],
    window: Window,
    state: RollingSummary,
    in_use: tuple[WorkingSet, frozenset[int]] | None = None,
) -> FoldEstimate:
    """What a fold over ``window`` (the low-water mark's) would take now, from ``state``'s cursor and
    marker (see :class:`FoldEstimate`): O(middle). ``in_use``: the working set and the iterations a fold
    keeps (``MicroCompactor._working_set_keep``); kept ones are not absorbable, in-use ones not kept are
    re-fetches, and a kept-zone iteration no longer kept moves the change point back to it (the fold
    absorbs it, :func:`.in_use_spans.keep_in_use`)."""
    start = max(state.cursor or 0, window.head)
    middle = zip(msgs[start : window.tail], tokens[start : window.tail], strict=True)
    absorbable = sum(t for m, t in middle if m.get("role") != "user")
    old_marker = tokens[state.marker_index] if state.marker_index is not None else 0
    change = state.marker_index if state.marker_index is not None else start
    if in_use is None:
        return FoldEstimate(sum(tokens[:change]), absorbable, old_marker)
    ws, keep = in_use
    zone = kept_zone(msgs, state.marker_index, window.head)
    if zone is not None and state.marker_index is not None:
        released = [s for s in ws.iterations if zone <= s < state.marker_index and s not in keep]
        if released:
            change = min(released)
            absorbable += ws.tokens(tokens, released)
    absorbable -= ws.tokens(tokens, [s for s in keep if start <= s < window.tail])
    kept = ws.tokens(tokens, [s for s in keep if change <= s < window.tail])
    gone = [s for s in ws.in_use if s not in keep and change <= s < window.tail]
    return FoldEstimate(sum(tokens[:change]), max(0, absorbable), old_marker, kept, len(gone), ws.tokens(tokens, gone))


def ends_open(folds: Iterable[Fold]) -> bool:
    """True when one of ``folds`` may leave its snapshot's tail empty (a fold computed ahead)."""
    return any(f.tail_messages == 0 for f in folds)
