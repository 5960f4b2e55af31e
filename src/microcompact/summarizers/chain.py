"""A fallback chain of summarizers: the first that succeeds wins (e.g. a cheap model, then the extractive one).

Each failure costs one log line (which link, which call, the error's class: never content) and the chain
moves on. A link that refused credentials or quota is never called again; one that timed out, was rate
limited or unavailable is skipped for ``cooldown`` seconds, so a dead endpoint does not cost its timeout
on every pass. When every link fails, the last error is raised, so the engine reports the failure as it
reports any summarizer's (an authentication error only when every link refused credentials).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .base import Summarizer, SummarizerAuthError, SummarizerBadOutput, SummarizerUnavailable
from .eventloop import bind_event_loop

log = logging.getLogger("microcompact")

T = TypeVar("T")


class FallbackChain:
    """Summarizers tried in order; ``name`` lists them (``cheap-model>extractive``), ``last_used`` says
    which one wrote the last summary."""

    def __init__(self, *links: Summarizer, cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic):
        if not links:
            raise ValueError("FallbackChain needs at least one summarizer")
        self.links = links
        self.name = ">".join(str(getattr(link, "name", type(link).__name__)) for link in links)
        self.cooldown = cooldown
        self.clock = clock
        self.last_used: str | None = None
        self._lock = threading.Lock()  # passes may run on the background thread and the caller's at once
        self._refused: set[int] = set()
        self._resting_until: dict[int, float] = {}

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        return self._first("merge", lambda link: link.merge(summary, exchange))

    def condense(self, summary: str, target_tokens: int) -> str:
        return self._first("condense", lambda link: link.condense(summary, target_tokens))

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        return self._first("batch", lambda link: link.batch(summary, messages, focus))

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for link in self.links:
            bind_event_loop(link, loop)

    def _first(self, call: str, run: Callable[[Summarizer], T]) -> T:
        last: Exception | None = None
        for i, link in enumerate(self.links):
            if not self._available(i):
                continue
            try:
                result = run(link)
            except Exception as exc:
                self._failed(i, exc)
                following = self._next_name(i)
                log.warning(
                    "Summarizer chain: %s failed on %s (%s); %s",
                    self._name(i),
                    call,
                    type(exc).__name__,
                    f"trying {following}" if following else "no summarizer left to try",
                )
                last = exc
                continue
            self.last_used = self._name(i)
            return result
        if len(self._refused) == len(self.links):
            raise SummarizerAuthError(f"{self.name}: every summarizer in the chain refused credentials or quota")
        if last is not None and not isinstance(last, SummarizerAuthError):
            raise last
        # A refused link with others only cooling down: not an auth error, or the engine would stop for good.
        raise SummarizerUnavailable(f"{self.name}: every summarizer in the chain is failing or cooling down")

    def _available(self, i: int) -> bool:
        with self._lock:
            return i not in self._refused and self.clock() >= self._resting_until.get(i, 0.0)

    def _failed(self, i: int, exc: Exception) -> None:
        with self._lock:
            if isinstance(exc, SummarizerAuthError):
                self._refused.add(i)
            elif not isinstance(exc, SummarizerBadOutput):  # bad output is about this input, not the link
                self._resting_until[i] = self.clock() + self.cooldown

    def _next_name(self, i: int) -> str | None:
        for j in range(i + 1, len(self.links)):
            if self._available(j):
                return self._name(j)
        return None

    def _name(self, i: int) -> str:
        return str(getattr(self.links[i], "name", type(self.links[i]).__name__))
