"""How a session runs its micro passes: inline, or on a background worker. One protocol, two implementations.

A :class:`~microcompact.session.Session` hook is the same straight line in both modes; what differs is
asked of its :class:`PassRunner`. :class:`InlineRunner` runs every pass on the caller's thread, under the
session's lock, so its result is in the transcript when the hook returns. :class:`BackgroundRunner` hands
the passes to :class:`~microcompact.session.background.BackgroundPasses` (a worker thread and an optimistic apply):
a hook starts a pass and returns, and the next hook (or ``messages``) applies it if the transcript under
it did not change. This module is the one place the session's side calls the worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..micro import MicroCompactor, PassResult
from ..tokens import Ledger
from .background import BackgroundPasses

# Is batch compaction due for a prompt of this size (the provider's figure, or None: counted)?
BatchDue = Callable[[int | None], bool]


class PassRunner(Protocol):
    """What a session asks of the way its micro passes run. Every method but :meth:`drain`,
    :meth:`finish` and :meth:`abandon` is called under the session's lock with its current ledger."""

    @property
    def passes(self) -> BackgroundPasses | None:
        """The background worker's passes (None inline): for inspection; the session calls them only here."""
        ...

    def collect(self, ledger: Ledger) -> list[PassResult]:
        """Apply a pass that finished meanwhile."""
        ...

    def land_held(
        self, ledger: Ledger, prompt_tokens: int | None, due: BatchDue
    ) -> tuple[list[PassResult], int | None]:
        """Over the threshold (``due``) with a fold already computed: land it first (a summary where a batch
        would prune); the batch then runs only if still due. Returns what landed and the reported prompt
        size (``prompt_tokens``, None: counted) shrunk by what it removed."""
        ...

    def request_passes(self, ledger: Ledger) -> list[PassResult]:
        """Before a model request: the passes the schedule asks for (run now, or started)."""
        ...

    def turn_passes(self, ledger: Ledger, completed: bool) -> list[PassResult]:
        """After a turn: advance the cadence and run (or start) the turn's pass when due."""
        ...

    def fold_ahead(self, ledger: Ledger) -> None:
        """The client's turn is over: start the fold the next request would make, when the mode can."""
        ...

    def drain(self, timeout: float) -> list[PassResult]:
        """Wait (holding no lock) for a running pass and apply it."""
        ...

    def finish(self) -> None:
        """Closing: finish running work and stop the worker."""
        ...

    def abandon(self) -> None:
        """Stop the worker without applying what it still computes (the session is being dropped)."""
        ...

    def take_spent(self) -> list[PassResult]:
        """Passes computed but discarded since the last call (their summarizer calls were made)."""
        ...


class InlineRunner:
    """Every pass on the caller's thread, inside the hook that asks for it."""

    def __init__(self, micro: MicroCompactor) -> None:
        self.micro = micro

    @property
    def passes(self) -> BackgroundPasses | None:
        return None

    def collect(self, ledger: Ledger) -> list[PassResult]:
        return []

    def land_held(
        self, ledger: Ledger, prompt_tokens: int | None, due: BatchDue
    ) -> tuple[list[PassResult], int | None]:
        return [], prompt_tokens

    def request_passes(self, ledger: Ledger) -> list[PassResult]:
        return self.micro.before_request(ledger)

    def turn_passes(self, ledger: Ledger, completed: bool) -> list[PassResult]:
        return self.micro.finalize_turn(ledger, completed)

    def fold_ahead(self, ledger: Ledger) -> None:
        return None

    def drain(self, timeout: float) -> list[PassResult]:
        return []

    def finish(self) -> None:
        return None

    def abandon(self) -> None:
        return None

    def take_spent(self) -> list[PassResult]:
        return []


class BackgroundRunner:
    """Passes on a worker thread (``micro_compact_background``): a hook starts one and returns; a finished
    one is applied by a later hook if the transcript under it did not change.

    ``lock`` and ``ledger`` are the session's: :meth:`drain` waits outside the lock and applies under it,
    to the ledger the session holds then (a store resync replaces it)."""

    def __init__(self, micro: MicroCompactor, lock: threading.RLock, ledger: Callable[[], Ledger]) -> None:
        self.micro = micro
        self._passes = BackgroundPasses(micro)
        self._lock = lock
        self._ledger = ledger

    @property
    def passes(self) -> BackgroundPasses | None:
        return self._passes

    def collect(self, ledger: Ledger) -> list[PassResult]:
        return self._passes.collect(ledger)

    def land_held(
        self, ledger: Ledger, prompt_tokens: int | None, due: BatchDue
    ) -> tuple[list[PassResult], int | None]:
        if self._passes.ready is None or not due(prompt_tokens):
            return [], prompt_tokens
        before = ledger.total
        landed = self._passes.adopt_held(ledger)
        removed = before - ledger.total
        return landed, None if prompt_tokens is None else max(0, prompt_tokens - removed)

    def request_passes(self, ledger: Ledger) -> list[PassResult]:
        """The inline schedule (cache-aware included), run on the worker."""
        if not self.micro.active:
            return []
        mode = self.micro.background_request_mode(ledger, self._passes.busy)
        return self._passes.submit(ledger, mode) if mode is not None else []

    def turn_passes(self, ledger: Ledger, completed: bool) -> list[PassResult]:
        results = self._passes.collect(ledger)
        if self.micro.active and self.micro.turn_due(ledger, completed):
            self._passes.submit(ledger)
        return results

    def fold_ahead(self, ledger: Ledger) -> None:
        if self.micro.active and not self._passes.busy:
            mode = self.micro.idle_mode(ledger)
            if mode is not None:
                self._passes.submit(ledger, mode)

    def drain(self, timeout: float) -> list[PassResult]:
        results: list[PassResult] = []
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                results += self._passes.collect(self._ledger())
                if not self._passes.busy:
                    return results
            left = deadline - time.monotonic()
            if left <= 0:
                return results
            self._passes.wait(left)

    def finish(self) -> None:
        self.drain(60.0)
        self._passes.close()

    def abandon(self) -> None:
        self._passes.close(wait=False)

    def take_spent(self) -> list[PassResult]:
        return self._passes.take_spent()


def runner_for(
    micro: MicroCompactor, background: bool, lock: threading.RLock, ledger: Callable[[], Ledger]
) -> PassRunner:
    """The runner a session's config asks for (``compression.micro_compact_background``)."""
    return BackgroundRunner(micro, lock, ledger) if background else InlineRunner(micro)


__all__ = ["BackgroundRunner", "InlineRunner", "PassRunner", "runner_for"]
