"""The compaction side of a :class:`~microcompact.session.Session`: its engines and what runs them.

:class:`SessionEngines` builds the micro and batch engines on the session's config, summarizer and token
counter, the runner its micro passes take (inline or background, :mod:`microcompact.session.runners`) and the
cache observations the price schedule reads; it decides what a request does (batch over the threshold,
micro passes, the last resort) and keeps the one count the two engines share (micro passes since the last
batch compaction). It also takes the provider's usage (calibration, what its cache did) and the engine
memory a stored session carries (:mod:`microcompact.carry`).

The session owns the transcript, the lock, the store and the public hooks; these methods are called under
its lock and never raise less than the engines do: the session's hooks catch what must not escape.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from .. import carry
from ..batch import BatchCompactor, BatchResult
from ..bill.cache_usage import CacheObservations, checked_report
from ..config import Config
from ..events import Outcome
from ..micro import CommitHook, MicroCompactor, PassResult
from ..micro.price import policy_for
from ..summarizers import Summarizer
from ..tokens import Ledger, TokenCounter
from .runners import PassRunner, runner_for
from .store_writer import Saved


class SessionEngines:
    """A session's micro and batch engines, their runner and the cache observations (see the module)."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        session_id: str,
        commit: CommitHook | None,
        clock: Callable[[], float],
        lock: threading.RLock,
        ledger: Callable[[], Ledger],
    ) -> None:
        self.counter = counter
        self.cache = CacheObservations()  # what the provider's cache did, as its responses reported (record_usage)
        self.micro = MicroCompactor(
            config,
            summarizer,
            counter,
            session_id=session_id,
            commit=commit,
            wall_clock=clock,
            policy=policy_for(config, self.cache),
        )
        self.batch = BatchCompactor(config, summarizer, counter, session_id=session_id, commit=commit)
        background = config.compression.micro_compact_background is True  # unset: inline, the library's default
        self.runner: PassRunner = runner_for(self.micro, background, lock, ledger)
        self._micro_passes_at_last_batch = 0

    def before_request(self, ledger: Ledger, prompt_tokens: int | None) -> list[PassResult | BatchResult]:
        """A finished background pass applied, a held fold landed, batch compaction when over the threshold,
        request passes, and the last resort when the transcript is still over the window."""
        results: list[PassResult | BatchResult] = list(self.runner.collect(ledger))
        due = functools.partial(self.batch.should_compress, ledger)
        landed, prompt_tokens = self.runner.land_held(ledger, prompt_tokens, due)
        results += landed
        if self.batch.should_compress(ledger, prompt_tokens):
            results.append(self.compact(ledger, reason="threshold", prompt_tokens=prompt_tokens))
        results += self.runner.request_passes(ledger)
        cut = self.batch.last_resort(ledger)  # still over the window: cut what is oversized
        if cut is not None:
            results.append(cut)
        return results

    def compact(self, ledger: Ledger, **kwargs: Any) -> BatchResult:
        """One batch compaction (``kwargs``: the batch engine's), the micro engine continuing after it."""
        since = self.micro.state.passes_total - self._micro_passes_at_last_batch
        result = self.batch.compact(ledger, micro_passes_since_last=since if self.micro.active else None, **kwargs)
        if result.changed:
            # Micro state continues from the new marker; the old rolling summary went into the batch one.
            self.micro.recover(ledger.messages)
            if result.outcome != Outcome.PRUNED:  # a prune is not a batch compaction: keep counting micro passes
                self._micro_passes_at_last_batch = self.micro.state.passes_total
        return result

    def record_usage(
        self,
        counted: int,
        prompt_tokens: int,
        cache_read_tokens: int | None,
        cache_write_tokens: int | None,
        where: str,
    ) -> None:
        """Calibrate the counter with the provider's prompt size (``counted``: what was counted for that
        request) and note what its cache did; a figure that is not a count is ignored with one log line."""
        self.counter.calibrate(counted, prompt_tokens)
        report = checked_report(
            prompt_tokens, cache_read_tokens, cache_write_tokens, at=self.micro.wall_clock(), where=where
        )
        if report is not None:
            self.cache.record(report)

    def resume(self, saved: Saved, ledger: Ledger) -> None:
        """Continue a stored session: its skipped exchanges, its turn count, the engine memory it carried."""
        self.micro.state.skipped |= saved.skipped
        self.micro.state.turns = saved.turns  # the every-N-turns cadence goes on
        carry.restore(saved.carried, ledger, self.counter, self.micro, self.batch)

    def carried(self, ledger: Ledger) -> dict[str, Any]:
        """The engine memory the store does not otherwise hold (:mod:`microcompact.carry`)."""
        return carry.snapshot(ledger, self.counter, self.micro, self.batch)
