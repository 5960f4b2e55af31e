"""The scripted upstream: a real HTTP server on 127.0.0.1 speaking the OpenAI and Anthropic APIs.

It runs uvicorn (the stack the proxy runs on) in a background thread on a random port. Every request is
recorded with its headers, raw and parsed body, and the exact bytes answered. What to answer comes from a
queue of answers (``enqueue``) and, when the queue is empty, from ``script(request)``. Latency before the
headers and between SSE events can be changed at any time; faults (errors, garbage, a cut stream, a hang)
are answers like any other.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from . import anthropic_wire, openai_wire, validate
from .body import ScriptedBody
from .recorded import RecordedRequest, Script
from .replies import Answer, Fault, Reply, text
from .serving import ThreadServer, tcp_listener
from .usage import DEFAULT_OVERHEAD, PrefixCache, PromptCache, PromptUsage, output_tokens, prompt_tokens


def default_script(request: RecordedRequest) -> Reply:
    return text(f"Scripted reply to request {request.number}.")


def _json_chunks(payload: Any) -> list[bytes]:
    return [json.dumps(payload, separators=(",", ":")).encode()]


def _api_of(path: str, headers: dict[str, str]) -> str:
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return "anthropic"
    if path.startswith("/v1/chat/completions") or path.startswith("/v1/"):
        return "openai"
    return "other"


class ScriptedUpstream:
    """OpenAI ``/v1/chat/completions`` and Anthropic ``/v1/messages`` (+ count_tokens, models) on 127.0.0.1.

    ``base_url`` is what the Anthropic SDK and Claude Code take; ``openai_base_url`` (``.../v1``) what the
    OpenAI SDK takes. Prompt usage is ``usage.prompt_tokens(body, overhead)``; with ``prompt_cache`` the
    Anthropic side splits it into cache reads and writes at the request's breakpoints. With ``validate``,
    requests the real API would reject (broken tool pairs, more than 4 breakpoints) get its 400. With
    ``gzip_json``, JSON bodies go out gzip-compressed to clients that accept it, as the real APIs' edges do.
    ``cache_ttl`` and ``min_cacheable`` add the cache's expiry and minimum cacheable length; ``openai_cache``
    reports OpenAI's automatic prefix caching (``cached_tokens``); with ``context_window`` a prompt over it
    gets the API's 400 ("prompt is too long: N tokens > M maximum").
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        port: int = 0,
        latency: float = 0.0,
        event_delay: float = 0.0,
        overhead: int = DEFAULT_OVERHEAD,
        prompt_cache: bool = True,
        validate: bool = True,
        gzip_json: bool = False,
        keep: int | None = None,
        model: str = "scripted-model",
        cache_ttl: float | None = None,
        min_cacheable: int = 0,
        openai_cache: bool = False,
        context_window: int | None = None,
    ) -> None:
        self.script: Script = script or default_script
        self.latency = latency
        self.event_delay = event_delay
        self.overhead = overhead
        self.validate = validate
        self.gzip_json = gzip_json
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.keep = keep  # keep only the newest ``keep`` records (benchmarks send thousands of large bodies)
        self._received = 0
        self._cache = PromptCache(cache_ttl, min_cacheable) if prompt_cache else None
        self._openai_cache = PrefixCache(cache_ttl) if openai_cache else None
        self.context_window = context_window  # prompts over it are refused, as the real APIs refuse them
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._socket = tcp_listener(port)
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = ThreadServer(config)
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ScriptedUpstream:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="scripted-upstream", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the scripted upstream did not start")
            time.sleep(0.005)
        return self

    def close(self) -> None:
        self._server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._socket.close()

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    # ------------------------------------------------------------------ scripting and inspection

    def enqueue(self, *answers: Answer) -> None:
        """Answers for the next generation requests, used before ``script``."""
        with self._lock:
            self._answers.extend(answers)

    def generation_requests(self) -> list[RecordedRequest]:
        """The /v1/messages and /v1/chat/completions requests, in order."""
        with self._lock:
            return [r for r in self.requests if r.path in ("/v1/messages", "/v1/chat/completions")]

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """What this upstream reports as ``body``'s prompt size."""
        return prompt_tokens(body, self.overhead)

    # ------------------------------------------------------------------ HTTP

    def _app(self) -> Starlette:
        routes = [
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/{path:path}", self._unknown, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
        ]
        return Starlette(routes=routes)

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self._received += 1
            record = RecordedRequest(
                number=self._received,
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers=headers,
                raw=raw,
                body=body,
                api=_api_of(request.url.path, headers),
            )
            self.requests.append(record)
            if self.keep is not None and len(self.requests) > self.keep:
                del self.requests[: len(self.requests) - self.keep]
        return record

    def _next_answer(self, record: RecordedRequest) -> Answer:
        with self._lock:
            if self._answers:
                return self._answers.popleft()
        return self.script(record)

    def _error(self, record: RecordedRequest, status: int, message: str, error_type: str | None = None) -> ScriptedBody:
        if record.api == "anthropic":
            payload = anthropic_wire.error_body(status, message, error_type)
        else:
            payload = openai_wire.error_body(status, message, error_type)
        return self._body(record, status, self._headers(record, "application/json"), _json_chunks(payload))

    def _body(
        self,
        record: RecordedRequest,
        status: int,
        headers: dict[str, str],
        chunks: list[bytes],
        cut_after: int | None = None,
    ) -> ScriptedBody:
        return ScriptedBody(
            record, status, headers, chunks, cut_after=cut_after, event_delay=self.event_delay, gzip_json=self.gzip_json
        )

    def _headers(self, record: RecordedRequest, content_type: str) -> dict[str, str]:
        headers = {"content-type": content_type}
        if record.api == "anthropic":
            headers["request-id"] = f"req_{record.number:024d}"
        else:
            headers["x-request-id"] = f"req_{record.number:032d}"
        if content_type.startswith("text/event-stream"):
            headers["cache-control"] = "no-cache"
        return headers

    async def _generate(
        self, request: Request, render: Callable[[RecordedRequest, Reply], list[bytes]]
    ) -> ScriptedBody:
        record = await self._record(request)
        if not isinstance(record.body, dict):
            return self._error(record, 400, "The request body is not valid JSON.", "invalid_request_error")
        problem = None
        if self.validate:
            check = validate.anthropic_problem if record.api == "anthropic" else validate.openai_problem
            problem = check(record.body)
        if not problem:
            problem = self._too_long(record)
        if problem:
            return self._error(record, 400, problem, "invalid_request_error")
        answer = self._next_answer(record)
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(answer, Reply):
            return self._reply(record, answer, render)
        return await self._fault(record, answer, render)

    def _too_long(self, record: RecordedRequest) -> str | None:
        """The API's refusal of a prompt over the window (its wording: Claude Code compacts when it reads it)."""
        if self.context_window is None or not isinstance(record.body, dict):
            return None
        tokens = prompt_tokens(record.body, self.overhead)
        if tokens <= self.context_window:
            return None
        record.refused_tokens = tokens
        if record.api == "anthropic":
            return f"prompt is too long: {tokens} tokens > {self.context_window} maximum"
        return (
            f"This model's maximum context length is {self.context_window} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages."
        )

    def _reply(
        self,
        record: RecordedRequest,
        reply: Reply,
        render: Callable[[RecordedRequest, Reply], list[bytes]],
        cut_after: int | None = None,
    ) -> ScriptedBody:
        chunks = render(record, reply)
        content_type = "text/event-stream; charset=utf-8" if record.stream else "application/json"
        return self._body(record, 200, self._headers(record, content_type), chunks, cut_after)

    async def _fault(
        self, record: RecordedRequest, fault: Fault, render: Callable[[RecordedRequest, Reply], list[bytes]]
    ) -> ScriptedBody:
        if fault.hang:
            await self._sleep_unless_closing(fault.hang)
        if fault.status is not None:
            response = self._error(record, fault.status, fault.message, fault.error_type)
            if fault.retry_after is not None:
                response.headers["retry-after"] = f"{fault.retry_after:g}"
            response.headers.update(fault.headers)
            return response
        if fault.garbage is not None:
            return self._body(record, 200, self._headers(record, "application/json"), [fault.garbage])
        if fault.cut_after_events is not None:
            reply = fault.reply or self._script_reply(record)
            return self._reply(record, reply, render, cut_after=fault.cut_after_events)
        return self._reply(record, fault.reply or self._script_reply(record), render)

    async def _sleep_unless_closing(self, seconds: float) -> None:
        """Sleep, waking early when the server stops, so a hanging answer never delays ``close``."""
        deadline = time.monotonic() + seconds
        while not self._server.should_exit and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, deadline - time.monotonic()))

    def _script_reply(self, record: RecordedRequest) -> Reply:
        answer = self.script(record)
        return answer if isinstance(answer, Reply) else default_script(record)

    # ------------------------------------------------------------------ endpoints

    async def _messages(self, request: Request) -> ScriptedBody:
        return await self._generate(request, self._render_anthropic)

    async def _completions(self, request: Request) -> ScriptedBody:
        return await self._generate(request, self._render_openai)

    def _render_anthropic(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        body = record.body
        if self._cache is not None:
            prompt = self._cache.usage(body, self.overhead)
        else:
            prompt = PromptUsage(prompt_tokens(body, self.overhead), 0, 0)
        model = reply.model or body.get("model") or self.model
        message = anthropic_wire.message(reply, model, record.number, prompt, output_tokens(reply))
        record.usage = message["usage"]
        if record.stream:
            return anthropic_wire.stream_events(reply, message)
        return _json_chunks(message)

    def _render_openai(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        body = record.body
        usage = openai_wire.usage_json(prompt_tokens(body, self.overhead), output_tokens(reply))
        if self._openai_cache is not None:
            usage["prompt_tokens_details"]["cached_tokens"] = self._openai_cache.cached_tokens(body, self.overhead)
        model = reply.model or body.get("model") or self.model
        full = openai_wire.completion(reply, model, record.number, usage)
        record.usage = usage
        if record.stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return openai_wire.stream_chunks(reply, full, include_usage)
        return _json_chunks(full)

    async def _count_tokens(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        if not isinstance(record.body, dict):
            return self._error(record, 400, "The request body is not valid JSON.", "invalid_request_error")
        payload = {"input_tokens": prompt_tokens(record.body, self.overhead)}
        return self._body(record, 200, self._headers(record, "application/json"), _json_chunks(payload))

    async def _models(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        if record.api == "anthropic":
            model = {
                "type": "model",
                "id": self.model,
                "display_name": self.model,
                "created_at": "2026-01-01T00:00:00Z",
            }
            payload: Any = {"data": [model], "has_more": False, "first_id": self.model, "last_id": self.model}
        else:
            payload = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "tests"}],
            }
        return self._body(record, 200, self._headers(record, "application/json"), _json_chunks(payload))

    async def _unknown(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        return self._error(record, 404, f"Not found: {request.method} {request.url.path}", "not_found_error")
