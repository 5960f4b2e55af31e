"""When a batch compaction runs and how far it goes: one replaceable policy object per engine.

:class:`BatchPolicy` is the protocol; :class:`ThresholdPolicy` is the default (today's behaviour): compact
at the threshold, unless paused after compactions that freed too little (or to let the transcript grow
after one that converged), and never paused when the window is at risk. A policy that folds by price
replaces it by passing ``policy=`` to :class:`~microcompact.batch.engine.BatchCompactor`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import Config

log = logging.getLogger("microcompact")


@dataclass(frozen=True)
class Moment:
    """What a policy is given when asked: the request about to be made and what the session knows."""

    counted_tokens: int  # the transcript as counted offline (``Ledger.total``)
    prompt_tokens: int  # the provider's figure for this prompt when handed in, else the calibrated estimate
    reported_tokens: int | None  # the provider's figure as handed in (None: nothing reported)
    at: float  # wall-clock time of the request (``time.time()`` unless the engine was given a clock)
    usage: tuple[tuple[int, int], ...]  # what the session recorded: (counted, provider-reported) per request
    reason: str = "threshold"  # why the engine asks: "threshold" (before a request), "on_demand", ...


@dataclass(frozen=True)
class Fold:
    """How far one compaction goes, decided when it starts.

    ``low_water``: pruning alone (no model call) is enough when it brings the counted transcript to at most
    this many tokens; ``None``: never stop at pruning, summarize everything due (the whole middle).
    ``at_risk``: the window is close enough to overflowing that a failing summarizer is replaced by the
    deterministic extractive summary instead of waiting for it.
    """

    low_water: int | None
    at_risk: bool


class BatchPolicy(Protocol):
    """What a batch scheduling policy must implement (five methods, all of them cheap and none raising).

    - ``due(moment)``: whether a compaction should run before this request (``Session.should_compress``).
    - ``fold(moment)``: how far a compaction that runs now goes (called at the start of every compaction,
      due, forced or on demand; the engine ignores ``low_water`` for forced ones).
    - ``settle(tokens_before, tokens_after, pause_tokens)``: after a compaction that ran to its end
      (compacted, pruned, nothing to compact, too little to free; not after failures, which change
      nothing). ``pause_tokens`` is how far the transcript should grow before the next one is worth it,
      as the summarizing phase estimated (0: no estimate). Returns the transcript size automatic
      compaction now waits for, for the telemetry record, or None.
    - ``memory()`` / ``restore(memory)``: the policy's state as JSON values, carried to the next process
      that continues a stored session (``restore`` may raise TypeError/ValueError on a malformed value;
      the caller then ignores the whole carried record).
    """

    def due(self, moment: Moment) -> bool: ...

    def fold(self, moment: Moment) -> Fold: ...

    def settle(self, tokens_before: int, tokens_after: int, pause_tokens: int) -> int | None: ...

    def memory(self) -> dict[str, Any]: ...

    def restore(self, memory: dict[str, Any]) -> None: ...


class ThresholdPolicy:
    """The default: at the threshold; an anti-thrash pause after low yields; the pause yields near the limit."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.cfg = config.compression
        self.low_yield = 0
        self.paused_below: int | None = None  # automatic compaction paused until the transcript reaches this

    def due(self, moment: Moment) -> bool:
        """True when the prompt (reported, else counted) reaches ``threshold_tokens``."""
        threshold = self.config.threshold_tokens()
        if not self.cfg.enabled or not threshold:
            return False
        tokens = moment.prompt_tokens
        if tokens < threshold:
            return False
        # The pause is in counted tokens (like paused_below), whatever figure triggered the check.
        # Near the limit the pause yields, unless compactions there keep freeing too little as well (a head or
        # tail that cannot shrink): then a summarizer call on every request would help nobody.
        return not (
            self.paused_below is not None
            and moment.counted_tokens < self.paused_below
            and not (self.at_risk(tokens) and self.low_yield < 3)
        )

    def fold(self, moment: Moment) -> Fold:
        """Prune alone when it brings the transcript ``proactive_prune_min_reclaim_tokens`` under the threshold."""
        threshold = self.config.threshold_tokens() or 0
        low_water = threshold - self.cfg.proactive_prune_min_reclaim_tokens if threshold else None
        return Fold(low_water=low_water, at_risk=self.at_risk(moment.prompt_tokens))

    def at_risk(self, tokens: int) -> bool:
        """Halfway from the threshold to the context limit: too close to wait for a cooling summarizer."""
        limit, threshold = self.config.model.context_length, self.config.threshold_tokens()
        if not limit or not threshold:
            return False
        return tokens >= (threshold + limit) / 2

    def settle(self, tokens_before: int, tokens_after: int, pause_tokens: int) -> int | None:
        """Anti-thrash: two compactions in a row that free too little pause automatic compaction."""
        threshold = self.config.threshold_tokens()
        freed = tokens_before - tokens_after
        min_free = int(self.cfg.batch_min_free_ratio * threshold) if threshold else 0
        pause = pause_tokens
        if threshold and freed < min_free:
            self.low_yield += 1
        else:
            self.low_yield = 0
            self.paused_below = None
        if threshold and self.low_yield >= 2:
            self.paused_below = tokens_after + min_free
            log.warning(
                "Batch compaction: freed under %.0f%% of the threshold twice in a row; automatic compaction "
                "paused until the transcript reaches %d tokens",
                100 * self.cfg.batch_min_free_ratio,
                self.paused_below,
            )
        elif threshold and freed >= min_free and tokens_after > threshold:
            # Converge: what stayed (head, tail, verbatim users) keeps it over the threshold, so compacting again
            # at the next request would free little; wait until the transcript has grown meaningfully.
            pause = max(pause, min_free)
        if pause:
            self.paused_below = max(self.paused_below or 0, tokens_after + pause)
        if self.paused_below is not None and (pause or self.low_yield >= 2):
            return self.paused_below
        return None

    def memory(self) -> dict[str, Any]:
        return {"low_yield": self.low_yield, "paused_below": self.paused_below}

    def restore(self, memory: dict[str, Any]) -> None:
        self.low_yield = int(memory.get("low_yield", 0))
        paused = memory.get("paused_below")
        self.paused_below = int(paused) if paused is not None else None
