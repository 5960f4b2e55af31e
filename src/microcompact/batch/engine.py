"""The batch compaction engine: :class:`BatchCompactor`, composed of one collaborator per job.

- ``policy`` (:mod:`.policy`): *when* a compaction runs and how far it goes (the threshold, the anti-thrash
  pause, the window at risk); one replaceable object;
- ``summarize`` (:mod:`.summarize`): phase 2, the middle summarized per run of work in time order
  (:mod:`.runs`), the user floor (:mod:`.user_floor`);
- ``calls`` (:mod:`.calls`): one summarizer call with bounded, redacted input, :mod:`.backoff` and the
  fallback;
- :mod:`.last_resort`: cutting the largest messages when a request would not fit the window;
- :mod:`.attempt`: one compaction as a value, which builds the telemetry record and :class:`BatchResult`.

This module runs a compaction: it starts the :class:`~.attempt.Attempt`, tries phase 1, pruning
(:mod:`.prune`, first because it needs no model), then phase 2, commits what they planned through the
caller's hook and applies it. It owns the one piece of state the phases share, the compaction count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..engine_context import Context
from ..events import CommitHook, Event, Outcome, apply_event, commit_or_log
from ..messages import Message
from ..summarizers import ExtractiveSummarizer, Summarizer
from ..tokens import Ledger, TokenCounter
from ..window import Window, WindowBudget
from .attempt import Attempt, BatchResult
from .calls import SummarizerCalls
from .last_resort import plan_cuts
from .policy import BatchPolicy, Fold, Moment, ThresholdPolicy
from .prune import plan_prune
from .summarize import Ending, Summarize, Written

log = logging.getLogger("microcompact")


@dataclass(frozen=True)
class BatchStats:
    """The running totals other modules (replay, compare, the report) read."""

    compactions: int
    largest_input_tokens: int
    summarizer_ms_total: float


class BatchCompactor:
    """Threshold-triggered compaction of the whole middle; shares the marker format with micro passes."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        session_id: str = "",
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        policy: BatchPolicy | None = None,
    ) -> None:
        self.config = config
        self.cfg = config.compression
        self.counter = counter
        self.commit = commit
        self.wall_clock = wall_clock
        self.context = Context(config, counter, session_id, summarizer, clock)
        self.policy: BatchPolicy = policy if policy is not None else ThresholdPolicy(config)
        fallback = ExtractiveSummarizer(counter.count_text, ledger_budget_tokens=self.config.ledger_room_tokens())
        self.calls = SummarizerCalls(config, summarizer, counter, fallback, clock)
        self.summarize = Summarize(config, counter, self.calls)
        self.compactions = 0

    # ------------------------------------------------------------------ what other modules read

    def stats(self) -> BatchStats:
        return BatchStats(self.compactions, self.summarize.largest_input_tokens, self.calls.summarizer_ms_total)

    def memory(self) -> dict[str, Any]:
        """What a stored session carries to the next process: the policy's state and the compaction count."""
        return {**self.policy.memory(), "compactions": self.compactions}

    def restore(self, memory: dict[str, Any]) -> None:
        """Take back :meth:`memory` (TypeError/ValueError on a malformed value)."""
        self.policy.restore(memory)
        self.compactions = int(memory.get("compactions", 0))

    # ------------------------------------------------------------------ scheduling

    def moment(self, ledger: Ledger, prompt_tokens: int | None = None, reason: str = "threshold") -> Moment:
        """What the policy is given: the counted and the reported (else estimated) prompt, now, the usage."""
        reported = int(prompt_tokens) if prompt_tokens else None
        return Moment(
            counted_tokens=ledger.total,
            prompt_tokens=reported if reported else self.counter.estimate_prompt(ledger.total),
            reported_tokens=reported,
            at=self.wall_clock(),
            usage=tuple(self.counter.observations()),
            reason=reason,
        )

    def should_compress(self, ledger: Ledger, prompt_tokens: int | None = None) -> bool:
        """True when the policy says a compaction is due before this request."""
        return self.policy.due(self.moment(ledger, prompt_tokens))

    # ------------------------------------------------------------------ one compaction

    def compact(
        self,
        ledger: Ledger,
        *,
        force: bool = False,
        focus: str | None = None,
        reason: str = "threshold",
        prompt_tokens: int | None = None,
        **extra: Any,
    ) -> BatchResult:
        """Run one batch compaction (prune first). Never raises; the result says what happened.

        ``extra`` goes into the telemetry line (e.g. how many micro passes ran since the last one).
        """
        fold = self.policy.fold(self.moment(ledger, prompt_tokens, reason))
        if force:
            fold = Fold(low_water=None, at_risk=fold.at_risk)
        attempt = Attempt.start(self.context, ledger, reason, fold, extra)
        try:
            return self._compact(attempt, focus)
        except Exception as exc:  # never into the caller
            log.exception("Batch compaction failed unexpectedly; transcript left as it was")
            return self._result(attempt, Outcome.ERROR, error=type(exc).__name__)

    def _compact(self, attempt: Attempt, focus: str | None) -> BatchResult:
        """Phase 1, prune, when that alone brings the transcript to the policy's low-water mark; else phase 2."""
        ledger = attempt.ledger
        msgs, tokens = ledger.messages, ledger.tokens
        window = Window.of(msgs, tokens, WindowBudget.of(self.config))
        h, t = window.head, window.tail
        pruned = plan_prune(
            msgs,
            tokens,
            h,
            t,
            min_tool_tokens=self.cfg.prune_min_tool_tokens,
            max_argument_tokens=self.cfg.prune_max_argument_tokens,
        )
        low_water = attempt.fold.low_water
        if pruned is not None and low_water is not None:
            saved = sum(tokens[i] - self.counter.count_message(m) for i, m in pruned.replacements)
            if attempt.tokens_before - saved <= low_water:
                if not self._commit(pruned, msgs):
                    return self._result(attempt, Outcome.STORE_FAILED)
                apply_event(ledger, pruned)
                log.info(
                    "Batch compaction: pruned %d old tool outputs, %d -> %d tokens",
                    len(pruned.replacements),
                    attempt.tokens_before,
                    ledger.total,
                )
                return self._end(attempt, Ending(Outcome.PRUNED, {"pruned": len(pruned.replacements)}))
        # Pruning alone is not enough: the summarizer reads the original outputs (bounded), which tell it
        # more than the stubs would, and the whole middle is replaced in one step (or not at all).
        planned = self.summarize.plan(ledger, h, t, focus, attempt.reason, attempt.fold.at_risk)
        if isinstance(planned, Ending):
            return self._end(attempt, planned)
        return self._write(attempt, planned)

    def _write(self, attempt: Attempt, written: Written) -> BatchResult:
        """Commit the rewritten middle, apply it, report it."""
        ledger = attempt.ledger
        if not self._commit(written.event, ledger.messages):
            return self._result(attempt, Outcome.STORE_FAILED, runs=written.runs, summarizer_calls=written.calls)
        apply_event(ledger, written.event)
        self.compactions += 1
        log.info(
            "Batch compaction: %d -> %d messages, %d -> %d tokens, %d runs, %d summarizer calls (%s)",
            attempt.messages_before,
            len(ledger.messages),
            attempt.tokens_before,
            ledger.total,
            written.runs,
            written.calls,
            attempt.reason,
        )
        return self._end(attempt, Ending(written.outcome, written.fields))

    def _end(self, attempt: Attempt, ending: Ending) -> BatchResult:
        """How a compaction that ran ends: the policy learns from it first (when ``ending.paced``), and the
        record says until when automatic compaction now waits."""
        if not ending.paced:
            return self._result(attempt, ending.outcome, **ending.fields)
        paused = self.policy.settle(attempt.tokens_before, attempt.ledger.total, ending.pause_tokens)
        return self._result(attempt, ending.outcome, **ending.fields, paused_until_tokens=paused)

    def _result(self, attempt: Attempt, outcome: str, **fields: Any) -> BatchResult:
        return attempt.result(outcome, self.compactions, **fields)

    def _commit(self, event: Event, msgs: list[Message]) -> bool:
        return commit_or_log(
            self.commit, event, msgs, "Batch compaction: store commit failed, transcript left as it was"
        )

    # ------------------------------------------------------------------ the last resort

    def last_resort(self, ledger: Ledger) -> BatchResult | None:
        """Cut the largest tool outputs and assistant texts head-and-tail until the prompt fits the window.

        Runs before a request, after batch and micro compaction did what they could: one iteration of large
        parallel reads, or a huge message in the head or the protected tail, can still take a small window
        over its limit. Each cut keeps the start and the end of the text with an explicit omission note; the
        original stays in the store (absorbed by its cut copy). User and system messages and markers are
        never cut, so only they alone can still exceed the window. Never raises.
        """
        limit = self.config.model.context_length
        if not limit or not self.cfg.enabled or self.counter.estimate_prompt(ledger.total) <= limit:
            return None
        attempt = Attempt.start(self.context, ledger, "window", Fold(low_water=None, at_risk=True), {})
        try:
            event = plan_cuts(self.counter, ledger, limit)
            if event is None:  # only user and system messages, markers and small messages are left
                log.warning(
                    "Request over the context window (%d tokens, limit %d) and nothing left to cut",
                    self.counter.estimate_prompt(ledger.total),
                    limit,
                )
                return None
            if not self._commit(event, ledger.messages):
                return self._result(attempt, Outcome.STORE_FAILED)
            apply_event(ledger, event)
        except Exception as exc:
            log.exception("Last-resort cut failed unexpectedly; transcript left as it was")
            return self._result(attempt, Outcome.ERROR, error=type(exc).__name__)
        log.warning(
            "Request over the context window: cut %d message(s) head-and-tail, %d -> %d tokens (the "
            "originals are kept in the store)",
            len(event.replacements),
            attempt.tokens_before,
            ledger.total,
        )
        return self._result(attempt, Outcome.TRUNCATED, cut=len(event.replacements))
