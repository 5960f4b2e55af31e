"""What the proxy takes from a client and waits for, bounded: body size, read times, nesting, connections.

Every limit has a default nobody has to think about and a ``serve`` option (README "Limits"):

- the request body: at most ``max_body_bytes`` (64 MiB: the providers' own limits are 20-50 MB), refused
  with a 413 in the provider's error shape as soon as the ``Content-Length`` says so or the bytes read pass
  it; nothing of it is parsed or stored. The rest of a refused body is read and dropped for a few seconds,
  so a client still sending it gets to read the answer (a server that closes on unread data resets the
  connection, and the client's TCP stack may throw the answer away);
- the body's pace: a body that stalls (no byte for ``body_timeout`` seconds) is answered with a 408;
- nesting: a JSON body nested more than :data:`~microcompact.jsoninput.MAX_DEPTH` levels (the transcript
  reader's cap) anywhere is a 400 naming where, before anything walks it recursively: on the compacted
  routes when the app parses it (:func:`parse_json`), on the routes forwarded as they came here (a body
  whose content type is JSON, or that has none and opens with ``{`` or ``[``; a multipart upload, audio or
  other bytes go up as they are, and so does JSON the proxy cannot read: the upstream answers it);
- the path and headers: what cannot be forwarded as the client meant it (a control character or a dot
  segment in the path, a header value outside ASCII) is a 400 too (:mod:`.wire_checks`);
- the headers: a connection must send a request's headers within ``header_timeout`` seconds of opening (or
  of its previous answer), and connections are capped (``max_connections``; by default what the open-file
  limit allows, one upstream connection per client connection). At the cap, a new connection closes the
  oldest one that has no request in flight, preferring one that never completed a request; when every
  connection is busy, the new one gets a 503 and is closed. Slow or stalled clients (slowloris) cannot
  starve the others, nor the process of file descriptors (:mod:`.connections`);
- toward the upstream: a connect timeout, and an idle timeout (no byte for that long; a long answer that
  keeps sending is never cut). A client that leaves cancels its upstream request (:mod:`.forward`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import anyio
import httpx
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..jsoninput import MAX_DEPTH, too_deep
from .errors import BadRequest, error_body
from .metrics import Metrics
from .routes import FORWARD, Route, match
from .wire_checks import request_problem

MiB = 1024 * 1024
DEFAULT_MAX_BODY = 64 * MiB
LINGER_SECONDS = 10.0  # at most this long reading and dropping the rest of a refused body
FD_RESERVE = 100  # open files kept for the store, logs, worker threads and the listening socket
MAX_FILE_LIMIT = 65536  # the soft open-file limit is raised toward the hard one, up to this
MODE_HEADER = "x-microcompact-mode"  # as server/app.py sets it on every answer
THREAD_ABOVE = 256 * 1024  # a forwarded body larger than this is checked for nesting on a worker thread
_JSON_TYPE = re.compile(r"\s*(?:application|text)/(?:[\w.+-]*\+)?json\s*(?:;|$)", re.IGNORECASE)


class LimitsError(ValueError):
    """A limit option that cannot work, phrased for the user (one line, naming the option)."""


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = DEFAULT_MAX_BODY
    header_timeout: float = 30.0  # seconds from opening (or the previous answer) to a request's last header
    body_timeout: float = 60.0  # seconds without a byte of a request body that is not complete
    max_connections: int | None = None  # None: from the open-file limit (see connections.default_cap)
    upstream_connect_timeout: float = 30.0
    upstream_idle_timeout: float | None = 600.0  # seconds without a byte from the upstream; None: wait forever

    def checked(self) -> Limits:
        """These limits, or a LimitsError naming the option that cannot work."""
        if self.max_body_bytes < 1024:
            raise LimitsError(f"--max-body-size: expected at least 1 KiB, got {self.max_body_bytes} bytes")
        for flag, value in (
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
            ("--upstream-connect-timeout", self.upstream_connect_timeout),
        ):
            if not value > 0 or value == float("inf"):
                raise LimitsError(f"{flag}: expected a number of seconds above 0, got {value:g}")
        idle = self.upstream_idle_timeout
        if idle is not None and (idle < 0 or idle == float("inf") or idle != idle):
            raise LimitsError(f"--upstream-idle-timeout: expected seconds, 0 for none, got {idle:g}")
        if self.max_connections is not None and self.max_connections < 1:
            raise LimitsError(f"--max-connections: expected at least 1, got {self.max_connections}")
        return replace(self, upstream_idle_timeout=idle or None)

    def upstream_timeout(self) -> httpx.Timeout:
        """Connecting may time out; reading and writing only after ``upstream_idle_timeout`` seconds without
        a byte (a long stream, or a model thinking for minutes while it sends pings, is normal); waiting for
        a pooled connection never does (the connection cap bounds how many wait)."""
        idle = self.upstream_idle_timeout
        return httpx.Timeout(connect=self.upstream_connect_timeout, read=idle, write=idle, pool=None)

    def upstream_pool(self) -> httpx.Limits:
        """At most one upstream connection per client connection the proxy accepts."""
        most = self.max_connections or 1000
        return httpx.Limits(max_connections=most, max_keepalive_connections=min(200, most), keepalive_expiry=60)

    def describe(self) -> str:
        """One line for the startup message."""
        idle = f"{self.upstream_idle_timeout:g} s" if self.upstream_idle_timeout else "none"
        connections = self.max_connections if self.max_connections is not None else "from the open-file limit"
        return (
            f"limits: request body {size_text(self.max_body_bytes)}, headers within {self.header_timeout:g} s, "
            f"body idle {self.body_timeout:g} s, {connections} connections; upstream connect "
            f"{self.upstream_connect_timeout:g} s, idle {idle}"
        )


# ---------------------------------------------------------------------- sizes

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?b?)\s*", re.IGNORECASE)


_UNIT_POWERS = {"k": 1, "m": 2, "g": 3}


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number of bytes, or with a unit (``64MiB``, ``64M`` and ``64m`` are 1024-based,
    ``64MB`` is 1000-based)."""
    found = _SIZE.fullmatch(text)
    if not found:
        raise LimitsError(f"--max-body-size: expected a size such as 64MiB, 500KB or 1048576, got {text!r}")
    number, unit, suffix = found.groups()
    base = 1000 if suffix.lower() == "b" and unit else 1024
    return int(float(number) * (base ** _UNIT_POWERS[unit.lower()] if unit else 1))


