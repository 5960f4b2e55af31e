"""When a micro pass runs: the every-N-turns cadence, long turns before model requests, and cache-aware
deferral (rewrite history when the provider's prompt cache has gone cold anyway, then catch up).

:class:`Scheduling` is a mixin of :class:`~microcompact.micro.engine.MicroCompactor`; it decides *when*,
the engine and :mod:`.passes` decide *what* and *how*.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import CompressionConfig, Config
from ..events import MICRO_ABSORBS, Span
from ..telemetry import occupancy_pct
from ..tokens import Ledger, TokenCounter
from ..window import Window
from .state import PassResult, RollingSummary

# Cache-aware catch-up: at most this many passes when a deferred cache break finally happens.
MAX_CATCH_UP_PASSES = 64


class Scheduling:
    """Entry points called by the session after a turn and before a request; they never raise."""

    if TYPE_CHECKING:  # provided by MicroCompactor
        config: Config
        cfg: CompressionConfig
        counter: TokenCounter
        state: RollingSummary
        wall_clock: Callable[[], float]
        last_request_at: float | None
        deferred: int

        @property
        def active(self) -> bool: ...

        @property
        def cache_aware(self) -> bool: ...

        def _guarded(self, ledger: Ledger, mode: str) -> list[PassResult]: ...

        def sync(self, ledger: Ledger, head: int | None = None) -> None: ...

        def select_span(self, ledger: Ledger, mode: str, window: Window | None = None) -> tuple[Span | None, str]: ...

    def finalize_turn(self, ledger: Ledger, completed: bool = True) -> list[PassResult]:
        """After a turn: advance the cadence counter and, when due, run one pass (plus defrag if needed)."""
        if not self.active:
            return []
        if not self.turn_due(ledger, completed):
            return []
        return self._guarded(ledger, "turn")

    def turn_due(self, ledger: Ledger, completed: bool = True) -> bool:
        """Advance the cadence counter; True when a turn pass should run now."""
        self.state.turns += 1
        if not completed or self.state.turns % max(1, self.cfg.micro_compact_every_n_turns):
            return False
        if self.cache_aware and self._cache_warm() and not self._worth_a_cache_break(ledger):
            self.deferred += 1  # runs when the cache has gone cold anyway (see before_request)
            return False
        return True

    def before_request(self, ledger: Ledger) -> list[PassResult]:
        """Before a model request: absorb a piece of a long turn whose iterations have left the tail.

        With cache-aware scheduling, this is also where deferred turn passes run: when the provider's cache
        has gone cold since the last request (rewriting history then costs nothing extra), or when occupancy
        or the reclaim gate says waiting is no longer worth it.
        """
        if not self.active:
            return []
        results: list[PassResult] = []
        if self.cache_aware:
            if not self._cache_warm() or self._worth_a_cache_break(ledger):
                # The prefix breaks now (cold cache, or waiting is no longer worth it): make the break count
                # by absorbing everything that is due, so breaks stay rare and large.
                results += self._catch_up(ledger, "turn", self.deferred)
                self.deferred = 0
                results += self._catch_up(ledger, "request", MAX_CATCH_UP_PASSES)
        else:
            results += self._guarded(ledger, "request")
        self.last_request_at = self.wall_clock()
        return results

    def background_request_mode(self, ledger: Ledger, busy: bool) -> str | None:
        """Background mode's :meth:`before_request`: the pass to start on the worker now, or None.

        The same schedule as inline: with cache-aware scheduling nothing starts while the provider's cache
        is warm (unless occupancy or the reclaim gate says waiting is no longer worth it), and a turn pass
        deferred meanwhile goes first once it may. The request is noted either way (the next warmth check
        counts from it); ``busy`` (a pass still running) starts nothing."""
        mode: str | None = None
        if not busy:
            if not self.cache_aware:
                mode = "request"
            elif not self._cache_warm() or self._worth_a_cache_break(ledger):
                mode = "turn" if self.deferred else "request"
                self.deferred = max(0, self.deferred - 1)
        self.last_request_at = self.wall_clock()
        return mode

    def _catch_up(self, ledger: Ledger, mode: str, passes: int) -> list[PassResult]:
        """Up to ``passes`` passes in a row, stopping at the first that absorbs nothing."""
        results: list[PassResult] = []
        for _ in range(min(passes, MAX_CATCH_UP_PASSES)):
            done = self._guarded(ledger, mode)
            results += done
            if not any(r.outcome in MICRO_ABSORBS for r in done):
                break
        return results

    def _cache_warm(self) -> bool:
        """True while the provider's prompt cache still holds the last request (within the TTL)."""
        ttl = self.cfg.micro_compact_cache_ttl_seconds
        return ttl is not None and self.last_request_at is not None and self.wall_clock() - self.last_request_at <= ttl

    def _worth_a_cache_break(self, ledger: Ledger) -> bool:
        """Occupancy past ``micro_compact_max_occupancy_pct``, or a pending span that meets the reclaim gate."""
        occupancy = occupancy_pct(self.counter.estimate_prompt(ledger.total), self.config.threshold_tokens())
        if occupancy is not None and occupancy >= self.cfg.micro_compact_max_occupancy_pct:
            return True
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate:
            self.sync(ledger)
            span, _ = self.select_span(ledger, "turn")
            return span is not None and span.tokens >= gate
        return False
