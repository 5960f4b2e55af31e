"""The interpreter's full garbage collections, taken between requests instead of in the middle of one.

CPython's cyclic collector runs a full (generation 2) collection whenever enough objects survived the
younger ones, on whichever thread happens to allocate then: in ``serve`` that is a request's engine step
more often than not. A full collection walks every tracked object of the process (the modules, classes
and functions of the whole stack, then every session's messages), holding the interpreter for all of it:
``bench/bench_proxy.py`` caught one of 33 ms inside a 150K-token request, the largest single item of the
request path's tail.

:class:`CollectionPacing`, while the app is serving, does two things:

- ``gc.freeze()`` once the app has started: what exists then (the imported stack, a few hundred thousand
  objects) lives as long as the process, and a full collection no longer walks it;
- automatic full collections off (the generation-2 threshold raised out of reach; the young generations
  are collected as before, they are cheap), and :meth:`between_requests`, called by each request's
  follow-up on a worker thread, runs the full collection itself once one would have been due (as many
  young collections as CPython's own threshold asks) and no request is being prepared. A server that is
  never idle still collects, at most ``OVERDUE`` times later than CPython would have.

Process-wide settings: the first app started takes them, the last one stopped restores them (tests run
several apps in one process).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# Full collections CPython runs when generation 1 was collected this many times (its default threshold 2).
DEFAULT_FULL_AFTER = 10
# Never idle: the full collection runs anyway once this many times overdue.
OVERDUE = 10
_OUT_OF_REACH = 1 << 30  # a generation-2 threshold that automatic collection never reaches

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] | None = None


class CollectionPacing:
    """Full collections between requests, for one app (see the module docstring)."""

    def __init__(self) -> None:
        self._preparing = 0  # requests between their arrival and their forward
        self._count_lock = threading.Lock()
        self._started = False
        self._full_after = DEFAULT_FULL_AFTER
        self.collections = 0  # full collections run here (tests, metrics)

    def start(self) -> None:
        """Take the process's collector settings (the first app to start) and freeze what exists now."""
        global _users, _saved
        with _lock:
            if self._started:
                return
            self._started = True
            if _users == 0:
                _saved = gc.get_threshold()
                gc.set_threshold(_saved[0], _saved[1], _OUT_OF_REACH)
                gc.freeze()
            assert _saved is not None
            self._full_after = _saved[2] or DEFAULT_FULL_AFTER
            _users += 1

    def stop(self) -> None:
        """Give the settings back (the last app to stop restores CPython's own and unfreezes)."""
        global _users, _saved
        with _lock:
            if not self._started:
                return
            self._started = False
            _users -= 1
            if _users == 0 and _saved is not None:
                gc.unfreeze()
                gc.set_threshold(*_saved)
                _saved = None

    @contextlib.contextmanager
    def preparing(self) -> Iterator[None]:
        """Around a request's way in (its body read, its engine step, up to its forward): no full collection
        starts meanwhile, unless long overdue."""
        with self._count_lock:
            self._preparing += 1
        try:
            yield
        finally:
            with self._count_lock:
                self._preparing -= 1

    def between_requests(self) -> bool:
        """Run the full collection now if one is due and no request is being prepared (or it is long
        overdue). True when it ran. Never raises."""
        if not self._started:
            return False
        due = gc.get_count()[2]  # young (generation 1) collections since the last full one
        if due < self._full_after or (self._preparing > 0 and due < self._full_after * OVERDUE):
            return False
        try:
            gc.collect(2)
        except Exception:  # a finalizer's failure is not the request's
            return False
        self.collections += 1
        return True
