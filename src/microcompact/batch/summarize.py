"""Phase 2 of a batch compaction: the middle summarized in time order, one batch marker per run of work
between kept user messages, written in one step or not at all.

The steps, in order: fold the oldest user messages when they exceed the user floor
(:mod:`.user_floor`), split the rest into runs and check the compaction frees enough
(:meth:`Summarize._shortfall`), summarize every run (:meth:`Summarize._summarize_runs`), then write the
:class:`~microcompact.events.BatchCompact` (:meth:`Summarize._write`) or report the failure
(:meth:`Summarize._failed`).

:class:`Summarize` is a mixin of :class:`~microcompact.batch.engine.BatchCompactor`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..config import CompressionConfig, Config
from ..events import Outcome, apply_event
from ..messages import Message, is_marker, render_marker
from ..summarizers import ExtractiveSummarizer, render_exchange
from ..tokens import Ledger, TokenCounter
from .finish import BatchResult
from .runs import _Run, chronological_event, split_runs

log = logging.getLogger("microcompact")

# Room assumed for a batch summary's growth when predicting what a compaction would free.
SUMMARY_ALLOWANCE_TOKENS = 200


class Summarize:
    """The summarizing phase, from the middle's bounds to the written (or refused) event."""

    if TYPE_CHECKING:  # provided by BatchCompactor and its other mixins
        config: Config
        cfg: CompressionConfig
        counter: TokenCounter
        fallback: ExtractiveSummarizer
        compactions: int
        largest_input_tokens: int

        def _commit(self, event: Any, msgs: list[Message]) -> bool: ...

        def _done(
            self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
        ) -> BatchResult: ...

        def _finish(
            self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
        ) -> BatchResult: ...

        def _fold_users(
            self, msgs: list[Message], tokens: list[int], h: int, t: int, users: list[int]
        ) -> list[int]: ...

        def bound_input(self, material: list[Message], budget: int | None = None) -> list[Message]: ...

        def _call(
            self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int
        ) -> tuple[str | None, str, str | None, str]: ...

        def _fallback_text(
            self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int
        ) -> str: ...

    def _summarize(
        self,
        ledger: Ledger,
        h: int,
        t: int,
        focus: str | None,
        reason: str,
        t0: float,
        before_tokens: int,
        before_messages: int,
    ) -> BatchResult:
        """Summarize the middle ``[h, t)`` run by run; the transcript is left as it was when there is nothing
        to summarize, when the compaction would free too little, or when a run got no summary."""
        msgs, tokens = ledger.messages, ledger.tokens
        users = [i for i in range(h, t) if msgs[i].get("role") == "user"]
        others = [i for i in range(h, t) if msgs[i].get("role") != "user"]
        if not any(not is_marker(msgs[i]) for i in others):
            return self._done(ledger, Outcome.NOTHING_TO_COMPACT, t0, before_tokens, before_messages, reason=reason)
        folded = self._fold_users(msgs, tokens, h, t, users)
        # Instructions in the middle (a system or developer entry: Claude Code's task notifications) stay
        # verbatim like user messages: runs of work are split at them, never summarized across them.
        instructions = {i for i in range(h, t) if msgs[i].get("role") in ("system", "developer")}
        runs = [_Run(run, msgs) for run in split_runs(msgs, h, t, set(users) | instructions)]
        todo = [run for run in runs if not run.untouched]
        absorbed = [i for run in todo for i in run.indexes]
        shortfall = self._shortfall(tokens, absorbed, sum(self.counter.count_text(r.previous) for r in todo), len(todo))
        if shortfall and reason != "on_demand":
            # Too little to summarize for the call to matter (the middle is mostly verbatim user messages, or
            # micro passes already did the work): wait until enough has piled up instead of re-batching.
            return self._done(
                ledger, Outcome.LOW_YIELD, t0, before_tokens, before_messages, reason=reason, pause_tokens=shortfall
            )
        calls, failed = self._summarize_runs(todo, focus)
        if failed is not None:
            return self._failed(ledger, failed, todo, calls, reason, t0, before_tokens, before_messages)
        return self._write(ledger, h, t, runs, folded, calls, reason, t0, before_tokens, before_messages)

    def _failed(
        self,
        ledger: Ledger,
        failed: tuple[str, str | None, str],
        todo: list[_Run],
        calls: int,
        reason: str,
        t0: float,
        before_tokens: int,
        before_messages: int,
    ) -> BatchResult:
        """A run got no summary, so nothing is written: the record says which summarizer failed, and how."""
        outcome, error, used = failed
        input_tokens = sum(r.input_tokens for r in todo)
        return self._finish(
            ledger,
            outcome,
            t0,
            before_tokens,
            before_messages,
            reason=reason,
            error=error,
            summarizer=used,
            summarizer_input_tokens=input_tokens if error else 0,
            summarizer_output_tokens=0,
            runs=len(todo),
            summarizer_calls=calls,
        )

    def _write(
        self,
        ledger: Ledger,
        h: int,
        t: int,
        runs: list[_Run],
        folded: list[int],
        calls: int,
        reason: str,
        t0: float,
        before_tokens: int,
        before_messages: int,
    ) -> BatchResult:
        """Every run has its summary: commit the middle rewritten in time order, apply it, report it."""
        msgs = ledger.messages
        todo = [run for run in runs if not run.untouched]
        fallback = any(r.outcome == Outcome.FALLBACK for r in todo)
        outcome = Outcome.FALLBACK if fallback else Outcome.COMPACTED
        if folded:  # every fold of user messages is reported as such, whichever summarizer wrote the summary
            outcome = Outcome.USER_FLOOR_EXCEEDED
        event = chronological_event(msgs, h, t, runs)
        if not self._commit(event, msgs):
            return self._finish(
                ledger,
                Outcome.STORE_FAILED,
                t0,
                before_tokens,
                before_messages,
                reason=reason,
                runs=len(todo),
                summarizer_calls=calls,
            )
        apply_event(ledger, event)
        self.compactions += 1
        log.info(
            "Batch compaction: %d -> %d messages, %d -> %d tokens, %d runs, %d summarizer calls (%s)",
            before_messages,
            len(ledger.messages),
            before_tokens,
            ledger.total,
            len(todo),
            calls,
            reason,
        )
        fields = self._compacted_fields(todo, folded, calls, fallback)
        return self._done(ledger, outcome, t0, before_tokens, before_messages, reason=reason, **fields)

    def _compacted_fields(self, todo: list[_Run], folded: list[int], calls: int, fallback: bool) -> dict[str, Any]:
        """The telemetry fields of a written compaction (their order is the record's order)."""
        input_tokens = sum(r.input_tokens for r in todo)
        names = {r.used for r in todo if r.used and not r.capped} or {self.fallback.name}
        capped = sum(1 for r in todo if r.capped)
        return {
            "absorbed": sum(len(run.indexes) for run in todo),
            "users_folded": len(folded),
            "input_tokens": input_tokens,
            "summarizer": "+".join(sorted(names)),
            "error": next((r.error for r in todo if r.error), None),
            "summarizer_input_tokens": input_tokens,
            "fallback": True if fallback else None,
            "runs": len(todo),
            "summarizer_calls": calls,
            "capped_runs": capped or None,
            "summarizer_output_tokens": sum(self.counter.count_text(r.summary or "") for r in todo),
        }

    def _summarize_runs(self, todo: list[_Run], focus: str | None) -> tuple[int, tuple[str, str | None, str] | None]:
        """A summary for every run, newest first: the newest ``batch_max_calls`` runs with new material by the
        summarizer, older ones (and runs of old markers only) deterministically, without a model call.

        The summarizer's input limit is shared by the runs in proportion to their size, so the calls read
        together no more than one call over the whole middle would. Returns (summarizer calls, failure): the
        failure is (outcome, error, summarizer) when a run got no summary; then nothing may be written.
        """
        budget = self.config.auxiliary.compression.max_input_tokens
        sizes = {id(r): self.counter.count_text(render_exchange(r.material)) for r in todo}
        called = [r for r in todo if r.material][-self.cfg.batch_max_calls :]
        total = sum(sizes[id(r)] for r in called)
        calls, capped = 0, 0
        for run in reversed(todo):
            if not run.material:  # old markers only (a micro marker, or several): kept as they are, as one
                run.summary = run.previous
                continue
            size = sizes[id(run)]
            share = (
                budget
                if total <= budget or run not in called
                else max(int(budget * size / total), min(size, budget // (2 * len(called))))
            )
            bounded = self.bound_input(run.material, share)
            run.input_tokens = self.counter.count_text(render_exchange(bounded)) + self.counter.count_text(run.previous)
            self.largest_input_tokens = max(self.largest_input_tokens, run.input_tokens)
            if calls >= self.cfg.batch_max_calls:
                run.summary = self._fallback_text(run.previous, bounded, focus, run.input_tokens)
                run.used, run.capped = self.fallback.name, True
                capped += 1
                continue
            summary, outcome, error, used = self._call(run.previous, bounded, focus, run.input_tokens)
            calls += 1
            if summary is None:
                return calls, (outcome, error, used)
            run.summary, run.outcome, run.error, run.used = summary, outcome, error, used
        if capped:
            log.info(
                "Batch compaction: %d older runs of work beyond batch_max_calls=%d summarized by the "
                "deterministic extractive summary",
                capped,
                self.cfg.batch_max_calls,
            )
        return calls, None

    def _shortfall(self, tokens: list[int], absorbed: list[int], previous_tokens: int, markers: int) -> int:
        """How many tokens short of ``batch_min_free_ratio`` of the threshold a compaction of ``absorbed``
        would free (0 when it frees enough). The new summaries are assumed to be as long as the previous ones
        plus a little (and each further marker its frame), so markers free nothing."""
        threshold = self.config.threshold_tokens()
        if not threshold:
            return 0
        need = int(self.cfg.batch_min_free_ratio * threshold)
        frames = max(0, markers - 1) * self.counter.count_message(render_marker("", "batch"))
        expected = sum(tokens[i] for i in absorbed) - previous_tokens - SUMMARY_ALLOWANCE_TOKENS - frames
        return max(0, need - expected)
