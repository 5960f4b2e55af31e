"""The ASGI app behind ``microcompact serve``: OpenAI, Anthropic and Gemini on one port, compacted on the way up.

Routes (:mod:`.routes` holds the table; each path is matched to exactly one API, with or without ``/v1``):

- ``POST /v1/chat/completions`` (OpenAI Chat), ``POST /v1/responses`` (OpenAI Responses) and
  ``POST /v1/messages`` (Anthropic, any query such as ``?beta=true``): the client's full history is
  compacted (:mod:`.compaction`) and forwarded;
- ``POST /v1/messages/count_tokens``: forwarded with the conversation's compacted view;
- Gemini's ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (SSE or a JSON
  array; ``/v1alpha/...`` and ``/v1/...`` too): compacted the same way; ``:countTokens`` forwarded with the
  compacted view;
- ``GET /healthz`` and ``GET /metrics`` (Prometheus text);
- ``GET /ui`` and ``/ui/...``: the conversation page and its JSON, read from the store (:mod:`.ui`);
- the rest of each provider's API (models, files, ``/v1/responses/{id}``, Gemini's ``/v1beta/...``, ...):
  passed through to that provider's upstream, with only that provider's credential headers;
- any other path: 404, forwarded nowhere; a request that came back to this proxy (:mod:`.hops`): 508.

Every answer carries ``X-Microcompact-Mode`` (:mod:`.mode_headers`): ``compacted``, ``passthrough;
reason=...`` or ``audit`` (``serve --audit``: :mod:`.audit`). A request goes up through :mod:`.upstream_send`.

The event loop only forwards and copies bytes; parsing a compacted route's body and the engine work run on
a worker thread, in one hand-off per request.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
import httpx
import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route as Path

from ..bill.cache_usage import UsageReport
from ..bill.proxy_bills import Through
from ..bill.session_bill import full_ratio
from ..router import SessionRouter
from ..wire import Upstream, WireApi
from .anthropic_format import AnthropicFormat
from .compaction import Compaction, Prepared
from .connections import SERVE_MODE_HEADER, ServeMode
from .errors import BadRequest, error_response
from .forward import Passthrough, unless_client_leaves, upstream_failure, upstream_headers
from .gc_pace import CollectionPacing
from .gemini_format import GeminiFormat
from .hops import Hops
from .limits import BodyLimit, parse_json
from .metrics import Metrics
from .mode_headers import MODE_HEADER, ModeHeaders, mode
from .openai_format import OpenAIFormat
from .provider import Provider, dumps
from .request_line import request_line
from .request_step import Aside, RequestSteps, parse
from .responses_format import ResponsesFormat
from .routes import (
    CHAT,
    COUNT_TOKENS,
    FORWARD,
    GEMINI_COUNT_TOKENS,
    GENERATE_CONTENT,
    MESSAGES,
    RESPONSES,
    UNKNOWN,
    Route,
    match,
    model_method,
)
from .session_key import SessionKeys, load_salt
from .settings import ProxySettings, upstream_url
from .thinking import ThinkingGuard, ThinkingPlan
from .ui import ConversationPages
from .upstream_send import UpstreamSender
from .upstream_summary import remember as remember_for_summary
from .usage_tap import UsageTap
from .view import unchanged

log = logging.getLogger("microcompact")

Endpoint = Callable[[Request], Awaitable[Response]]
OPENAI = OpenAIFormat()
ANTHROPIC = AnthropicFormat()
RESPONSES_API = ResponsesFormat()
GEMINI = GeminiFormat()
PROXY_KEY_HEADER = "x-microcompact-key"


def route_of(request: Request) -> Route:
    """The request's route (matched once, kept on the request)."""
    route = getattr(request.state, "route", None)
    if not isinstance(route, Route):
        route = match(request.method, request.url.path, request.headers, request.url.query)
        request.state.route = route
    return route


