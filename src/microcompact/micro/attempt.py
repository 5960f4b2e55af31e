"""One micro pass (or defrag) as a value: when it started, what it saw, why it runs; it builds its
:class:`~.state.PassResult` and its telemetry record once, whatever the outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine_context import Context as Context  # shared with batch; the engine imports it from here
from ..telemetry import emit, occupancy_pct
from ..tokens import Ledger
from .state import PassResult, RollingSummary


@dataclass(frozen=True)
class PassAttempt:
    """A pass of ``mode`` ("turn", "request", "defrag") started at ``t0`` (when it was planned) over a
    transcript of ``tokens_before`` tokens in ``messages_before`` messages (when its outcome is known),
    absorbing ``exchange_tokens``; ``summarizer_ms`` is the time its summarizer call took."""

    context: Context
    ledger: Ledger
    mode: str
    t0: float
    tokens_before: int
    messages_before: int
    exchange_tokens: int = 0
    summarizer_ms: float = 0.0

    @classmethod
    def of(
        cls,
        context: Context,
        ledger: Ledger,
        mode: str,
        t0: float,
        exchange_tokens: int = 0,
        summarizer_ms: float = 0.0,
    ) -> PassAttempt:
        """The attempt as the transcript is now."""
        return cls(context, ledger, mode, t0, ledger.total, len(ledger.messages), exchange_tokens, summarizer_ms)

    def result(self, outcome: str, state: RollingSummary, **fields: Any) -> PassResult:
        """The telemetry record (emitted) and the result; ``fields`` with a None value are left out."""
        eng, ledger = self.context, self.ledger
        duration_ms = (eng.clock() - self.t0) * 1000
        threshold = eng.config.threshold_tokens()
        tokens_after = ledger.total
        record: dict[str, Any] = {
            "event": "micro_compaction",
            "session_id": eng.session_id,
            "outcome": outcome,
            "mode": self.mode,
            "messages_before": self.messages_before,
            "messages_after": len(ledger.messages),
            "tokens_before": self.tokens_before,
            "tokens_after": tokens_after,
            "tokens_delta": tokens_after - self.tokens_before,
            "exchange_tokens": self.exchange_tokens,
            "rolling_summary_tokens": state.text_tokens,
            "cursor": state.cursor,
            "passes_total": state.passes_total,
            "tokens_saved_total": state.tokens_saved_total,
            "duration_ms": round(duration_ms, 3),
            "summarizer_ms": round(self.summarizer_ms, 3),
            "engine_ms": round(max(0.0, duration_ms - self.summarizer_ms), 3),
            "threshold_tokens": threshold,
            "context_limit": eng.config.model.context_length,
            "occupancy_pct": occupancy_pct(eng.counter.estimate_prompt(tokens_after), threshold),
            "aux_model": getattr(eng.summarizer, "name", type(eng.summarizer).__name__),
        }
        record.update({k: v for k, v in fields.items() if v is not None})
        emit("micro", record)
        return PassResult(outcome, record)
