"""How every batch compaction ends: the anti-thrash pause, convergence, and the telemetry record, returned
as a :class:`BatchResult`.

:class:`Finish` is a mixin of :class:`~microcompact.batch.engine.BatchCompactor`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import CompressionConfig, Config
from ..events import BATCH_CHANGED, BATCH_COMPACTIONS, Outcome
from ..telemetry import emit, occupancy_pct
from ..tokens import Ledger, TokenCounter
from ..window import Window

if TYPE_CHECKING:
    from ..summarizers import Summarizer

log = logging.getLogger("microcompact")


@dataclass
class BatchResult:
    outcome: str
    record: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.outcome in BATCH_CHANGED


class Finish:
    """The last step of every compaction, whatever its outcome."""

    if TYPE_CHECKING:  # provided by BatchCompactor
        config: Config
        cfg: CompressionConfig
        counter: TokenCounter
        summarizer: Summarizer
        session_id: str
        clock: Callable[[], float]
        compactions: int
        low_yield: int
        paused_below: int | None
        _extra: dict[str, Any]

    def _done(
        self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
    ) -> BatchResult:
        """Anti-thrash: two compactions in a row that free too little pause automatic compaction."""
        threshold = self.config.threshold_tokens()
        freed = before_tokens - ledger.total
        min_free = int(self.cfg.batch_min_free_ratio * threshold) if threshold else 0
        pause = extra.pop("pause_tokens", 0)
        if threshold and freed < min_free:
            self.low_yield += 1
        else:
            self.low_yield = 0
            self.paused_below = None
        if threshold and self.low_yield >= 2:
            self.paused_below = ledger.total + min_free
            log.warning(
                "Batch compaction: freed under %.0f%% of the threshold twice in a row; automatic compaction "
                "paused until the transcript reaches %d tokens",
                100 * self.cfg.batch_min_free_ratio,
                self.paused_below,
            )
        elif threshold and freed >= min_free and ledger.total > threshold:
            # Converge: what stayed (head, tail, verbatim users) keeps it over the threshold, so compacting again
            # at the next request would free little; wait until the transcript has grown meaningfully.
            pause = max(pause, min_free)
        if pause:
            self.paused_below = max(self.paused_below or 0, ledger.total + pause)
        if self.paused_below is not None and (pause or self.low_yield >= 2):
            extra["paused_until_tokens"] = self.paused_below
        return self._finish(ledger, outcome, t0, before_tokens, before_messages, **extra)

    def _finish(
        self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
    ) -> BatchResult:
        """The telemetry record (emitted) and the result; over the threshold after a compaction, it says why."""
        threshold = self.config.threshold_tokens()
        record: dict[str, Any] = {
            "event": "batch_compaction",
            "session_id": self.session_id,
            "outcome": outcome,
            "tokens_before": before_tokens,
            "tokens_after": ledger.total,
            "tokens_delta": ledger.total - before_tokens,
            "messages_before": before_messages,
            "messages_after": len(ledger.messages),
            "duration_ms": round((self.clock() - t0) * 1000, 3),
            "summarizer": getattr(self.summarizer, "name", "?"),
            "threshold_tokens": threshold,
            "context_limit": self.config.model.context_length,
            "occupancy_pct": occupancy_pct(self.counter.estimate_prompt(ledger.total), threshold),
            "compactions_total": self.compactions,
        }
        record.update({k: v for k, v in {**self._extra, **extra}.items() if v is not None})
        if record["tokens_after"] > (threshold or record["tokens_after"]) and outcome in (
            BATCH_COMPACTIONS | {Outcome.PRUNED}
        ):
            record["still_over_threshold"] = True
            # Why: what compaction may not touch (head and tail) and what it keeps verbatim (user messages).
            msgs, tokens = ledger.messages, ledger.tokens
            window = Window.of(msgs, tokens, self.config)
            h, t = window.head, window.tail
            record["head_tokens"] = sum(tokens[:h])
            record["tail_tokens"] = sum(tokens[t:])
            record["middle_user_tokens"] = sum(tokens[i] for i in range(h, t) if msgs[i].get("role") == "user")
        emit("batch", record)
        return BatchResult(outcome, record)
