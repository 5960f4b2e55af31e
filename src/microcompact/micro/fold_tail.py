"""The tail a fold's passes leave alone: the configured one, shrunk to the fold's low-water mark.

A fold keeps what its low-water mark holds after its marker, in tokens, and at least
:meth:`~microcompact.config.Config.fold_min_messages` messages. A fold computed ahead (adopted a request
or more later) keeps less of the transcript it ran on, down to nothing: the messages added before it is
adopted are the tail of the view it switches to, and such a fold is adopted only once there are some
(:attr:`~microcompact.micro.engine.FoldJob.open_end`). An empty tail still keeps a call at the end whose
results have not come (:func:`~microcompact.window.tail_start`): they come after it, never after a marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..config import FALLBACK_CONTEXT_LIMIT, Config
from .policy import Fold

# The smallest tail share a fold's config may carry (target_ratio must stay above zero).
MIN_TARGET_RATIO = 0.001


def fold_config(config: Config, tail_tokens: int | None, tail_messages: int | None) -> Config:
    """``config`` with its protected tail shrunk to ``tail_tokens`` and to at least ``tail_messages``
    messages (never grown; ``config`` itself when neither shrinks it). ``tail_messages=0`` allows an empty
    tail, which no user config may ask for: only a fold computed ahead runs with it."""
    c = config.compression
    if tail_tokens is not None and tail_tokens >= config.tail_budget_tokens():
        tail_tokens = None
    if tail_messages is not None and tail_messages >= c.min_tail_messages:
        tail_messages = None
    if tail_tokens is None and tail_messages is None:
        return config
    compression: dict[str, Any] = {}
    if tail_tokens is not None:
        limit = config.model.context_length or FALLBACK_CONTEXT_LIMIT
        compression["target_ratio"] = max(MIN_TARGET_RATIO, tail_tokens / (c.threshold * limit))
    if tail_messages is not None:
        compression["min_tail_messages"] = max(1, tail_messages)
    shrunk = config.with_overrides(source="a fold's low-water mark", compression=compression)
    if tail_messages == 0:  # below the range a config file may set: copied in, not validated
        emptied = shrunk.compression.model_copy(update={"min_tail_messages": 0})
        shrunk = shrunk.model_copy(update={"compression": emptied})
    return shrunk


def ends_open(folds: Iterable[Fold]) -> bool:
    """True when one of ``folds`` may leave its snapshot's tail empty (a fold computed ahead)."""
    return any(f.tail_messages == 0 for f in folds)