def size_text(size: int) -> str:
    for unit, factor in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


# ---------------------------------------------------------------------- nesting


def parse_json(raw: bytes) -> Any:
    """A request body: orjson for speed, the standard library for what orjson refuses but a provider may
    accept (integers beyond 64 bits, lone surrogate escapes); nested more than MAX_DEPTH levels anywhere,
    a BadRequest naming where."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            where = deep_path(raw)
            if where is not None:
                raise BadRequest(_too_deep(where)) from None
            raise BadRequest(f"the request body is not valid JSON ({exc})") from None
    if too_deep(value):
        where = deep_path(raw)
        raise BadRequest(_too_deep(where or "(unknown)"))
    return value


def forwarded_nesting(raw: bytes, content_type: str) -> str | None:
    """The 400's message when ``raw``, a body forwarded as it came, is JSON nested more than MAX_DEPTH levels
    anywhere; None for a body within the cap, one that is not JSON (by ``content_type``, or with none, by its
    first byte) or JSON the proxy cannot read (the upstream answers that)."""
    if content_type.strip():
        if not _JSON_TYPE.match(content_type):
            return None
    elif raw.lstrip(b" \t\r\n")[:1] not in (b"{", b"["):
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:  # too deep for orjson (1,024 levels), or not JSON it reads: the text says
        where = deep_path(raw)
        return _too_deep(where) if where is not None else None
    return _too_deep(deep_path(raw) or "(unknown)") if too_deep(value) else None


def _too_deep(where: str) -> str:
    return f"the request body is nested more than {MAX_DEPTH} levels deep at {where}; this proxy refuses it"


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
SHOWN_STEPS = 6


def deep_path(raw: bytes) -> str | None:
    """Where in the JSON text ``raw`` the first container more than MAX_DEPTH levels down opens, as a path
    (``messages[0].content[0].input.a…``), read from the text itself so that it also works on a body too
    deep for any parser; None when there is none."""
    frames: list[list[Any]] = []  # per open container: [is_object, key or index, expecting a key]
    for token in _TOKEN.finditer(raw):
        text = token.group()
        head = text[:1]
        if head == b'"':
            if frames and frames[-1][0] and frames[-1][2]:
                frames[-1][1], frames[-1][2] = _key(text), False
        elif head in (b"{", b"["):
            if len(frames) >= MAX_DEPTH:
                return _path(frames)
            frames.append([head == b"{", None if head == b"{" else 0, True])
        elif head in (b"}", b"]"):
            if frames:
                frames.pop()
        elif frames:  # a comma
            frame = frames[-1]
            if frame[0]:
                frame[2] = True
            else:
                frame[1] += 1
    return None


def _key(token: bytes) -> str:
    try:
        key = orjson.loads(token)
    except orjson.JSONDecodeError:
        key = token[1:-1].decode("utf-8", "replace")
    return str(key)[:40]


def _path(frames: list[list[Any]]) -> str:
    steps = []
    for is_object, at, _ in frames:
        if not is_object:
            steps.append(f"[{at}]")
        elif isinstance(at, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", at):
            steps.append(f".{at}")
        else:
            steps.append(f"[{orjson.dumps(at).decode() if at is not None else '?'}]")
    shown = "".join(steps[:SHOWN_STEPS]).lstrip(".")
    return (shown or "the top level") + ("…" if len(steps) > SHOWN_STEPS else "")


# ---------------------------------------------------------------------- the body, read whole or refused


class BodyLimit:
    """ASGI middleware: reads each request's body (bounded in size and pace) before the app sees it, and
    answers what is too large (413) or too slow (408) itself, in the shape of the provider the path is for,
    with ``Connection: close``."""

    def __init__(self, app: ASGIApp, limits: Limits, metrics: Metrics | None = None) -> None:
        self.app = app
        self.limits = limits
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = _content_length(headers)
        limit = self.limits.max_body_bytes
        if declared is not None and declared > limit:
            said = f"Content-Length {declared:,} bytes"
            await self._refuse(scope, headers, receive, send, 413, self._too_large(said), "body_too_large")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message: Message | None = None
            with anyio.move_on_after(self.limits.body_timeout):
                message = await receive()
            if message is None:
                said = f"microcompact: the request body stalled: no byte for {self.limits.body_timeout:g} s"
                await self._refuse(scope, headers, receive, send, 408, f"{said} (serve --body-timeout)", "body_timeout")
                return
            if message["type"] == "http.disconnect":
                return  # the client left mid-body: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                said = f"more than {size_text(limit)} sent"
                await self._refuse(scope, headers, receive, send, 413, self._too_large(said), "body_too_large")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = request_problem(scope["path"], scope.get("headers", []))  # server/wire_checks.py
        if problem is None:
            deep = await self._forwarded_nesting(scope, headers, body)
            problem = f"microcompact: {deep}" if deep is not None else None
        if problem is not None:
            await self._refuse(scope, headers, receive, send, 400, problem, "invalid_request")
            return
        await self.app(scope, _replay(body, receive), send)

    async def _forwarded_nesting(self, scope: Scope, headers: dict[str, str], body: bytes) -> str | None:
        """Why a body on a route forwarded as it came is refused for its nesting (the compacted routes' bodies
        are parsed, and their nesting checked, by the app)."""
        if not body or _route(scope, headers).kind != FORWARD:
            return None
        content_type = headers.get("content-type", "")
        if len(body) <= THREAD_ABOVE:
            return forwarded_nesting(body, content_type)
        return await anyio.to_thread.run_sync(forwarded_nesting, body, content_type)

    def _too_large(self, said: str) -> str:
        return (
            f"microcompact: the request body ({said}) is over this proxy's limit of "
            f"{size_text(self.limits.max_body_bytes)} (serve --max-body-size)"
        )

    async def _refuse(
        self,
        scope: Scope,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
        status: int,
        message: str,
        reason: str,
    ) -> None:
        route = _route(scope, headers)
        if self.metrics is not None:
            self.metrics.request(route.api or "none", status)
            self.metrics.mode(route.api or "none", "passthrough", reason)
        body = orjson.dumps(error_body(route.api, status, message))
        start: Message = {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (MODE_HEADER.encode(), f"passthrough; reason={reason}".encode()),
            ],
        }
        if status != 400:  # a 400's body was read whole: the connection can carry the next request
            start["headers"].append((b"connection", b"close"))
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        if status == 413 and headers.get("expect", "").lower() != "100-continue":
            await self._drain(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _drain(self, receive: Receive) -> None:
        """Read and drop what the client still sends of a refused body, for LINGER_SECONDS at most."""
        with anyio.move_on_after(LINGER_SECONDS):
            while True:
                message: Message | None = None
                with anyio.move_on_after(self.limits.body_timeout):
                    message = await receive()
                if message is None or message["type"] != "http.request" or not message.get("more_body", False):
                    return


def _route(scope: Scope, headers: dict[str, str]) -> Route:
    return match(scope["method"], scope["path"], headers, scope.get("query_string", b"").decode("latin-1"))


def _content_length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length", "").strip()
    return int(value) if value.isdigit() else None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app the body already read, then what the client sends next (a disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


__all__ = [
    "BodyLimit",
    "Limits",
    "LimitsError",
    "deep_path",
    "forwarded_nesting",
    "parse_json",
    "parse_size",
    "size_text",
]
