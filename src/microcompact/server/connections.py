"""Client connections, bounded: a cap on how many are open, and a deadline for each request's headers.

uvicorn's h11 protocol neither times out a connection that never completes its headers nor bounds how many
are open: 1,100 stalled connections under the common 1,024-file limit leave the process unable to accept
(``/healthz`` times out, "Too many open files" on stderr). :func:`guarded_protocol` is that protocol with
both: at the cap, a new connection closes the oldest one without a request in flight (one that never
completed a request first, so a client's idle keep-alive connection goes last), or, when every connection
is busy, gets a 503 itself, unless its request line is ``GET /healthz`` (a health check answers whenever
the process does: a cap full of slow clients is load, not failure); a connection whose headers are not
complete within the header timeout (from opening, or from its previous answer) is closed. The listening
socket (:class:`GuardedListener`) accepts while at most ACCEPT_SLACK accepted connections wait to be
admitted: asyncio would otherwise accept up to its backlog in one go, file descriptors the cap has not seen
yet.

``/healthz`` answers ``ok`` with the proxy's mode in ``X-Microcompact-Serve-Mode`` (``rewrite`` or ``audit``),
over the cap too: the launchers read it before reusing a ``serve`` (launch/lifecycle.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import time
from enum import StrEnum
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import error_body
from .limits import FD_RESERVE, MAX_FILE_LIMIT

ACCEPT_SLACK = 16  # accepted connections at most waiting for admission (and as many closing after an eviction)
# At the cap, the bytes of a refused connection read for its request line: enough for ``GET /healthz``.
REQUEST_LINE_BYTES = 256
HEALTH_LINES = (b"GET /healthz ", b"HEAD /healthz ", b"GET /healthz?", b"HEAD /healthz?")

SERVE_MODE_HEADER = "x-microcompact-serve-mode"  # on every /healthz answer


class ServeMode(StrEnum):
    """What ``serve`` does to a compacted route's request: rewrite it, or forward it as it came (--audit)."""

    REWRITE = "rewrite"
    AUDIT = "audit"

    @classmethod
    def of(cls, audit: bool) -> ServeMode:
        return cls.AUDIT if audit else cls.REWRITE


log = logging.getLogger("microcompact")
LOG_EVERY_SECONDS = 60.0  # the cap being reached is logged at most this often


def raise_file_limit() -> int:
    """The soft open-file limit, raised toward the hard one (at most MAX_FILE_LIMIT) when it is lower, as
    servers commonly do; the limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_FILE_LIMIT if hard == resource.RLIM_INFINITY else min(hard, MAX_FILE_LIMIT)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):
            pass
    return MAX_FILE_LIMIT if soft == resource.RLIM_INFINITY else soft


def allowed_connections(file_limit: int) -> int:
    """The connections ``file_limit`` open files carry: one for the client and one toward the upstream
    each, after FD_RESERVE for everything else and the accept slack."""
    return max(8, (file_limit - FD_RESERVE - 2 * ACCEPT_SLACK) // 2)


class ConnectionGuard:
    """The open connections, oldest first, and what to do with one more at the cap."""

    def __init__(self, cap: int, header_timeout: float, mode: ServeMode = ServeMode.REWRITE) -> None:
        self.cap = cap
        self.header_timeout = header_timeout
        self.mode = mode  # named by a health check answered over the cap
        self.open: dict[GuardedH11Protocol, None] = {}  # insertion-ordered: oldest first
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.pending = 0  # accepted by the listener, not yet admitted or refused
        self.waiting = 0  # refused at the cap, their request line read to answer a health check
        self._logged_at = -LOG_EVERY_SECONDS

    def admit(self, connection: GuardedH11Protocol) -> bool:
        """True when ``connection`` may stay (an idle one closed to make room if needed)."""
        self.pending = max(0, self.pending - 1)
        if len(self.open) >= self.cap:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                self._note(f"all {self.cap} connections have a request in flight: refused a new one with a 503")
                return False
            self.open.pop(victim, None)
            victim.close_idle()
            self.evicted += 1
            self._note(f"{self.cap} connections open (serve --max-connections): closed the oldest idle one")
        self.open[connection] = None
        return True

    def gone(self, connection: GuardedH11Protocol) -> None:
        self.open.pop(connection, None)

    def _victim(self) -> GuardedH11Protocol | None:
        """The oldest connection that never completed a request and has none in flight, else the oldest
        idle keep-alive one."""
        fallback = None
        for connection in self.open:
            if connection.idle():
                if not connection.served:
                    return connection
                fallback = fallback or connection
        return fallback

    def _note(self, what: str) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            log.warning("Proxy: %s (logged at most once a minute)", what)


class GuardedListener(socket.socket):
    """A listening socket that stops accepting (for this turn of the event loop) while ACCEPT_SLACK
    accepted connections wait for the guard."""

    guard: ConnectionGuard | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        guard = self.guard
        if guard is not None and guard.pending >= ACCEPT_SLACK:
            raise BlockingIOError(errno.EAGAIN, "connections wait for admission")
        accepted = super().accept()
        if guard is not None:
            guard.pending += 1
        return accepted


def _health_answer(head_only: bool, mode: ServeMode) -> bytes:
    """``/healthz``'s answer, written by the protocol itself for a connection over the cap."""
    body = b"ok\n"
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\n{SERVE_MODE_HEADER}: {mode.value}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + (b"" if head_only else body)


