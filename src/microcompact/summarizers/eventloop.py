"""Running an async model client's coroutines from the engine, which calls summarizers synchronously.

The engines call ``merge``/``condense``/``batch`` from a worker thread (AsyncSession's, or the background
pass thread). An async client (``AsyncOpenAI``, ``AsyncAnthropic``, an ``async def``) owns connections
bound to one event loop, so its coroutines must run on that loop: :class:`LoopRunner` submits them there
with :func:`asyncio.run_coroutine_threadsafe` and waits in the calling thread, never on the loop.
AsyncSession binds its summarizer to the loop it runs on (:func:`bind_event_loop`); unbound (a plain
``Session``), the coroutines run on one private loop thread, the same one for every call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

from .base import SummarizerError, SummarizerTimeout, SummarizerUnavailable

_POLL_SECONDS = 0.5  # how often a waiting thread checks that the loop it waits on is still alive
_IDLE_POLLS = 3  # polls in a row that find the loop stopped before the wait is given up
_GRACE_SECONDS = 2.0  # past ``timeout``, for the loop's own cancellation to arrive first


def bind_event_loop(summarizer: object, loop: asyncio.AbstractEventLoop) -> None:
    """Tell ``summarizer`` (and the links of a chain) which event loop its coroutines must run on."""
    bind = getattr(summarizer, "bind_loop", None)
    if callable(bind):
        bind(loop)


class LoopRunner:
    """Runs awaitables on one event loop for threads that are not that loop's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bound: asyncio.AbstractEventLoop | None = None
        self._used: asyncio.AbstractEventLoop | None = None  # where coroutines last ran
        self._private: asyncio.AbstractEventLoop | None = None
        self._private_thread: threading.Thread | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run coroutines on ``loop`` from now on. Refused once coroutines ran on another loop that is still
        open: the async client's connections belong to that loop (a sync client never runs any, so it can
        serve sessions on several loops)."""
        with self._lock:
            used = self._used
            if used is not None and used is not loop and not used.is_closed():
                raise ValueError(
                    "this summarizer's async client already runs on another event loop; "
                    "give each event loop its own client and summarizer"
                )
            self._bound = loop

    def run(self, awaitable: Awaitable[Any], timeout: float | None, name: str) -> Any:
        """The awaitable's result, computed on the bound (else the private) loop; ``timeout`` in seconds."""
        loop = self._loop()
        if loop is None:
            if isinstance(awaitable, Coroutine):
                awaitable.close()
            raise SummarizerUnavailable(f"{name}: the event loop the async client runs on is closed")
        try:
            calling = asyncio.get_running_loop()
        except RuntimeError:
            calling = None
        coro = _bounded(awaitable, timeout)
        if calling is loop:
            _discard(coro, awaitable)
            raise SummarizerError(
                f"{name}: an async summarizer was called on its own event loop's thread, where waiting for it "
                "would block the loop forever; use AsyncSession, which runs passes in a worker thread"
            )
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError as exc:  # the loop closed since it was bound
            _discard(coro, awaitable)
            raise SummarizerUnavailable(f"{name}: the event loop the async client runs on is closed") from exc
        self._wait(future, loop, timeout, name)
        if future.cancelled():
            raise SummarizerUnavailable(f"{name}: the summary was cancelled (its event loop is shutting down)")
        return future.result()  # the coroutine's own error (TimeoutError after ``timeout``) is raised as is

    @staticmethod
    def _wait(
        future: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop, timeout: float | None, name: str
    ) -> None:
        """Wait for ``future`` in this thread, giving up (and cancelling it) when its loop closes or stays
        stopped, or ``timeout`` (enforced on the loop) has long passed: a loop that no longer runs would
        otherwise hold the pass, and the session's lock, forever."""
        deadline = None if timeout is None else time.monotonic() + timeout + _GRACE_SECONDS
        idle_polls = 0
        while not future.done():
            concurrent.futures.wait([future], timeout=_POLL_SECONDS)
            if future.done():
                return
            idle_polls = 0 if loop.is_running() else idle_polls + 1
            if loop.is_closed() or idle_polls >= _IDLE_POLLS:
                future.cancel()
                state = "closed" if loop.is_closed() else "stopped"
                raise SummarizerUnavailable(f"{name}: the event loop {state} while a summary was pending")
            if deadline is not None and time.monotonic() > deadline:
                future.cancel()
                raise SummarizerTimeout(f"{name}: no answer within the timeout (its event loop is blocked)")

    def close(self) -> None:
        """Stop the private loop thread, if one was started."""
        with self._lock:
            loop, thread = self._private, self._private_thread
            self._private = self._private_thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The bound loop; None when it closed (the client's connections went with it, and running on the
        private loop would make the client refuse the next loop it is bound to); unbound, the private one."""
        with self._lock:
            if self._bound is not None:
                if self._bound.is_closed():
                    return None
                self._used = self._bound
                return self._bound
            if self._private is None:
                self._private = asyncio.new_event_loop()
                self._private_thread = threading.Thread(
                    target=self._private.run_forever, name="microcompact-summarizer-loop", daemon=True
                )
                self._private_thread.start()
            self._used = self._private
            return self._private


async def _bounded(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    """``awaitable`` as a coroutine (what run_coroutine_threadsafe takes), cancelled after ``timeout``."""
    if timeout is None:
        return await awaitable
    return await asyncio.wait_for(awaitable, timeout)


def _discard(coro: Coroutine[Any, Any, Any], awaitable: Awaitable[Any]) -> None:
    """Close coroutines that will never run (no "never awaited" warning)."""
    coro.close()
    if isinstance(awaitable, Coroutine):
        awaitable.close()
