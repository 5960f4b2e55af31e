"""The batch compaction engine: :class:`BatchCompactor`, assembled from one mixin per job.

- :mod:`.scheduling`: *when* a compaction runs (the threshold, the anti-thrash pause, the window at risk);
- :mod:`.summarize`: phase 2, the middle summarized per run of work in time order (:mod:`.runs`);
- :mod:`.user_floor`: which user messages stay verbatim, and folding the oldest when they take too much;
- :mod:`.calls`: one summarizer call with bounded, redacted input, :mod:`.backoff` and the fallback;
- :mod:`.last_resort`: cutting the largest messages when a request would not fit the window;
- :mod:`.finish`: how every compaction ends (pause, convergence, the telemetry record, :class:`BatchResult`).

This module owns the engine's state and phase 1, pruning (:mod:`.prune`), tried first because it needs no
model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..events import CommitHook, Outcome, apply_event, commit_or_log
from ..messages import Message
from ..summarizers import ExtractiveSummarizer, Summarizer, ledger_budget
from ..tokens import Ledger, TokenCounter
from ..window import Window
from .backoff import Backoff
from .calls import SummarizerCalls
from .finish import BatchResult, Finish
from .last_resort import LastResort
from .prune import plan_prune
from .scheduling import Scheduling
from .summarize import Summarize
from .user_floor import UserFloor

log = logging.getLogger("microcompact")


class BatchCompactor(Scheduling, Summarize, UserFloor, SummarizerCalls, LastResort, Finish):
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
    ) -> None:
        self.config = config
        self.cfg = config.compression
        self.summarizer = summarizer
        self.counter = counter
        self.session_id = session_id
        self.commit = commit
        self.clock = clock
        self.backoff = Backoff(clock)
        self.fallback = ExtractiveSummarizer(
            counter.count_text, ledger_budget_tokens=ledger_budget(self.cfg.micro_compact_defrag_threshold_tokens)
        )
        self.compactions = 0
        self.low_yield = 0
        self.paused_below: int | None = None  # automatic compaction paused until the transcript reaches this
        self.largest_input_tokens = 0
        self.summarizer_ms_total = 0.0
        self._extra: dict[str, Any] = {}
        self._risk = False

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
        t0 = self.clock()
        before_tokens, before_messages = ledger.total, len(ledger.messages)
        self._extra = extra
        self._risk = self._at_risk(self.prompt_tokens(ledger, prompt_tokens))
        try:
            return self._compact(ledger, force, focus, reason, t0)
        except Exception as exc:  # never into the caller
            log.exception("Batch compaction failed unexpectedly; transcript left as it was")
            return self._finish(
                ledger, Outcome.ERROR, t0, before_tokens, before_messages, reason=reason, error=type(exc).__name__
            )

    def _compact(self, ledger: Ledger, force: bool, focus: str | None, reason: str, t0: float) -> BatchResult:
        """Phase 1, prune, when that alone brings the prompt far enough under the threshold; else phase 2."""
        msgs, tokens = ledger.messages, ledger.tokens
        cfg = self.cfg
        before_tokens, before_messages = ledger.total, len(msgs)
        threshold = self.config.threshold_tokens() or 0
        window = Window.of(msgs, tokens, self.config)
        h, t = window.head, window.tail
        pruned = plan_prune(
            msgs,
            tokens,
            h,
            t,
            min_tool_tokens=cfg.prune_min_tool_tokens,
            max_argument_tokens=cfg.prune_max_argument_tokens,
        )
        if pruned is not None and not force and threshold:
            saved = sum(tokens[i] - self.counter.count_message(m) for i, m in pruned.replacements)
            if before_tokens - saved <= threshold - cfg.proactive_prune_min_reclaim_tokens:
                if not self._commit(pruned, msgs):
                    return self._finish(ledger, Outcome.STORE_FAILED, t0, before_tokens, before_messages, reason=reason)
                apply_event(ledger, pruned)
                log.info(
                    "Batch compaction: pruned %d old tool outputs, %d -> %d tokens",
                    len(pruned.replacements),
                    before_tokens,
                    ledger.total,
                )
                return self._done(
                    ledger,
                    Outcome.PRUNED,
                    t0,
                    before_tokens,
                    before_messages,
                    reason=reason,
                    pruned=len(pruned.replacements),
                )
        # Pruning alone is not enough: the summarizer reads the original outputs (bounded), which tell it
        # more than the stubs would, and the whole middle is replaced in one step (or not at all).
        return self._summarize(ledger, h, t, focus, reason, t0, before_tokens, before_messages)

    def _commit(self, event: Any, msgs: list[Message]) -> bool:
        return commit_or_log(
            self.commit, event, msgs, "Batch compaction: store commit failed, transcript left as it was"
        )
