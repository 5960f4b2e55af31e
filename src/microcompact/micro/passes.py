"""One micro pass, in two halves: :meth:`Passes.plan` (choose the span, call the summarizer; changes nothing,
safe on a snapshot in another thread) and :meth:`Passes.commit_planned` (hand the :class:`Absorb` event to
the caller's commit hook, i.e. the store, then apply it in memory). A failing commit leaves memory exactly as
it was. Every outcome ends in :meth:`Passes._finish`, which emits the telemetry record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import CompressionConfig, Config
from ..events import Absorb, CommitHook, Event, Outcome, Span, apply_event, commit_or_log
from ..messages import Message, render_micro_marker
from ..summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummaryRejected,
    clean_summary,
    prepare_exchange,
)
from ..telemetry import emit, occupancy_pct
from ..tokens import Ledger, TokenCounter
from ..window import Window
from .spans import span_key
from .state import PassResult, Planned, RollingSummary

log = logging.getLogger("microcompact")


class Passes:
    """Plan, commit and report one absorbing pass (a mixin of MicroCompactor)."""

    if TYPE_CHECKING:  # provided by MicroCompactor
        config: Config
        cfg: CompressionConfig
        summarizer: Summarizer
        counter: TokenCounter
        session_id: str
        commit: CommitHook | None
        clock: Callable[[], float]
        state: RollingSummary
        summarizer_ms_total: float
        largest_pass_tokens: int
        auth_error: str | None

        def sync(self, ledger: Ledger, head: int | None = None) -> None: ...

        def select_span(self, ledger: Ledger, mode: str, window: Window | None = None) -> tuple[Span | None, str]: ...

        def _set_summary(self, text: str) -> None: ...

    def _pass(self, ledger: Ledger, mode: str) -> PassResult | None:
        """Sync the cursor, plan and commit, all against one :class:`Window` of the transcript."""
        window = Window.of(ledger.messages, ledger.tokens, self.config)
        self.sync(ledger, window.head)
        planned = self.plan(ledger, mode, window)
        return planned if not isinstance(planned, Planned) else self.commit_planned(ledger, planned)

    def plan(self, ledger: Ledger, mode: str, window: Window | None = None) -> Planned | PassResult | None:
        """The slow half of a pass: choose the span and call the summarizer. Changes nothing.

        Safe to run on a snapshot in another thread (background mode); :meth:`commit_planned` then checks
        that the span is unchanged before anything is written.
        """
        t0 = self.clock()
        st = self.state
        msgs = ledger.messages
        if window is None:
            window = Window.of(msgs, ledger.tokens, self.config)
        span, reason = self.select_span(ledger, mode, window)
        if span is None:
            if reason == Outcome.NO_RECLAIM:
                return self._finish(
                    ledger,
                    Outcome.NO_RECLAIM,
                    t0,
                    0.0,
                    exchange_tokens=0,
                    mode=mode,
                    tokens_before=ledger.total,
                    messages_before=len(msgs),
                )
            return None
        if self.auth_error is not None:
            return None  # credentials or quota were refused earlier in this session: never retried
        kept = set(span.kept)
        absorbed = tuple(i for i in range(span.start, span.end) if i not in kept)
        prepared = prepare_exchange([msgs[i] for i in absorbed], window.piece_budget, self.counter.count_text)
        # What the summarizer reads: the exchange as bounded by prepare_exchange, plus the running summary.
        read = min(span.tokens, window.piece_budget) + st.text_tokens
        planned = Planned(
            mode=mode,
            span=span,
            absorbed=absorbed,
            key=span_key(msgs, span.start),
            t0=t0,
            read=read,
            base_summary=st.text,
            marker_index=st.marker_index,
            identity=tuple(msgs[i] for i in range(span.start, span.end)),
        )
        s0 = self.clock()
        limit = st.text_tokens + span.tokens + 256
        try:
            planned.summary = self._clean(self.summarizer.merge(st.text, prepared), limit=limit)
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
            fallback = ExtractiveSummarizer(count_text=self.counter.count_text)
            planned.summary = self._clean(fallback.merge(planned.base_summary, prepared), limit=limit)
        except Exception as exc:
            planned.error = exc

    def still_valid(self, ledger: Ledger, planned: Planned) -> bool:
        """True when the span and the summary the plan was made from are still what the transcript holds."""
        msgs = ledger.messages
        span = planned.span
        if span.end > len(msgs) or planned.base_summary != self.state.text:
            return False
        if planned.marker_index != self.state.marker_index:
            return False
        span_now = range(span.start, span.end)
        return all(msgs[i] is original for i, original in zip(span_now, planned.identity, strict=False))

    def commit_planned(self, ledger: Ledger, planned: Planned) -> PassResult:
        """The quick half: write the event through the store, then apply it and update the state."""
        st, span, mode, t0 = self.state, planned.span, planned.mode, planned.t0
        self.largest_pass_tokens = max(self.largest_pass_tokens, planned.read)
        if planned.error is not None or planned.summary is None:
            return self._failed(
                ledger,
                planned.key,
                span,
                planned.error or SummarizerBadOutput("no summary"),
                t0,
                planned.summarizer_ms,
                mode,
                planned.read,
            )
        summary, summarizer_ms = planned.summary, planned.summarizer_ms
        tokens_before, messages_before = ledger.total, len(ledger.messages)
        st.failures.pop(planned.key, None)
        marker = render_micro_marker(summary)
        event = Absorb(span, st.marker_index, marker, summary, planned.absorbed)
        call = {"summarizer_input_tokens": planned.read, "summarizer_output_tokens": self.counter.count_text(summary)}
        old_marker_tokens = ledger.tokens[st.marker_index] if st.marker_index is not None else 0
        tokens_after = tokens_before - span.tokens - old_marker_tokens + self.counter.count_message(marker)
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate and st.marker_index is not None and tokens_before - tokens_after < gate:
            st.gate_floor = (planned.key, span.tokens)
            return self._finish(
                ledger,
                Outcome.NO_RECLAIM,
                t0,
                summarizer_ms,
                exchange_tokens=span.tokens,
                mode=mode,
                tokens_before=tokens_before,
                messages_before=messages_before,
                **call,
            )
        if not self._commit(event, ledger.messages):
            return self._finish(
                ledger,
                Outcome.STORE_FAILED,
                t0,
                summarizer_ms,
                exchange_tokens=span.tokens,
                mode=mode,
                tokens_before=tokens_before,
                messages_before=messages_before,
                **call,
            )
        rejected = planned.rejected
        apply_event(ledger, event)
        st.marker_index = event.marker_index_after
        st.cursor = st.marker_index + 1
        self._set_summary(summary)
        st.gate_floor = None
        st.passes_total += 1
        st.tokens_saved_total += tokens_before - ledger.total
        log.info("Micro-compaction: %d -> %d messages", messages_before, len(ledger.messages))
        return self._finish(
            ledger,
            Outcome.ABSORBED if rejected is None else Outcome.MODEL_REJECTED,
            t0,
            summarizer_ms,
            exchange_tokens=span.tokens,
            mode=mode,
            tokens_before=tokens_before,
            messages_before=messages_before,
            partial=span.partial,
            rejected=rejected.code if rejected else None,
            **call,
        )

    def _failed(
        self,
        ledger: Ledger,
        key: str,
        span: Span,
        exc: Exception,
        t0: float,
        summarizer_ms: float,
        mode: str,
        read: int,
    ) -> PassResult:
        st = self.state
        if isinstance(exc, SummarizerAuthError):
            self.auth_error = str(exc)[:200]
            log.error(
                "Micro-compaction: summarizer refused credentials or quota (%s); no further summarizer "
                "calls in this session",
                self.auth_error,
            )
            return self._failure_record(ledger, Outcome.AUTH_FAILED, exc, t0, summarizer_ms, span, mode, read)
        st.failures[key] = st.failures.get(key, 0) + 1
        outcome = Outcome.SUMMARIZE_FAILED
        log.warning(
            "Micro-compaction: summarizer failed on exchange at cursor %d (%s: %s)",
            span.start,
            type(exc).__name__,
            str(exc)[:200],
        )
        if st.failures[key] >= self.cfg.micro_compact_max_failures:
            log.info(
                "Micro-compaction: skipping exchange at cursor %d after %d consecutive failures",
                span.start,
                st.failures[key],
            )
            st.failures.pop(key, None)
            st.skipped.add(key)
            st.cursor = span.end
            outcome = Outcome.EXCHANGE_SKIPPED
        return self._failure_record(ledger, outcome, exc, t0, summarizer_ms, span, mode, read)

    def _failure_record(
        self,
        ledger: Ledger,
        outcome: Outcome,
        exc: Exception,
        t0: float,
        summarizer_ms: float,
        span: Span,
        mode: str,
        read: int,
    ) -> PassResult:
        """The telemetry of a pass whose summarizer call failed: the transcript is unchanged."""
        return self._finish(
            ledger,
            outcome,
            t0,
            summarizer_ms,
            exchange_tokens=span.tokens,
            mode=mode,
            tokens_before=ledger.total,
            messages_before=len(ledger.messages),
            error=type(exc).__name__,
            summarizer_input_tokens=read,
            summarizer_output_tokens=0,
        )

    def _commit(self, event: Event, msgs: list[Message]) -> bool:
        return commit_or_log(
            self.commit, event, msgs, "Micro-compaction: store commit failed, pass rolled back in memory"
        )

    def _clean(self, text: str, limit: int) -> str:
        return clean_summary(text, limit, self.counter.count_text)

    def _finish(
        self,
        ledger: Ledger,
        outcome: str,
        t0: float,
        summarizer_ms: float,
        *,
        exchange_tokens: int,
        mode: str,
        tokens_before: int,
        messages_before: int,
        **extra: Any,
    ) -> PassResult:
        st = self.state
        self.summarizer_ms_total += summarizer_ms
        duration_ms = (self.clock() - t0) * 1000
        threshold = self.config.threshold_tokens()
        tokens_after = ledger.total
        record: dict[str, Any] = {
            "event": "micro_compaction",
            "session_id": self.session_id,
            "outcome": outcome,
            "mode": mode,
            "messages_before": messages_before,
            "messages_after": len(ledger.messages),
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "tokens_delta": tokens_after - tokens_before,
            "exchange_tokens": exchange_tokens,
            "rolling_summary_tokens": st.text_tokens,
            "cursor": st.cursor,
            "passes_total": st.passes_total,
            "tokens_saved_total": st.tokens_saved_total,
            "duration_ms": round(duration_ms, 3),
            "summarizer_ms": round(summarizer_ms, 3),
            "engine_ms": round(max(0.0, duration_ms - summarizer_ms), 3),
            "threshold_tokens": threshold,
            "context_limit": self.config.model.context_length,
            "occupancy_pct": occupancy_pct(self.counter.estimate_prompt(tokens_after), threshold),
            "aux_model": getattr(self.summarizer, "name", type(self.summarizer).__name__),
        }
        record.update({k: v for k, v in extra.items() if v is not None})
        emit("micro", record)
        return PassResult(outcome, record)
