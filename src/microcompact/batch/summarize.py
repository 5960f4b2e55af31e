"""Phase 2 of a batch compaction: the middle summarized in time order, one batch marker per run of work
between kept user messages, written in one step or not at all.

:class:`Summarize` is the phase; it changes nothing itself. Its steps, in order: fold the oldest user
messages when they exceed the user floor (:mod:`.user_floor`), split the rest into runs and check the
compaction frees enough (:meth:`Summarize._shortfall`), summarize every run (:meth:`Summarize._summarize_runs`,
through :class:`~.calls.SummarizerCalls`), then hand back either a :class:`Written` compaction for the
engine to commit, or an :class:`Ending` saying why there is none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..events import BatchCompact, Outcome
from ..messages import Message, is_marker, render_marker
from ..summarizers import render_exchange
from ..tokens import Ledger, TokenCounter
from .calls import SummarizerCalls
from .runs import _Run, chronological_event, split_runs
from .user_floor import fold_users

log = logging.getLogger("microcompact")

# Room assumed for a batch summary's growth when predicting what a compaction would free.
SUMMARY_ALLOWANCE_TOKENS = 200


@dataclass(frozen=True)
class Ending:
    """A compaction that ends without writing: its outcome and telemetry fields.

    ``paced``: the scheduling policy learns from it (nothing to compact, too little to free, with
    ``pause_tokens`` the shortfall); a summarizer failure teaches the pacing nothing."""

    outcome: str
    fields: dict[str, Any] = field(default_factory=dict)
    pause_tokens: int = 0
    paced: bool = True


@dataclass(frozen=True)
class Written:
    """Every run has its summary: the event to commit, the outcome and record fields once it is applied,
    and the runs and calls (for the log line and a failed commit's record)."""

    event: BatchCompact
    outcome: str
    fields: dict[str, Any]
    runs: int
    calls: int


class Summarize:
    """The summarizing phase, from the middle's bounds to the event to write (or why there is none)."""

    def __init__(self, config: Config, counter: TokenCounter, calls: SummarizerCalls) -> None:
        self.config = config
        self.cfg = config.compression
        self.counter = counter
        self.calls = calls
        self.largest_input_tokens = 0

    def plan(self, ledger: Ledger, h: int, t: int, focus: str | None, reason: str, at_risk: bool) -> Ending | Written:
        """Summarize the middle ``[h, t)`` run by run; an :class:`Ending` when there is nothing to summarize,
        when the compaction would free too little, or when a run got no summary."""
        msgs, tokens = ledger.messages, ledger.tokens
        users = [i for i in range(h, t) if msgs[i].get("role") == "user"]
        others = [i for i in range(h, t) if msgs[i].get("role") != "user"]
        if not any(not is_marker(msgs[i]) for i in others):
            return Ending(Outcome.NOTHING_TO_COMPACT)
        folded = fold_users(self.config, self.counter, msgs, tokens, h, t, users)
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
            return Ending(Outcome.LOW_YIELD, pause_tokens=shortfall)
        calls, failed = self._summarize_runs(todo, focus, at_risk)
        if failed is not None:
            return self._failed(failed, todo, calls)
        return self._written(msgs, h, t, runs, folded, calls)

    def _failed(self, failed: tuple[str, str | None, str], todo: list[_Run], calls: int) -> Ending:
        """A run got no summary, so nothing is written: the record says which summarizer failed, and how."""
        outcome, error, used = failed
        input_tokens = sum(r.input_tokens for r in todo)
        fields = {
            "error": error,
            "summarizer": used,
            "summarizer_input_tokens": input_tokens if error else 0,
            "summarizer_output_tokens": 0,
            "runs": len(todo),
            "summarizer_calls": calls,
        }
        return Ending(outcome, fields, paced=False)

    def _written(self, msgs: list[Message], h: int, t: int, runs: list[_Run], folded: list[int], calls: int) -> Written:
        """Every run has its summary: the middle rewritten in time order, and how the record reports it."""
        todo = [run for run in runs if not run.untouched]
        fallback = any(r.outcome == Outcome.FALLBACK for r in todo)
        outcome = Outcome.FALLBACK if fallback else Outcome.COMPACTED
        if folded:  # every fold of user messages is reported as such, whichever summarizer wrote the summary
            outcome = Outcome.USER_FLOOR_EXCEEDED
        event = chronological_event(msgs, h, t, runs)
        fields = self._compacted_fields(todo, folded, calls, fallback)
        return Written(event, outcome, fields, len(todo), calls)

    def _compacted_fields(self, todo: list[_Run], folded: list[int], calls: int, fallback: bool) -> dict[str, Any]:
        """The telemetry fields of a written compaction (their order is the record's order)."""
        input_tokens = sum(r.input_tokens for r in todo)
        names = {r.used for r in todo if r.used and not r.capped} or {self.calls.fallback.name}
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

    def _summarize_runs(
        self, todo: list[_Run], focus: str | None, at_risk: bool
    ) -> tuple[int, tuple[str, str | None, str] | None]:
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
            bounded = self.calls.bound_input(run.material, share)
            run.input_tokens = self.counter.count_text(render_exchange(bounded)) + self.counter.count_text(run.previous)
            self.largest_input_tokens = max(self.largest_input_tokens, run.input_tokens)
            if calls >= self.cfg.batch_max_calls:
                run.summary = self.calls.fallback_text(run.previous, bounded, focus, run.input_tokens)
                run.used, run.capped = self.calls.fallback.name, True
                capped += 1
                continue
            summary, outcome, error, used = self.calls.call(run.previous, bounded, focus, run.input_tokens, at_risk)
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