class Proxy:
    def __init__(
        self,
        router: SessionRouter,
        settings: ProxySettings,
        metrics: Metrics | None = None,
        request_lines: Callable[[str], None] | None = None,  # one line per answered request (serve's stderr)
    ) -> None:
        self.router = router
        self.request_lines = request_lines
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.compaction = Compaction(router, self.metrics, settings.audit)
        self.thinking = ThinkingGuard(router.config.thinking, self.metrics)
        self.hops = Hops()
        self.keys = SessionKeys(None if settings.share_sessions_across_keys else load_salt(settings.salt_file))
        self.upstream = UpstreamSender(settings.limits)
        self.modes = ModeHeaders(self.metrics, self.compaction)
        self.steps = RequestSteps(self.compaction, self.thinking, self.keys)
        self._follow_ups: set[asyncio.Task[None]] = set()
        self.collector = CollectionPacing()  # full garbage collections between requests

    # ------------------------------------------------------------------ app

    def app(self) -> Starlette:
        routes = [
            Path("/healthz", self.healthz, methods=["GET"]),
            Path("/metrics", self.metrics_page, methods=["GET"]),
            *ConversationPages(self.router.store, self.settings.api_key).routes(),  # /ui (server/ui/)
            Path(
                "/{path:path}",
                self._guarded(self.dispatch),
                methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
            ),
        ]
        limits = Middleware(BodyLimit, limits=self.settings.limits, metrics=self.metrics)
        return Starlette(routes=routes, lifespan=self._lifespan, middleware=[limits])

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.upstream.open()
        self.collector.start()
        try:
            yield
        finally:
            if self._follow_ups:
                await asyncio.gather(*self._follow_ups, return_exceptions=True)
            await self.upstream.close()
            self.collector.stop()

    def _guarded(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, answering a failure of the proxy itself with one log line and a provider-shaped 500
        (never a traceback to the client)."""

        async def guarded(request: Request) -> Response:
            try:
                return await endpoint(request)
            except Exception as exc:
                log.error("Proxy: %s %s failed (%s: %s)", request.method, request.url.path, type(exc).__name__, exc)
                return self._answer(
                    route_of(request).api or Upstream.OPENAI,
                    500,
                    f"microcompact: internal error ({type(exc).__name__})",
                )

        return guarded

    # ------------------------------------------------------------------ endpoints

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n", headers={SERVE_MODE_HEADER: ServeMode.of(self.settings.audit).value})

    async def metrics_page(self, request: Request) -> Response:
        refused = self._refused(request, Upstream.OPENAI)
        if refused is not None:
            return refused
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def dispatch(self, request: Request) -> Response:
        """The endpoint of the request's route (see :mod:`.routes`)."""
        endpoints: dict[str, Endpoint] = {
            CHAT: self.chat_completions,
            RESPONSES: self.responses,
            MESSAGES: self.messages,
            COUNT_TOKENS: self.count_tokens,
            GENERATE_CONTENT: self.gemini,
            GEMINI_COUNT_TOKENS: self.gemini,
            FORWARD: self.passthrough,
            UNKNOWN: self.unknown_route,
        }
        route = route_of(request)
        if (loop := self.hops.refusal(request.headers, route.api)) is not None:
            log.warning("Proxy: refused %s %s: %s", request.method, request.url.path, loop)
            return self._answer(route.api or "none", 508, loop)
        return await endpoints[route.kind](request)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, OPENAI)

    async def messages(self, request: Request) -> Response:
        return await self._generate(request, ANTHROPIC)

    async def responses(self, request: Request) -> Response:
        return await self._generate(request, RESPONSES_API)

    async def count_tokens(self, request: Request) -> Response:
        started = time.perf_counter()
        refused = self._refused(request, ANTHROPIC.name)
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            body, history = parse(ANTHROPIC, raw)
            key = self.steps.key(request, ANTHROPIC, body)
        except BadRequest as exc:
            return self._answer(ANTHROPIC.name, 400, str(exc))
        messages = await anyio.to_thread.run_sync(self.compaction.view_for_count, ANTHROPIC, body, key, history)
        plan = await anyio.to_thread.run_sync(
            functools.partial(
                self.thinking.plan, ANTHROPIC, key, body, history, messages, raw, ANTHROPIC.body, count=True
            )
        )
        return await self._forward(
            request, ANTHROPIC, plan.first.content, started, None, {MODE_HEADER: mode(None)}, plan
        )

    async def passthrough(self, request: Request) -> Response:
        started = time.perf_counter()
        api = route_of(request).api or Upstream.OPENAI
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        headers = self.modes.passthrough(api, "endpoint", f"{request.method} {request.url.path}")
        return await self._forward(request, _PROVIDERS[api], await request.body(), started, None, headers)

    async def gemini(self, request: Request) -> Response:
        """``models/{model}:{method}`` (model and method read from the path, which the route matched):
        generateContent and streamGenerateContent compacted, countTokens with the compacted view."""
        target = model_method(request.url.path)
        if target is not None and target[1] == "countTokens":
            return await self._gemini_count(request)
        return await self._generate(request, GEMINI)

    async def _gemini_count(self, request: Request) -> Response:
        """countTokens of the conversation's compacted view: its ``contents``, or the ``contents`` of its
        ``generateContentRequest``."""
        started = time.perf_counter()
        refused = self._refused(request, GEMINI.name)
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            outer = parse_json(raw)
            inner = outer.get("generateContentRequest") if isinstance(outer, dict) else None
            body = inner if isinstance(inner, dict) and "contents" in inner else outer
            history = GEMINI.history(body)
            key = self.steps.key(request, GEMINI, body)
        except BadRequest as exc:
            return self._answer(GEMINI.name, 400, str(exc))
        messages = await anyio.to_thread.run_sync(self.compaction.view_for_count, GEMINI, body, key, history)
        if unchanged(history, messages):
            content = raw
        elif body is outer:
            content = GEMINI.body(body, messages)
        else:
            content = dumps({**outer, "generateContentRequest": orjson.loads(GEMINI.body(body, messages))})
        return await self._forward(request, GEMINI, content, started, None, {MODE_HEADER: mode(None)})

    async def unknown_route(self, request: Request) -> Response:
        """A path of no known API: refused, so it (and its credentials) reach no upstream."""
        headers = self.modes.passthrough("none", "unknown_route", f"{request.method} {request.url.path}")
        message = (
            f"microcompact: no route for {request.method} {request.url.path}; this proxy serves OpenAI "
            "(/v1/chat/completions, /v1/responses, ...), Anthropic (/v1/messages, ...) and Gemini "
            "(/v1beta/models/{model}:generateContent, ...) routes"
        )
        self.metrics.request("none", 404)
        return error_response(None, 404, message, headers)

    # ------------------------------------------------------------------ the compacted path

    async def _generate(self, request: Request, provider: Provider) -> Response:
        with self.collector.preparing():  # no full collection of the follow-ups' until it is forwarded
            return await self._compacted(request, provider)

    async def _compacted(self, request: Request, provider: Provider) -> Response:
        started = time.perf_counter()
        refused = self._refused(request, provider.name)
        if refused is not None:
            return refused
        raw = await request.body()
        try:
            step = await anyio.to_thread.run_sync(self.steps.step, request, provider, raw)
        except BadRequest as exc:
            return self._answer(provider.name, 400, str(exc))
        if isinstance(step, Aside):
            headers = {**step.headers, **self.modes.passthrough(provider.name, step.reason, step.hint)}
            return await self._forward(request, provider, raw, started, None, headers)
        prepared, plan = step
        if plan is None:  # serve --audit: the client's bytes go up; the headers say what rewriting would do
            headers = self.compaction.audit.headers(provider.name, prepared, self.compaction.bills)
            return await self._forward(request, provider, raw, started, prepared, headers)
        content = plan.first.content
        headers = self.modes.report(prepared)
        headers.update(self.modes.of_compacted_route(provider.name, prepared, self.router.config.compression.enabled))
        ratio = full_ratio(len(raw), len(content))
        return await self._forward(request, provider, content, started, prepared, headers, plan, ratio)

    # ------------------------------------------------------------------ forwarding

    async def _forward(
        self,
        request: Request,
        provider: Provider,
        content: bytes,
        started: float,
        prepared: Prepared | None,
        headers: dict[str, str],
        plan: ThinkingPlan | None = None,
        full_ratio: float = 1.0,
    ) -> Response:
        """``full_ratio``: the client's request over the forwarded one, in bytes (what the bill scales the
        reported prompt by for the uncompacted counterfactual)."""
        route = route_of(request)
        url = upstream_url(self.settings, route, request.url.query)
        sent = self.hops.forwarded(request.headers, upstream_headers(request.headers.items(), route.api))
        outgoing = httpx.Request(
            request.method, url, headers=plan.upstream_headers(sent) if plan else sent, content=content
        )
        self.metrics.proxy_overhead(time.perf_counter() - started)
        try:
            answer = await unless_client_leaves(
                request.receive, lambda: self.upstream.send(outgoing, sent, headers, plan)
            )
        except httpx.HTTPError as exc:
            if prepared is not None:
                self._follow_up(prepared, None)
            log.warning("Proxy: upstream %s unreachable (%s)", _origin(url), type(exc).__name__)
            limits = self.settings.limits
            status, message = upstream_failure(
                exc, _origin(url), limits.upstream_connect_timeout, limits.upstream_idle_timeout
            )
            return self._answer(provider.name, status, message, headers)
        if answer is None:  # the client left before the answer began: its upstream request was cancelled
            if prepared is not None:
                self._follow_up(prepared, None)
            self.metrics.request(provider.name, 499)
            return Response(status_code=499)  # written to nobody
        response = answer
        self.metrics.request(provider.name, response.status_code)
        tap = UsageTap(response.headers.get("content-type", ""), provider)

        def done(tap: UsageTap, complete: bool) -> None:
            if prepared is not None:
                ok = response.status_code < 400 and complete and not (plan is not None and plan.fell_back)
                prompt_tokens = tap.finish() if ok else None
                usage = tap.report(time.time()) if prompt_tokens else None
                if ok:  # the prefix of the conversation's next summary request (summarizer: upstream)
                    remember_for_summary(prepared, response.request, self.compaction.bills)
                self._follow_up(prepared, prompt_tokens, usage, full_ratio)
                if prepared.session is not None and prepared.audit is None:  # held back: they go out with these
                    headers.update(self.compaction.bills.headers(prepared.session.session_id, Through.THIS))
            if self.request_lines is not None:  # this request's own figures, streamed or not
                self.request_lines(request_line(response.status_code, request.method, request.url.path, headers))

        hold = (
            prepared is not None and prepared.session is not None and prepared.audit is None and not prepared.streamed
        )
        return Passthrough(response, tap, headers, done, hold=hold)

    def _follow_up(
        self, prepared: Prepared, prompt_tokens: int | None, usage: UsageReport | None = None, full_ratio: float = 1.0
    ) -> None:
        """Queue the request's after-work at once, and run it on a worker thread, not awaited."""
        self.compaction.answered(prepared, prompt_tokens, usage, full_ratio)
        task = asyncio.get_running_loop().create_task(anyio.to_thread.run_sync(self._after, prepared.key))
        self._follow_ups.add(task)
        task.add_done_callback(self._follow_ups.discard)

    def _after(self, key: str) -> None:
        """A request's follow-up, then a full garbage collection if one is due and none is being prepared."""
        self.compaction.follow_up(key)
        self.collector.between_requests()

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
        """The proxy's own error answer; without a mode of its own it says passthrough, and why: the
        request went nowhere (a bad request, a missing proxy key, a failure of the proxy)."""
        self.metrics.request(api, status)
        if headers is None or MODE_HEADER not in headers:
            reason = {400: "invalid_request", 401: "proxy_key", 508: "loop"}.get(status, "proxy_error")
            self.metrics.mode(api, "passthrough", reason)
            headers = {**(headers or {}), MODE_HEADER: mode(reason)}
        return error_response(api, status, message, headers)

    @property
    def follow_ups_running(self) -> int:
        """Answered requests whose after-work has not finished yet."""
        return len(self._follow_ups)


FORMATS: dict[WireApi, Provider] = {p.wire: p for p in (OPENAI, RESPONSES_API, ANTHROPIC, GEMINI)}
_PROVIDERS: dict[Upstream, Provider] = {p.name: p for p in (OPENAI, ANTHROPIC, GEMINI)}  # forwards, by upstream


def _origin(url: str) -> str:
    parts = httpx.URL(url)
    return f"{parts.scheme}://{parts.host}" + (f":{parts.port}" if parts.port else "")


def create_app(router: SessionRouter, settings: ProxySettings | None = None) -> Starlette:
    return Proxy(router, settings or ProxySettings()).app()


__all__ = ["Proxy", "ProxySettings", "create_app"]
