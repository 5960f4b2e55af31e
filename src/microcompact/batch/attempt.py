"""One batch compaction (or last-resort cut) as a value: when it started, what it saw, why it runs, and
how far it may go. It builds its :class:`BatchResult` and its telemetry record once, whatever the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine_context import Context
from ..events import BATCH_CHANGED, BATCH_COMPACTIONS, Outcome
from ..telemetry import emit, occupancy_pct
from ..tokens import Ledger
from ..window import Window, WindowBudget
from .policy import Fold


@dataclass
class BatchResult:
    outcome: str
    record: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.outcome in BATCH_CHANGED


@dataclass
class Attempt:
    """One compaction of ``ledger``, started at ``t0``, over ``tokens_before`` tokens in ``messages_before``
    messages, for ``reason``; ``extra`` are the caller's telemetry fields (e.g. micro passes since the
    last batch), ``fold`` what the policy decided for it."""

    context: Context
    ledger: Ledger
    reason: str
    fold: Fold
    t0: float
    tokens_before: int
    messages_before: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, context: Context, ledger: Ledger, reason: str, fold: Fold, extra: dict[str, Any]) -> Attempt:
        return cls(context, ledger, reason, fold, context.clock(), ledger.total, len(ledger.messages), extra)

    @property
    def freed(self) -> int:
        return self.tokens_before - self.ledger.total

    def result(self, outcome: str, compactions: int, **fields: Any) -> BatchResult:
        """The telemetry record (emitted) and the result; over the threshold after a compaction, it says why.

        ``compactions`` is the engine's running total; ``fields`` (None values left out) follow the
        caller's ``extra`` and the reason, in the order given."""
        eng, ledger = self.context, self.ledger
        threshold = eng.config.threshold_tokens()
        record: dict[str, Any] = {
            "event": "batch_compaction",
            "session_id": eng.session_id,
            "outcome": outcome,
            "tokens_before": self.tokens_before,
            "tokens_after": ledger.total,
            "tokens_delta": ledger.total - self.tokens_before,
            "messages_before": self.messages_before,
            "messages_after": len(ledger.messages),
            "duration_ms": round((eng.clock() - self.t0) * 1000, 3),
            "summarizer": getattr(eng.summarizer, "name", "?"),
            "threshold_tokens": threshold,
            "context_limit": eng.config.model.context_length,
            "occupancy_pct": occupancy_pct(eng.counter.estimate_prompt(ledger.total), threshold),
            "compactions_total": compactions,
        }
        merged = {**self.extra, "reason": self.reason, **fields}
        record.update({k: v for k, v in merged.items() if v is not None})
        if record["tokens_after"] > (threshold or record["tokens_after"]) and outcome in (
            BATCH_COMPACTIONS | {Outcome.PRUNED}
        ):
            record["still_over_threshold"] = True
            record.update(self._why_over(ledger))
        emit("batch", record)
        return BatchResult(outcome, record)

    def _why_over(self, ledger: Ledger) -> dict[str, int]:
        """What compaction may not touch (head and tail) and what it keeps verbatim (user messages)."""
        msgs, tokens = ledger.messages, ledger.tokens
        window = Window.of(msgs, tokens, WindowBudget.of(self.context.config))
        h, t = window.head, window.tail
        return {
            "head_tokens": sum(tokens[:h]),
            "tail_tokens": sum(tokens[t:]),
            "middle_user_tokens": sum(tokens[i] for i in range(h, t) if msgs[i].get("role") == "user"),
        }