def _busy_answer(cap: int) -> bytes:
    body = orjson.dumps(
        error_body(None, 503, f"microcompact: all {cap} connections of this proxy are busy; retry shortly")
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, admitted by the class's :class:`ConnectionGuard` and given a header deadline."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitted = False
        self.served = 0
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused: bytearray | None = None  # over the cap: its request line so far

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.guard.admit(self):
            self.admitted = True
            self._arm_header_timer()
        elif self.guard.waiting < ACCEPT_SLACK:
            self.guard.waiting += 1
            self._refused = bytearray()  # answered by its request line: a health check, or the 503
            self._header_timer = self.loop.call_later(self.guard.header_timeout, self._refuse)
        else:
            self._refuse()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if self._refused is not None:
            self._refused = None
            self.guard.waiting -= 1
        self.guard.gone(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            super().data_received(data)
        elif self._refused is not None and not self.transport.is_closing():
            self._refused += data[: REQUEST_LINE_BYTES - len(self._refused)]
            if b"\n" in self._refused or len(self._refused) >= REQUEST_LINE_BYTES:
                line = bytes(self._refused)
                if line.startswith(HEALTH_LINES):
                    self._answer(_health_answer(line.startswith(b"HEAD"), self.guard.mode))
                else:
                    self._refuse()

    def _refuse(self) -> None:
        self._answer(_busy_answer(self.guard.cap))

    def _answer(self, answer: bytes) -> None:
        self._disarm_header_timer()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if not self.idle():
            self._disarm_header_timer()  # a request's headers came in time

    def on_response_complete(self) -> None:
        self.served += 1
        if not self.transport.is_closing():
            self._arm_header_timer()  # before the next request's headers, which the call below may parse
        super().on_response_complete()

    def idle(self) -> bool:
        """No request in flight: waiting for the headers of the first or the next one."""
        return self.cycle is None or self.cycle.response_complete

    def close_idle(self) -> None:
        self._disarm_header_timer()
        if not self.transport.is_closing():
            self.transport.close()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.guard.header_timeout, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.idle() and not self.transport.is_closing():
            self.guard.timed_out += 1
            self.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` whose connections ``guard`` admits."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


__all__ = [
    "ConnectionGuard",
    "GuardedH11Protocol",
    "GuardedListener",
    "allowed_connections",
    "guarded_protocol",
    "raise_file_limit",
]
