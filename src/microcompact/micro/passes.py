"""The slow half of one micro pass: :class:`Merging` asks the summarizer to merge the chosen span into the
rolling summary and returns a :class:`~.state.Planned` pass. It changes nothing (safe on a snapshot in
another thread); the engine's ``commit_planned`` writes and applies it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import Config
from ..events import Span
from ..messages import Message
from ..summarizers import ExtractiveSummarizer, Summarizer, SummaryRejected, clean_summary, prepare_exchange
from ..tokens import Ledger, TokenCounter
from ..window import Window
from .spans import span_key
from .state import Planned, RollingSummary

log = logging.getLogger("microcompact")


class Merging:
    """The summarizer call of a pass, and the deterministic summary when the model's answer is rejected."""

    def __init__(self, config: Config, summarizer: Summarizer, counter: TokenCounter, clock: Callable[[], float]):
        self.config = config
        self.summarizer = summarizer
        self.counter = counter
        self.clock = clock

    def plan(self, ledger: Ledger, state: RollingSummary, mode: str, span: Span, window: Window, t0: float) -> Planned:
        """Merge ``span`` into ``state``'s summary; the result (or the error) is in the :class:`Planned`."""
        msgs = ledger.messages
        absorbed = span.absorbed_indexes(state.marker_index)
        prepared = prepare_exchange([msgs[i] for i in absorbed], window.piece_budget, self.counter.count_text)
        # What the summarizer reads: the exchange as bounded by prepare_exchange, plus the running summary.
        read = min(span.tokens, window.piece_budget) + state.text_tokens
        planned = Planned(
            mode=mode,
            span=span,
            absorbed=absorbed,
            key=span_key(msgs, span.start),
            t0=t0,
            read=read,
            base_summary=state.text,
            marker_index=state.marker_index,
            identity=tuple(msgs[i] for i in range(span.start, span.end)),
        )
        s0 = self.clock()
        limit = state.text_tokens + span.tokens + 256
        try:
            planned.summary = self._clean(self.summarizer.merge(state.text, prepared), limit)
        except SummaryRejected as exc:
            planned.rejected = exc.rejection
            self._deterministic(planned, prepared, limit)
        except Exception as exc:
            planned.error = exc
        planned.summarizer_ms = (self.clock() - s0) * 1000
        return planned

    def _deterministic(self, planned: Planned, prepared: list[Message], limit: int) -> None:
        """The model's answer was rejected: the extractive summary takes over for this exchange at once
        (never a skip, never the same request again)."""
        rejected = planned.rejected
        log.warning(
            "Micro-compaction: model summary rejected at cursor %d (%s); using the deterministic summary",
            planned.span.start,
            rejected.code if rejected else "?",
        )
        try:
            fallback = ExtractiveSummarizer(
                self.counter.count_text, ledger_budget_tokens=self.config.ledger_room_tokens()
            )
            planned.summary = self._clean(fallback.merge(planned.base_summary, prepared), limit)
        except Exception as exc:
            planned.error = exc

    def _clean(self, text: str, limit: int) -> str:
        return clean_summary(text, limit, self.counter.count_text)
