"""The ASGI app behind ``microcompact serve``: OpenAI and Anthropic on one port, compacted on the way up.

Routes:

- ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic, any query such as
  ``?beta=true``): the client's full history is compacted (:mod:`.compaction`) and forwarded;
- ``POST /v1/messages/count_tokens``: forwarded with the conversation's compacted view;
- Gemini (``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``, SSE or a JSON
  array; ``/v1/models/...`` and ``/v1alpha/models/...`` too): compacted the same way, ``:countTokens``
  forwarded with the compacted view; every other Gemini path (``/v1beta/...``, ``/v1alpha/...``, a
  Google key) goes to the Gemini upstream only;
- ``GET /healthz`` and ``GET /metrics`` (Prometheus text);
- anything else: passed through to the upstream the request is meant for (Anthropic when it carries
  ``anthropic-version`` or its path starts with ``/v1/messages``, else OpenAI).

The event loop only parses, forwards and copies bytes; engine work runs on worker threads.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..messages import Message
from ..router import SessionRouter
from .anthropic_format import AnthropicFormat
from .compaction import Compaction, Prepared
from .errors import BadRequest, error_response
from .forward import Passthrough, upstream_headers
from .gemini_format import GeminiFormat
from .metrics import Metrics
from .openai_format import OpenAIFormat
from .provider import Provider, dumps, stripped
from .session_key import session_key
from .usage_tap import UsageTap
from .view import unchanged

log = logging.getLogger("microcompact")

Endpoint = Callable[[Request], Awaitable[Response]]
OPENAI = OpenAIFormat()
ANTHROPIC = AnthropicFormat()
GEMINI = GeminiFormat()
GEMINI_VERSIONS = ("v1beta", "v1alpha")
GEMINI_ROUTES = ("v1beta", "v1alpha", "v1")  # google-genai 3 defaults to /v1/models/{model}:{method}
GEMINI_GENERATE = frozenset({"generateContent", "streamGenerateContent"})
PROXY_KEY_HEADER = "x-microcompact-key"
# Connecting may time out; reading never does: a long stream, or a model thinking for minutes, is normal.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=30.0, read=None, write=None, pool=None)
UPSTREAM_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=60)


@dataclass(frozen=True)
class ProxySettings:
    openai_upstream: str = "https://api.openai.com/v1"
    anthropic_upstream: str = "https://api.anthropic.com"
    gemini_upstream: str = "https://generativelanguage.googleapis.com"
    api_key: str | None = None  # when set, every request but /healthz needs it in X-Microcompact-Key


def upstream_url(settings: ProxySettings, api: str, path: str, query: str) -> str:
    """Where a request for ``path`` goes: the upstream's base URL as the SDKs take it, plus the path
    (without OpenAI's ``/v1``, which its base URL already holds)."""
    if api == "anthropic":
        url = settings.anthropic_upstream.rstrip("/") + path
    elif api == "gemini":
        url = settings.gemini_upstream.rstrip("/") + path
    else:
        url = settings.openai_upstream.rstrip("/") + (path[3:] if path.startswith("/v1/") else path)
    return f"{url}?{query}" if query else url


def api_of(request: Request) -> str:
    """Which upstream a request that is not a chat request is for: Anthropic's when it says so (its headers,
    its paths, or a path outside ``/v1/``, which only a host-root base URL can serve), else OpenAI's."""
    headers = request.headers
    path = request.url.path
    if _is_gemini(path, headers, request.url.query):
        return "gemini"
    if path.startswith("/v1/messages") or "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai" if path.startswith("/v1/") else "anthropic"


class Proxy:
    def __init__(self, router: SessionRouter, settings: ProxySettings, metrics: Metrics | None = None) -> None:
        self.router = router
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.compaction = Compaction(router, self.metrics)
        self.client: httpx.AsyncClient | None = None
        self._follow_ups: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ app

    def app(self) -> Starlette:
        routes = [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics_page, methods=["GET"]),
            Route("/v1/chat/completions", self._guarded(self.chat_completions), methods=["POST"]),
            Route("/v1/messages", self._guarded(self.messages), methods=["POST"]),
            Route("/v1/messages/count_tokens", self._guarded(self.count_tokens), methods=["POST"]),
            *(
                Route(f"/{version}/models/{{target:path}}", self._guarded(self.gemini), methods=["POST"])
                for version in GEMINI_ROUTES
            ),
            Route(
                "/{path:path}",
                self._guarded(self.passthrough),
                methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
            ),
        ]
        return Starlette(routes=routes, lifespan=self._lifespan)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # trust_env: HTTPS_PROXY / NO_PROXY / SSL_CERT_FILE apply to the upstream, as they do for the agent itself
        self.client = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT, limits=UPSTREAM_LIMITS, trust_env=True)
        try:
            yield
        finally:
            if self._follow_ups:
                await asyncio.gather(*self._follow_ups, return_exceptions=True)
            await self.client.aclose()

    def _guarded(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, answering a failure of the proxy itself with one log line and a provider-shaped 500
        (never a traceback to the client)."""

        async def guarded(request: Request) -> Response:
            try:
                return await endpoint(request)
            except Exception as exc:
                log.error("Proxy: %s %s failed (%s: %s)", request.method, request.url.path, type(exc).__name__, exc)
                return self._answer(api_of(request), 500, f"microcompact: internal error ({type(exc).__name__})")

        return guarded

    # ------------------------------------------------------------------ endpoints

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def metrics_page(self, request: Request) -> Response:
        refused = self._refused(request, "openai")
        if refused is not None:
            return refused
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, OPENAI)

    async def messages(self, request: Request) -> Response:
        return await self._generate(request, ANTHROPIC)

    async def count_tokens(self, request: Request) -> Response:
        started = time.perf_counter()
        refused = self._refused(request, "anthropic")
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            body, history = _parse(ANTHROPIC, raw)
            key = session_key(request.headers, ANTHROPIC.name, stripped(ANTHROPIC.key_material(body)))
        except BadRequest as exc:
            return self._answer(ANTHROPIC.name, 400, str(exc))
        messages = await anyio.to_thread.run_sync(self.compaction.view_for_count, ANTHROPIC, body, key, history)
        content = raw if unchanged(history, messages) else _body(body, messages)
        return await self._forward(request, ANTHROPIC, content, started, None, {})

    async def gemini(self, request: Request) -> Response:
        """``models/{model}:{method}``: generate compacted, countTokens with the compacted view, the rest
        (embedContent, ...) passed through to the Gemini upstream."""
        model, colon, method = request.path_params["target"].rpartition(":")
        if not colon or "/" in model:  # not a model method (an OpenAI path under /v1/models/...)
            return await self.passthrough(request)
        if method in GEMINI_GENERATE:
            return await self._generate(request, GEMINI, GEMINI.body, GEMINI.passthrough_reason)
        if method == "countTokens":
            return await self._gemini_count(request)
        return await self.passthrough(request)

    async def _gemini_count(self, request: Request) -> Response:
        """countTokens of the conversation's compacted view: its ``contents``, or the ``contents`` of its
        ``generateContentRequest``."""
        started = time.perf_counter()
        refused = self._refused(request, GEMINI.name)
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            outer = _parse_json(raw)
            inner = outer.get("generateContentRequest") if isinstance(outer, dict) else None
            body = inner if isinstance(inner, dict) and "contents" in inner else outer
            history = GEMINI.history(body)
            key = session_key(request.headers, GEMINI.name, stripped(GEMINI.key_material(body)))
        except BadRequest as exc:
            return self._answer(GEMINI.name, 400, str(exc))
        messages = await anyio.to_thread.run_sync(self.compaction.view_for_count, GEMINI, body, key, history)
        if unchanged(history, messages):
            content = raw
        elif body is outer:
            content = GEMINI.body(body, messages)
        else:
            content = _body_with(outer, "generateContentRequest", orjson.loads(GEMINI.body(body, messages)))
        return await self._forward(request, GEMINI, content, started, None, {})

    async def passthrough(self, request: Request) -> Response:
        started = time.perf_counter()
        api = api_of(request)
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        return await self._forward(request, _PROVIDERS[api], await request.body(), started, None, {})

    # ------------------------------------------------------------------ the compacted path

    async def _generate(
        self,
        request: Request,
        provider: Provider,
        build: Callable[[dict[str, Any], list[Message]], bytes] | None = None,
        passthrough_reason: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> Response:
        """Compact and forward; ``build`` makes the outgoing body (default: ``messages`` replaced), and a
        ``passthrough_reason`` forwards a request it names a reason for as it came."""
        started = time.perf_counter()
        refused = self._refused(request, provider.name)
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            body, history = _parse(provider, raw)
            reason = passthrough_reason(body) if passthrough_reason is not None else None
            if reason is not None:
                log.warning("Proxy: passing a %s request through uncompacted (%s)", provider.name, reason)
                return await self._forward(request, provider, raw, started, None, {})
            key = session_key(request.headers, provider.name, stripped(provider.key_material(body)))
            prepared = await anyio.to_thread.run_sync(self.compaction.prepare, provider, body, key, history)
        except BadRequest as exc:
            return self._answer(provider.name, 400, str(exc))
        content = raw if unchanged(history, prepared.messages) else (build or _body)(body, prepared.messages)
        headers = self._report(prepared, len(raw), len(content))
        return await self._forward(request, provider, content, started, prepared, headers)

    def _report(self, prepared: Prepared, sent_by_client: int, forwarded: int) -> dict[str, str]:
        """The X-Microcompact-* response headers; records the request's metrics."""
        headers: dict[str, str] = {}
        saved = 0
        if prepared.session is not None:
            headers["x-microcompact-session"] = prepared.session.session_id
            if prepared.occupancy_pct is not None:
                headers["x-microcompact-occupancy"] = f"{prepared.occupancy_pct:.1f}"
            saved = _tokens_saved(prepared.counted_tokens, sent_by_client, forwarded)
            headers["x-microcompact-tokens-saved"] = str(saved)
        if prepared.degraded:
            headers["x-microcompact-degraded"] = prepared.degraded
            self.metrics.degrade(prepared.degraded)
        self.metrics.passes_done(prepared.outcomes)
        self.metrics.compacted(prepared.occupancy_pct, saved)
        return headers

    # ------------------------------------------------------------------ forwarding

    async def _forward(
        self,
        request: Request,
        provider: Provider,
        content: bytes,
        started: float,
        prepared: Prepared | None,
        headers: dict[str, str],
    ) -> Response:
        assert self.client is not None, "the app's lifespan did not run"
        url = upstream_url(self.settings, provider.name, request.url.path, request.url.query)
        outgoing = httpx.Request(
            request.method, url, headers=upstream_headers(request.headers.items()), content=content
        )
        self.metrics.proxy_overhead(time.perf_counter() - started)
        try:
            response = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            if prepared is not None:
                self._follow_up(prepared, None)
            log.warning("Proxy: upstream %s unreachable (%s)", _origin(url), type(exc).__name__)
            return self._answer(
                provider.name,
                502,
                f"microcompact: the upstream {_origin(url)} is unreachable ({type(exc).__name__})",
                headers,
            )
        self.metrics.request(provider.name, response.status_code)
        tap = UsageTap(response.headers.get("content-type", ""), provider.prompt_tokens)

        def done(tap: UsageTap, complete: bool) -> None:
            if prepared is not None:
                ok = response.status_code < 400 and complete
                self._follow_up(prepared, tap.finish() if ok else None)

        return Passthrough(response, tap, headers, done)

    def _follow_up(self, prepared: Prepared, prompt_tokens: int | None) -> None:
        """Queue the request's after-work at once, and run it on a worker thread, not awaited."""
        self.compaction.answered(prepared, prompt_tokens)
        task = asyncio.get_running_loop().create_task(anyio.to_thread.run_sync(self.compaction.follow_up, prepared.key))
        self._follow_ups.add(task)
        task.add_done_callback(self._follow_ups.discard)

    # ------------------------------------------------------------------ helpers

    def _refused(self, request: Request, api: str) -> Response | None:
        expected = self.settings.api_key
        if expected is None:
            return None
        given = request.headers.get(PROXY_KEY_HEADER, "")
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return self._answer(api, 401, f"microcompact: this proxy needs its key in the {PROXY_KEY_HEADER} header")

    def _answer(self, api: str, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        self.metrics.request(api, status)
        return error_response(api, status, message, headers)

    @property
    def follow_ups_running(self) -> int:
        """Answered requests whose after-work has not finished yet."""
        return len(self._follow_ups)


_PROVIDERS: dict[str, Provider] = {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI}


def _is_gemini(path: str, headers: Any, query: str) -> bool:
    """Gemini's API (its versions' paths, its uploads, its key): only ever sent to the Gemini upstream."""
    first = path.lstrip("/").split("/", 1)[0]
    if first in GEMINI_VERSIONS or path.startswith("/upload/") or "x-goog-api-key" in headers:
        return True
    if path.startswith("/v1/models/") and ":" in path.rsplit("/", 1)[-1]:
        return True
    return any(pair.split("=", 1)[0] == "key" for pair in query.split("&") if pair)


def _parse(provider: Provider, raw: bytes) -> tuple[dict[str, Any], list[Any]]:
    """The body and its messages."""
    body = _parse_json(raw)
    return body, provider.history(body)


def _parse_json(raw: bytes) -> Any:
    """orjson for speed; the standard library for what orjson refuses but a provider may accept (integers
    beyond 64 bits, lone surrogate escapes)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise BadRequest(f"the request body is not valid JSON ({exc})") from None


def _body_with(outer: dict[str, Any], field: str, inner: Any) -> bytes:
    return dumps({**outer, field: inner})


def _body(body: dict[str, Any], messages: list[Message]) -> bytes:
    """The outgoing body: the client's, with the compacted ``messages``."""
    outgoing = {**body, "messages": messages}
    try:
        return orjson.dumps(outgoing)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(outgoing, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _tokens_saved(counted_tokens: int, sent_by_client: int, forwarded: int) -> int:
    """Tokens the client's request would have cost more than the forwarded one: the bytes saved, at the
    bytes-per-token rate of the forwarded view (an estimate, like any count made before the provider's)."""
    if forwarded <= 0 or counted_tokens <= 0 or sent_by_client <= forwarded:
        return 0
    return round((sent_by_client - forwarded) * counted_tokens / forwarded)


def _origin(url: str) -> str:
    parts = httpx.URL(url)
    return f"{parts.scheme}://{parts.host}" + (f":{parts.port}" if parts.port else "")


def create_app(router: SessionRouter, settings: ProxySettings | None = None) -> Starlette:
    return Proxy(router, settings or ProxySettings()).app()


__all__ = ["Proxy", "ProxySettings", "create_app"]
