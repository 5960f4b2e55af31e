"""The micro-compaction engine: :class:`MicroCompactor`, composed of one collaborator per job: ``policy``
(:mod:`.policy`, *when* passes run), :mod:`.spans` (*what* one absorbs, within one
:class:`~microcompact.window.Window`), ``merging`` (:mod:`.passes`, the summarizer call), ``defrag``
(:mod:`.defrag`) and :mod:`.attempt` (one pass's record and :class:`PassResult`).

This module owns the rolling state (:class:`~.state.RollingSummary`) and its recovery from the transcript,
and the quick half of every pass: the event handed to the caller's commit hook (the store), then applied in
memory. A failing commit leaves memory exactly as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..events import MICRO_ABSORBS, Absorb, CommitHook, Event, Outcome, Rewrite, Span, apply_event, commit_or_log
from ..messages import Message, marker_body, render_micro_marker
from ..redact import error_text
from ..summarizers import Summarizer, SummarizerAuthError, SummarizerBadOutput
from ..tokens import Ledger, TokenCounter
from ..window import Window, WindowBudget, head_end, protected_head
from . import spans
from .attempt import Context, PassAttempt
from .defrag import Defrag
from .fold_job import FoldJob, FoldStage
from .fold_tail import fold_budget, fold_estimate
from .in_use import InUse, kept_record
from .passes import Merging
from .policy import MAX_CATCH_UP_PASSES, CadencePolicy, Fold, FoldEstimate, MicroPolicy, Moment, PassMode, WorkerMode
from .state import Condensed, MicroStats, PassResult, Planned, Refusal, RollingSummary, last_markers
from .working_set import WorkingSet

log = logging.getLogger("microcompact")


class MicroCompactor:
    """Runs micro-compaction passes over a :class:`Ledger` (the transcript it owns) and never raises into
    the caller: a failing pass degrades the feature, never the session."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        session_id: str = "",
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        policy: MicroPolicy | None = None,
        state: RollingSummary | None = None,
        refusal: Refusal | None = None,
        defrag: Defrag | None = None,
    ) -> None:
        """``state``, ``refusal`` and ``defrag``: a shadow's (:mod:`.ahead`), which starts from a fold's
        rolling state and shares the engine's refusal and defrag (a refused credential stops both)."""
        self.config = config
        self.cfg = config.compression
        self.counter = counter
        self.commit = commit
        self.clock = clock
        self.wall_clock = wall_clock
        self.context = Context(config, counter, session_id, summarizer, clock)
        self.policy: MicroPolicy = policy if policy is not None else CadencePolicy(config)
        self.refusal = refusal if refusal is not None else Refusal()
        self.merging = Merging(config, summarizer, counter, clock)
        self.defrag = defrag if defrag is not None else Defrag(config, summarizer, counter, clock, self.refusal)
        self.state = state if state is not None else RollingSummary()
        self.in_use = InUse(config)  # the working set a fold keeps, when the policy folds by use
        self.summarizer_ms_total = 0.0
        self.largest_pass_tokens = 0

    @property
    def active(self) -> bool:
        return bool(self.cfg.enabled and self.cfg.micro_compact)

    # ------------------------------------------------------------------ what other modules read

    def stats(self) -> MicroStats:
        st = self.state
        return MicroStats(st.passes_total, st.tokens_saved_total, self.largest_pass_tokens, self.summarizer_ms_total)

    def fold_job(self, ledger: Ledger, prior: FoldJob | None = None, stage: FoldStage = FoldStage.DUE) -> FoldJob:
        """On the caller's thread: a fold in ``stage`` to run on ``ledger``'s snapshot, from this engine's
        state, or extending ``prior`` (a shadow not adopted yet) when it still :meth:`applies`."""
        if prior is not None and self.applies(ledger, prior) and prior.state is not None:
            return prior.extended(stage)
        return FoldJob.starting(ledger.messages, self.state, stage)

    def applies(self, ledger: Ledger, job: FoldJob) -> bool:
        """True while ``job`` may still be adopted: the transcript opens with what it ran on (only messages
        at the end were added since) and the rolling state is the one it started from."""
        return job.applies_to(ledger.messages, self.state)

    def adopt_fold(self, ledger: Ledger, job: FoldJob) -> list[PassResult] | None:
        """Commit and apply ``job``'s events in order, if it applies and keeps a tail (a fold that may have
        absorbed its snapshot's newest message waits for messages after it); None: stale or not yet,
        nothing changed. The view switches once."""
        st = self.state
        if not self.applies(ledger, job) or (job.open_end and len(ledger.messages) <= job.covered):
            return None
        for event in job.events:
            if not self._commit(event, ledger.messages):
                return []  # the store refused: memory stays as it was (the shadow's passes are lost)
            apply_event(ledger, event)
        if job.state is not None:
            job.state.turns = st.turns  # turns ended meanwhile still count
            self.state = job.state
        self.largest_pass_tokens = max(self.largest_pass_tokens, job.largest_pass_tokens)
        self.summarizer_ms_total += job.summarizer_ms
        return job.results

    def idle_mode(self, ledger: Ledger) -> WorkerMode | None:
        """Background mode, the client's turn just ended (an idle gap may follow): the fold to start ahead
        now, or None (a policy that does not fold ahead: None)."""
        return self.policy.idle_mode(self.moment(ledger))

    def use_policy(self, policy: MicroPolicy) -> None:
        """Schedule by ``policy`` from now on (``replay --compare`` prices each policy its own way)."""
        self.policy = policy

    def memory(self) -> dict[str, Any]:
        """What a stored session carries to the next process: failures, the gate's floor, the cursor, the
        running totals (and the policy's own state, if it has any)."""
        return {**self.state.memory(), **self.policy.memory()}

    def restore(self, memory: dict[str, Any], ledger: Ledger, same_transcript: bool) -> None:
        """Take back :meth:`memory`. The cursor and failure counts only when ``ledger`` is still the
        transcript they were taken on; otherwise they are recovered from the last marker as after any
        restart. TypeError/ValueError on a malformed value."""
        self.state.restore_totals(memory)
        self.policy.restore(memory)
        if not same_transcript:
            return
        self.recover(ledger.messages)
        self.state.restore_position(memory)
        self.sync(ledger)  # the O(1) check: a cursor that does not fit is recovered from the marker again
        self.state.restore_failures(memory)

    # ------------------------------------------------------------------ scheduling (the policy decides)

    def moment(self, ledger: Ledger) -> Moment:
        """What the policy is given; ``pending`` chooses the next turn span only when the policy asks."""

        def pending() -> int | None:
            self.sync(ledger)
            span, _ = self.select_span(ledger, PassMode.TURN)
            return span.tokens if span is not None else None

        return Moment(
            counted_tokens=ledger.total,
            prompt_tokens=self.counter.estimate_prompt(ledger.total),
            at=self.wall_clock(),
            turns=self.state.turns,
            usage=tuple(self.counter.observations()),
            pending=pending,
            estimate=lambda: self._fold_estimate(ledger),
        )

    def _fold_estimate(self, ledger: Ledger) -> FoldEstimate:
        """What a fold down to the low-water mark would take now (see :class:`FoldEstimate`): O(middle)."""
        self.sync(ledger)
        low_water = self._fold_budget(self.config.low_water_tokens(), self.config.fold_min_messages())
        window = Window.of(ledger.messages, ledger.tokens, low_water)
        return fold_estimate(ledger.messages, ledger.tokens, window, self.state, self._working_set_keep(ledger, window))

    def _fold_budget(self, tail_tokens: int | None, tail_messages: int | None = None) -> WindowBudget:
        """The budget a fold's passes see (:func:`~microcompact.micro.fold_tail.fold_budget`)."""
        return fold_budget(self.config, WindowBudget.of(self.config), tail_tokens, tail_messages)

    def finalize_turn(self, ledger: Ledger, completed: bool = True) -> list[PassResult]:
        """After a turn: advance the cadence counter and, when due, run one pass (plus defrag if needed)."""
        if not self.active:
            return []
        if not self.turn_due(ledger, completed):
            return []
        return self.run_pass(ledger, PassMode.TURN)

    def turn_due(self, ledger: Ledger, completed: bool = True) -> bool:
        """Advance the turn counter; True when the policy says a turn pass should run now."""
        self.state.turns += 1
        return self.policy.turn_ended(self.moment(ledger), completed)

    def before_request(self, ledger: Ledger) -> list[PassResult]:
        """Before a model request: the passes the policy asks for (by default: absorb a piece of a long turn
        whose iterations have left the tail, or, cache-aware, catch up once the cache has gone cold)."""
        if not self.active:
            return []
        results: list[PassResult] = []
        for fold in self.policy.before_request(self.moment(ledger)):
            results += self.catch_up(ledger, fold)
        self.policy.requested(self.wall_clock())
        return results

    def background_request_mode(self, ledger: Ledger, busy: bool) -> WorkerMode | None:
        """Background mode's :meth:`before_request`: the pass to start on the worker now, or None; the
        request is noted either way (``busy``: a pass still running, nothing starts)."""
        mode = self.policy.background_mode(self.moment(ledger), busy)
        self.policy.requested(self.wall_clock())
        return mode

    def catch_up(self, ledger: Ledger, fold: Fold) -> list[PassResult]:
        """Up to ``fold.passes`` passes in a row, stopping at the first that absorbs nothing (or at the
        fold's low-water mark)."""
        results: list[PassResult] = []
        budget = self._fold_budget(fold.tail_tokens, fold.tail_messages)
        for _ in range(min(fold.passes, MAX_CATCH_UP_PASSES)):
            if fold.low_water is not None and ledger.total <= fold.low_water:
                break
            done = self.run_pass(ledger, fold.mode, budget)
            results += done
            if not any(r.outcome in MICRO_ABSORBS for r in done):
                break
        return results

    # ------------------------------------------------------------------ one pass

    def run_pass(self, ledger: Ledger, mode: PassMode, budget: WindowBudget | None = None) -> list[PassResult]:
        """One pass of ``mode`` plus defrag if due, now, whatever the policy says (the policy's folds and
        ``micro_compact()`` run passes through here); an unexpected error is logged and the transcript left
        as it was. ``budget``: the window's for this pass (a fold's shrunk tail), else the engine's."""
        try:
            results = []
            res = self._pass(ledger, mode, budget)
            if res is not None:
                results.append(res)
            defrag = self._maybe_defrag(ledger)
            if defrag is not None:
                results.append(defrag)
            return results
        except Exception:  # a pass degrades the feature, never the session
            log.exception("Micro-compaction pass failed unexpectedly; transcript left as it was")
            return []

    def _pass(self, ledger: Ledger, mode: PassMode, budget: WindowBudget | None = None) -> PassResult | None:
        """Sync the cursor, plan and commit, all against one :class:`Window` of the transcript."""
        window = Window.of(ledger.messages, ledger.tokens, budget or WindowBudget.of(self.config))
        self.sync(ledger, window.head)
        planned = self._plan(ledger, mode, window)
        return planned if not isinstance(planned, Planned) else self._commit_planned(ledger, planned)

    def plan_ahead(self, snapshot: Ledger, mode: PassMode) -> tuple[Planned | PassResult | None, Condensed | None]:
        """The slow half of a pass on ``snapshot``, safe on a worker thread (it changes nothing): the planned
        pass, and the condensed summary when the new summary will need a defrag. :meth:`land` applies it."""
        planned = self._plan(snapshot, mode)
        condensed = None
        summary = planned.summary if isinstance(planned, Planned) else None
        if summary is not None and self.defrag.needs_defrag(summary):
            condensed = self.defrag.condense(summary)
        return planned, condensed

    def land(self, ledger: Ledger, planned: Planned, condensed: Condensed | None) -> list[PassResult] | None:
        """The quick half of a pass :meth:`plan_ahead` made: commit and apply it, plus its defrag (with the
        summary condensed ahead); None when the span or the summary it was planned from changed since."""
        if not self._still_valid(ledger, planned):
            return None
        results = [self._commit_planned(ledger, planned)]
        defrag = self._maybe_defrag(ledger, condensed)
        if defrag is not None:
            results.append(defrag)
        return results

    def _plan(self, ledger: Ledger, mode: PassMode, window: Window | None = None) -> Planned | PassResult | None:
        """The slow half of a pass: choose the span and call the summarizer. Changes nothing.

        Safe to run on a snapshot in another thread (background mode); :meth:`land` then checks that the
        span is unchanged before anything is written.
        """
        t0 = self.clock()
        if window is None:
            window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(self.config))
        span, reason = self.select_span(ledger, mode, window)
        if span is None:
            if reason == Outcome.NO_RECLAIM:
                return self._report(PassAttempt.of(self.context, ledger, mode, t0), Outcome.NO_RECLAIM)
            return None
        if self.refusal.error is not None:
            return None  # credentials or quota were refused earlier in this session: never retried
        return self.merging.plan(ledger, self.state, mode, span, window, t0)

    def _still_valid(self, ledger: Ledger, planned: Planned) -> bool:
        """True when the span and the summary the plan was made from are still what the transcript holds."""
        msgs = ledger.messages
        span = planned.span
        if span.end > len(msgs) or planned.base_summary != self.state.text:
            return False
        if planned.marker_index != self.state.marker_index:
            return False
        span_now = range(span.start, span.end)
        return all(msgs[i] is original for i, original in zip(span_now, planned.identity, strict=False))

    def _commit_planned(self, ledger: Ledger, planned: Planned) -> PassResult:
        """The quick half: write the event through the store, then apply it and update the state."""
        st, span = self.state, planned.span
        self.largest_pass_tokens = max(self.largest_pass_tokens, planned.read)
        attempt = PassAttempt.of(self.context, ledger, planned.mode, planned.t0, span.tokens, planned.summarizer_ms)
        if planned.error is not None or planned.summary is None:
            return self._failed(attempt, planned, planned.error or SummarizerBadOutput("no summary"))
        summary = planned.summary
        st.failures.pop(planned.key, None)
        marker = render_micro_marker(summary)
        event = Absorb(span, st.marker_index, marker, summary, planned.absorbed)
        call = {"summarizer_input_tokens": planned.read, "summarizer_output_tokens": self.counter.count_text(summary)}
        old_marker_tokens = ledger.tokens[st.marker_index] if st.marker_index is not None else 0
        tokens_after = attempt.tokens_before - span.tokens - old_marker_tokens + self.counter.count_message(marker)
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate and st.marker_index is not None and attempt.tokens_before - tokens_after < gate:
            st.gate_floor = (planned.key, span.tokens)
            return self._report(attempt, Outcome.NO_RECLAIM, **call)
        if not self._commit(event, ledger.messages):
            return self._report(attempt, Outcome.STORE_FAILED, **call)
        rejected = planned.rejected
        kept = kept_record(span, ledger.messages, ledger.tokens) if self.policy.folds_by_use() else {}
        apply_event(ledger, event)
        st.marker_index = event.marker_index_after
        st.cursor = st.marker_index + 1
        self._set_summary(summary)
        st.gate_floor = None
        st.passes_total += 1
        st.tokens_saved_total += attempt.tokens_before - ledger.total
        log.info("Micro-compaction: %d -> %d messages", attempt.messages_before, len(ledger.messages))
        return self._report(
            attempt,
            Outcome.ABSORBED if rejected is None else Outcome.MODEL_REJECTED,
            partial=span.partial,
            rejected=rejected.code if rejected else None,
            **call,
            **kept,
        )

    def _failed(self, attempt: PassAttempt, planned: Planned, exc: Exception) -> PassResult:
        """The summarizer call failed: count it against the exchange (skipped after repeated failures), or
        stop calling after refused credentials. The transcript is unchanged."""
        st, span, key = self.state, planned.span, planned.key
        fields = {"error": type(exc).__name__, "summarizer_input_tokens": planned.read, "summarizer_output_tokens": 0}
        if isinstance(exc, SummarizerAuthError):
            self.refusal.error = error_text(exc)
            log.error(
                "Micro-compaction: summarizer refused credentials or quota (%s); no further summarizer "
                "calls in this session",
                self.refusal.error,
            )
            return self._report(attempt, Outcome.AUTH_FAILED, **fields)
        log.warning(
            "Micro-compaction: summarizer failed on exchange at cursor %d (%s: %s)",
            span.start,
            type(exc).__name__,
            error_text(exc),
        )
        return self._report(attempt, st.count_failure(key, span, self.cfg.micro_compact_max_failures), **fields)

    def _report(self, attempt: PassAttempt, outcome: str, **fields: Any) -> PassResult:
        """Every pass ends here: the summarizer's time counted, the record built by the attempt."""
        self.summarizer_ms_total += attempt.summarizer_ms
        return attempt.result(outcome, self.state, **fields)

    def _commit(self, event: Event, msgs: list[Message]) -> bool:
        return commit_or_log(
            self.commit, event, msgs, "Micro-compaction: store commit failed, pass rolled back in memory"
        )

    # ------------------------------------------------------------------ defrag

    def _maybe_defrag(self, ledger: Ledger, ready: Condensed | None = None) -> PassResult | None:
        """Re-summarize a rolling summary over the defrag threshold and rewrite the marker in place (with
        ``ready``, a condensing the worker did ahead, when it is of the current summary)."""
        st = self.state
        if st.marker_index is None or not st.text or not self.defrag.needs_defrag(st.text):
            return None
        if Window.of(ledger.messages, ledger.tokens, WindowBudget.of(self.config)).in_tail(st.marker_index):
            return None  # the marker is in the protected tail: never rewritten there; later, once it left
        t0 = self.clock()
        done = ready if ready is not None and ready.text == st.text else self.defrag.condense(st.text)
        if done.new == st.text:
            return None  # nothing left to shorten (the ledger's changed files alone): no rewrite
        attempt = PassAttempt.of(self.context, ledger, "defrag", t0, 0, done.summarizer_ms)
        new = done.new or ""
        event = Rewrite(st.marker_index, render_micro_marker(new), new)
        if not self._commit(event, ledger.messages):
            return self._report(attempt, Outcome.STORE_FAILED)
        apply_event(ledger, event)
        self._set_summary(new)
        st.passes_total += 1
        st.tokens_saved_total += attempt.tokens_before - ledger.total
        log.info(
            "Micro-compaction defrag: rolling summary re-summarized (%d -> %d tokens, %s)",
            done.old_tokens,
            st.text_tokens,
            done.method,
        )
        return self._report(
            attempt,
            done.outcome,
            defrag_method=done.method,
            summary_tokens_before=done.old_tokens,
            error=done.error,
            summarizer_input_tokens=done.old_tokens,
            summarizer_output_tokens=st.text_tokens if done.method == "model" else 0,
        )

    # ------------------------------------------------------------------ cursor and recovery

    def sync(self, ledger: Ledger, head: int | None = None) -> None:
        """Make the cursor valid for ``ledger``; recover it (and the summary) from the last marker if not.

        The check is O(1); the scan only runs when the state is lost or does not fit the transcript.
        ``head`` is the pass's ``Window.head`` when the caller has it (computed here otherwise).
        """
        h = self._head(ledger.messages) if head is None else head
        if not self.state.fits(ledger.messages, h):
            self.recover(ledger.messages, h)

    def recover(self, msgs: list[Message], head: int | None = None) -> None:
        """Cursor just after the last marker; rolling summary from the last micro marker's body."""
        st = self.state
        h = self._head(msgs) if head is None else head
        last_any, last_micro = last_markers(msgs, h)
        st.cursor = max(h, last_any + 1) if last_any is not None else h
        st.marker_index = last_micro
        self._set_summary(marker_body(msgs[last_micro]) if last_micro is not None else "")
        st.failures.clear()
        st.gate_floor = None

    def _head(self, msgs: list[Message]) -> int:
        """The protected head's end; counts come from the messages' cached counts (a few head messages)."""
        plain = head_end(msgs, self.cfg.protect_first_n)
        return protected_head(msgs, [self.counter.count_message(m) for m in msgs[:plain]], WindowBudget.of(self.config))

    def _set_summary(self, text: str) -> None:
        self.state.text = text
        self.state.text_tokens = self.counter.count_text(text)

    def select_span(self, ledger: Ledger, mode: PassMode, window: Window | None = None) -> tuple[Span | None, str]:
        """The span the next pass would absorb, or (None, reason): see :func:`.spans.select_span`.

        ``window`` is the pass's :class:`Window` of ``ledger``; computed here when not handed down.
        """
        if window is None:
            window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(self.config))
        in_use = self._working_set_keep(ledger, window)
        keep = in_use[1] if in_use is not None else None
        return spans.select_span(ledger.messages, ledger.tokens, window, self.state, self.config, mode, keep=keep)

    def _working_set_keep(self, ledger: Ledger, window: Window) -> tuple[WorkingSet, frozenset[int]] | None:
        """The working set and the in-use iterations a fold over ``window`` keeps (:class:`.in_use.InUse`),
        or None when the policy folds by age alone."""
        return self.in_use.keep(ledger.messages, ledger.tokens, window) if self.policy.folds_by_use() else None
