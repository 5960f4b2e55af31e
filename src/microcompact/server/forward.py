"""Sending a request upstream and its response back to the client, byte for byte as it arrives.

Headers go both ways unchanged except hop-by-hop ones, ``host``, lengths (recomputed), and the proxy's own
(``X-Microcompact-*``, never forwarded); the upstream's ``Date`` and ``Server`` are replaced by the ones the
proxy's HTTP server writes on every answer (a client would otherwise read each twice). ``accept-encoding`` is
sent upstream as ``identity`` so the bytes passed back are the ones whose usage can be read on the side.
Credentials go only to the provider they are for: toward one provider, the other providers' credential headers
(``routes.CREDENTIALS``: a Google ``x-goog-api-key``, an Anthropic ``x-api-key``, OpenAI's organization
headers) are dropped, and its own (``authorization`` too: Anthropic takes OAuth tokens there) are forwarded
and nothing else is done with them: never stored, never logged.

The response is an ASGI app of its own: each chunk is written to the client as soon as it comes from
upstream (the one with a stream's final event after ``done`` ran: its usage is complete there); an
upstream that breaks mid-body leaves the client's response broken the same way (the connection is closed
without the final chunk); a client that goes away stops the copy and closes the upstream response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope, Send

from ..wire import Upstream
from .routes import CREDENTIALS
from .usage_tap import UsageTap

log = logging.getLogger("microcompact")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
OWN_PREFIX = "x-microcompact-"
# Written by the proxy's own HTTP server (uvicorn) on every answer it sends.
SERVER_WRITTEN = frozenset({"date", "server"})


def _hop_by_hop(headers: list[tuple[str, str]]) -> frozenset[str]:
    """HOP_BY_HOP plus the headers a ``Connection`` header names (they too end at this hop)."""
    named = {token.strip().lower() for n, v in headers if n.lower() == "connection" for token in v.split(",")}
    return HOP_BY_HOP | named


def foreign_credentials(api: Upstream) -> frozenset[str]:
    """The credential headers of every provider but ``api`` that ``api`` does not take itself."""
    others = frozenset().union(*(names for name, names in CREDENTIALS.items() if name != api))
    return others - CREDENTIALS.get(api, frozenset())


def upstream_headers(headers: Iterable[tuple[str, str]], api: Upstream | None = None) -> list[tuple[str, str]]:
    """The headers to send toward ``api``'s upstream (None: every credential kept, for callers that
    route on their own)."""
    items = list(headers)
    dropped = _hop_by_hop(items) | {"accept-encoding"} | (foreign_credentials(api) if api else frozenset())
    out = [(n, v) for n, v in items if n.lower() not in dropped and not n.lower().startswith(OWN_PREFIX)]
    out.append(("accept-encoding", "identity"))
    return out


def client_headers(headers: Iterable[tuple[str, str]], extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers to send the client, plus ``extra`` (the proxy's own)."""
    items = list(headers)
    dropped = _hop_by_hop(items) | SERVER_WRITTEN
    out = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in items if n.lower() not in dropped]
    out += [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in extra.items()]
    return out


Done = Callable[[UsageTap, bool], None]
T = TypeVar("T")


async def unless_client_leaves(receive: Receive, work: Callable[[], Awaitable[T]]) -> T | None:
    """``work()``'s result, or None when the client disconnected first; ``work`` is then cancelled (an
    upstream request it was sending is closed, and its connection with it). Called once the request body
    has been read, when all ``receive`` can still bring is the disconnect."""
    result: list[T] = []
    failed: list[Exception] = []  # raised as it is, not wrapped in the task group's ExceptionGroup
    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                result.append(await work())
            except Exception as exc:
                failed.append(exc)
            group.cancel_scope.cancel()

        group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
        group.start_soon(run)
    if failed:
        raise failed[0]
    return result[0] if result else None


def upstream_failure(
    exc: httpx.HTTPError, origin: str, connect_timeout: float, idle_timeout: float | None
) -> tuple[int, str]:
    """The status and message of the proxy's answer when the upstream request failed before its answer
    started: a timeout is a 504 naming the option, anything else a 502."""
    if isinstance(exc, httpx.ConnectTimeout):
        said = f"could not be reached within {connect_timeout:g} s (serve --upstream-connect-timeout)"
        return 504, f"microcompact: the upstream {origin} {said}"
    if isinstance(exc, httpx.TimeoutException):
        said = f"sent nothing for {idle_timeout or 0:g} s (serve --upstream-idle-timeout)"
        return 504, f"microcompact: the upstream {origin} {said}"
    return 502, f"microcompact: the upstream {origin} is unreachable ({type(exc).__name__})"


class Passthrough(Response):
    """The upstream response, streamed to the client; ``done(tap, complete)`` is called exactly once, as soon
    as the copy ends (complete: the whole upstream body was passed on). With ``hold`` (an answer that is not
    a stream) the whole body is read first and ``done`` runs before the headers go out, so what it adds to
    ``extra_headers`` (the figures of this very request) goes with them; the bytes are the same."""

    def __init__(
        self, upstream: httpx.Response, tap: UsageTap, extra_headers: dict[str, str], done: Done, hold: bool = False
    ) -> None:
        # Response.__init__ is not called: nothing is rendered here, the upstream's bytes are the body.
        self.upstream = upstream
        self.tap = tap
        self.extra_headers = extra_headers
        self.done: Done | None = done
        self.hold = hold
        self.status_code = upstream.status_code
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        complete = False
        try:
            if self.hold:
                await self._held(receive, send)
                return
            headers = client_headers(self.upstream.headers.multi_items(), self.extra_headers)
            await send({"type": "http.response.start", "status": self.upstream.status_code, "headers": headers})
            async with anyio.create_task_group() as group:

                async def copy() -> None:
                    nonlocal complete
                    complete = await self._copy(send)
                    group.cancel_scope.cancel()

                group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
                group.start_soon(copy)
            self._done(complete)  # before the last chunk: the client's next request may follow at once
            if complete:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away while we wrote to it
        finally:
            self._done(False)
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()

    async def _held(self, receive: Receive, send: Send) -> None:
        """Read the whole body (the client may leave meanwhile), run ``done``, then send headers and body;
        a body the upstream broke off is passed on as far as it came, without its final chunk."""
        chunks: list[bytes] = []
        complete = finished = False  # finished: not cut short by the client leaving
        async with anyio.create_task_group() as group:

            async def read() -> None:
                nonlocal complete, finished
                try:
                    async for chunk in self.upstream.aiter_raw():
                        self.tap.feed(chunk)
                        chunks.append(chunk)
                    complete = True
                except httpx.HTTPError as exc:
                    log.warning("Proxy: the upstream response broke off mid-body (%s)", type(exc).__name__)
                finished = True
                group.cancel_scope.cancel()

            group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
            group.start_soon(read)
        self._done(complete)
        if not finished:  # the client went away
            return
        headers = client_headers(self.upstream.headers.multi_items(), self.extra_headers)
        await send({"type": "http.response.start", "status": self.upstream.status_code, "headers": headers})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _done(self, complete: bool) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(self.tap, complete)

    async def _copy(self, send: Send) -> bool:
        try:
            async for chunk in self.upstream.aiter_raw():
                self.tap.feed(chunk)
                if self.tap.stopped:  # the stream's final event: billed before the client reads it
                    self._done(True)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            log.warning("Proxy: the upstream response broke off mid-body (%s)", type(exc).__name__)
            return False
        return True


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message: ASGIMessage = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return
