"""A scripted Gemini API upstream on 127.0.0.1, behaving as Google documents it, for tests of the proxy.

``POST /v1beta/models/{model}:generateContent`` (or ``/v1/...``) answers one GenerateContentResponse;
``:streamGenerateContent`` streams its chunks as SSE (``data: {...}`` events) with ``alt=sse``, else as one
JSON array; ``:countTokens`` answers ``{"totalTokens": N}``. Every chunk carries ``usageMetadata``
(``promptTokenCount``, which includes ``cachedContentTokenCount``: the prefix it saw in the previous request).

It refuses, with Google's 400 ``INVALID_ARGUMENT`` error shape, what Gemini refuses: a missing or wrong key
(``x-goog-api-key`` or ``?key=``), a prompt over its window, contents that are not user/model Content
objects, a function response turn that does not answer the call turn right before it part for part, a call
turn not after a user or response turn, and (as Gemini 3 models do) a functionCall part of the current turn
(since the last user content with text) that lacks the first call's ``thoughtSignature`` of its content, or
carries a signature it never issued (Google's placeholder ``skip_thought_signature_validator`` aside).

The model is a script: ``script(step, body)`` gives the reply's parts for the ``step``-th generate request
(counted here: a compacting proxy shortens the history, so counting results in the request never ends), or
a :class:`Finish` (parts that end for another reason than ``STOP``: ``SAFETY`` answers no content, as
Gemini's blocked candidates do) or a :class:`Fault` (an HTTP error in Google's shape, or a body that is
not JSON).

Implicit caching as Google documents it: what a request shares, from its start, with a recent one (the
last ``RECENT_PROMPTS``) is reported read (``cachedContentTokenCount``, part of ``promptTokenCount``); the
prompt is compared in the order the model reads it: ``systemInstruction``, ``tools``, then ``contents``.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from microcompact.messages import MARKER_PREFIX


@dataclass(frozen=True)
class Finish:
    """A scripted answer that stops with ``reason`` (``SAFETY``, ``RECITATION``, ``MAX_TOKENS``, ...)."""

    parts: list[dict[str, Any]]
    reason: str


@dataclass(frozen=True)
class Fault:
    """A scripted failure: ``status`` with Google's error body, or (``garbage``) a 200 that is not JSON."""

    status: int = 500
    garbage: bytes = b""


Script = Callable[[int, dict[str, Any]], "list[dict[str, Any]] | Finish | Fault"]
PLACEHOLDER_SIGNATURE = "skip_thought_signature_validator"
BYTES_PER_TOKEN = 4
RECENT_PROMPTS = 8  # prompts the implicit cache holds (requests close in time share it)


def prompt_tokens(body: dict[str, Any]) -> int:
    """This upstream's own count of a request's prompt: its contents, system instruction and tools."""
    prompt = [body.get("contents"), body.get("systemInstruction"), body.get("tools")]
    return len(json.dumps(prompt, ensure_ascii=False)) // BYTES_PER_TOKEN


def final_text(step: int) -> str:
    return f"All {step - 1} steps are done."


def numbered_steps(steps: int, tool: str = "run_step", lines: int = 600) -> Script:
    """A tool loop: ``steps`` calls of ``tool`` (args ``{"step": n, "lines": lines}``), then a final text."""

    def script(step: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        if step > steps:
            return [{"text": final_text(step)}]
        return [
            {"text": f"Step {step} of {steps}."},
            {"functionCall": {"name": tool, "args": {"step": step, "lines": lines}}},
        ]

    return script


@dataclass
class Exchange:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0
    response: Any = None
    prompt_tokens: int = 0
    sent: bytes = b""  # the response body as written (de-chunked): what a byte-for-byte proxy passes back


@dataclass
class GeminiUpstream:
    script: Script = field(default_factory=lambda: numbered_steps(3))
    window: int = 1_000_000
    overhead: int = 0  # tokens added to every reported prompt (a client's own compaction trigger reads them)
    api_key: str = "gemini-test-key"
    exchanges: list[Exchange] = field(default_factory=list)
    signatures: set[str] = field(default_factory=set)
    steps: int = 0
    _server: ThreadingHTTPServer | None = None
    _recent: list[str] = field(default_factory=list)  # the prompts the implicit cache holds, newest last
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> GeminiUpstream:
        upstream = self

        class Handler(_Handler):
            owner = upstream

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # shutdown() waits for the loop to look at its flag: every 0.5 s by default, 0.05 s here
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="gemini-upstream", daemon=True
        ).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GeminiUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generations(self) -> list[Exchange]:
        return [e for e in self.exchanges if "Content" in e.path.rsplit(":", 1)[-1]]

    # ------------------------------------------------------------------ the model

    def answer(self, exchange: Exchange) -> tuple[int, Any]:
        """The status and JSON of one request (a list of chunks for a streamed one)."""
        problem = self._refusal(exchange)
        if problem is not None:
            return 400, {"error": {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}}
        body = exchange.body
        method = exchange.path.rsplit(":", 1)[-1]
        if method == "countTokens":
            inner = body.get("generateContentRequest") or body
            return 200, {"totalTokens": prompt_tokens(inner)}
        with self._lock:
            self.steps += 1
            step = self.steps
            scripted = self.script(step, body)
            cached = self._cached(body)
        if isinstance(scripted, Fault):
            if scripted.garbage:
                return 200, scripted.garbage
            error = {"code": scripted.status, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
            return scripted.status, {"error": error}
        parts, reason = (scripted.parts, scripted.reason) if isinstance(scripted, Finish) else (scripted, "STOP")
        for n, part in enumerate(p for p in parts if "functionCall" in p):
            if n == 0:
                part["thoughtSignature"] = base64.b64encode(f"sig-{step}".encode()).decode()  # bytes in the SDKs
                self.signatures.add(part["thoughtSignature"])
        exchange.prompt_tokens = prompt_tokens(body) + self.overhead
        usage = {
            "promptTokenCount": exchange.prompt_tokens,
            "candidatesTokenCount": len(json.dumps(parts)) // BYTES_PER_TOKEN,
            "totalTokenCount": exchange.prompt_tokens + len(json.dumps(parts)) // BYTES_PER_TOKEN,
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
        chunks: list[dict[str, Any]] = [
            {"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}], "usageMetadata": usage}
            for part in parts
        ] or [{"candidates": [{"index": 0}], "usageMetadata": usage}]
        chunks[-1]["candidates"][0]["finishReason"] = reason
        for chunk in chunks:
            chunk["modelVersion"] = exchange.path.split("/models/", 1)[-1].split(":", 1)[0]
            chunk["responseId"] = f"resp-{step}"
        if method == "generateContent":
            candidate = {**chunks[-1]["candidates"][0], "content": {"role": "model", "parts": parts}}
            if not parts:  # a blocked candidate has no content
                candidate.pop("content")
            return 200, {**chunks[-1], "candidates": [candidate]}
        return 200, chunks

    def _cached(self, body: dict[str, Any]) -> int:
        """Implicit caching: the tokens of the longest prefix this request shares with a recent one."""
        text = json.dumps([body.get(k) for k in ("systemInstruction", "tools", "contents")], ensure_ascii=False)
        shared = max((_common_prefix(text, seen) for seen in self._recent), default=0)
        self._recent = [*self._recent, text][-RECENT_PROMPTS:]
        return shared // BYTES_PER_TOKEN

    def _refusal(self, exchange: Exchange) -> str | None:
        keys = [exchange.headers.get("x-goog-api-key"), *(exchange.query.get("key") or [])]
        if self.api_key not in keys:
            return "API key not valid. Please pass a valid API key."
        body = exchange.body
        if not isinstance(body, dict):
            return "Invalid JSON payload received."
        inner = body.get("generateContentRequest") if exchange.path.endswith(":countTokens") else None
        contents = (inner or body).get("contents")
        problem = contents_problem(contents, self.signatures)
        if problem is not None:
            return problem
        tokens = prompt_tokens(inner or body)
        if tokens > self.window:
            return f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({self.window})."
        return None


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def markers(body: dict[str, Any]) -> list[str]:
    return [
        p["text"]
        for c in body["contents"]
        for p in c["parts"]
        if c.get("role") == "model" and str(p.get("text", "")).startswith(MARKER_PREFIX)
    ]


def pairing_errors(contents: list[dict[str, Any]]) -> list[str]:
    """Every call answered by the next content with one response of the same name per call (in any order:
    responses may carry the calls' ids)."""
    errors = []
    for i, content in enumerate(contents):
        calls = [p["functionCall"]["name"] for p in content["parts"] if "functionCall" in p]
        if content.get("role") == "model" and calls:
            answer = contents[i + 1] if i + 1 < len(contents) else {"parts": []}
            names = [p["functionResponse"]["name"] for p in answer["parts"] if "functionResponse" in p]
            if sorted(names) != sorted(calls):
                errors.append(f"contents.{i}: calls {calls} answered by {names}")
    return errors


def _function_parts(content: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict) and kind in p]


def contents_problem(contents: Any, signatures: set[str]) -> str | None:
    """Why Gemini would refuse ``contents`` (roles, call/response turns, thought signatures), or None."""
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    previous_calls = 0
    previous_role = None
    turn_start = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role", "user") not in ("user", "model"):
            return f"* GenerateContentRequest.contents[{i}]: Please use a valid role: user, model."
        if not isinstance(content.get("parts"), list) or not content["parts"]:
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        calls = _function_parts(content, "functionCall")
        responses = _function_parts(content, "functionResponse")
        role = content.get("role", "user")
        if responses and len(responses) != previous_calls:
            return (
                "Please ensure that the number of function response parts is equal to the number of function "
                "call parts of the function call turn."
            )
        if previous_calls and not responses:
            return "Please ensure that function call turn comes immediately before a function response turn."
        if calls and previous_role == "model":
            return (
                "Please ensure that function call turn comes immediately after a user turn or after a function "
                "response turn."
            )
        if role == "user" and any("text" in p for p in content["parts"]):
            turn_start = i
        previous_calls, previous_role = len(calls), role
    return _signature_problem(contents[turn_start:], signatures)


def _signature_problem(turn: list[dict[str, Any]], signatures: set[str]) -> str | None:
    for content in turn:
        calls = _function_parts(content, "functionCall")
        if not calls:
            continue
        signature = calls[0].get("thoughtSignature")
        if signature is None:
            name = calls[0]["functionCall"].get("name")
            return f"Function call `{name}` is missing a `thought_signature` in functionCall parts."
        if signature != PLACEHOLDER_SIGNATURE and signature not in signatures:
            return "Corrupted thought signature."
    return None


class _Handler(BaseHTTPRequestHandler):
    owner: GeminiUpstream
    protocol_version = "HTTP/1.1"  # chunked streams, kept-alive connections
    # Headers and body go out in separate writes: with Nagle's algorithm on, the body of a response on a
    # kept-alive connection waited for the client's delayed ACK, 40 ms a request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw or b"{}")
        except ValueError:
            body = None
        exchange = Exchange(url.path, parse_qs(url.query), {k.lower(): v for k, v in self.headers.items()}, body)
        self.owner.exchanges.append(exchange)
        version = url.path.lstrip("/").split("/", 1)[0]
        if version not in ("v1", "v1beta", "v1alpha") or "/models/" not in url.path or ":" not in url.path:
            self._json(
                404, {"error": {"code": 404, "message": f"no route {url.path}", "status": "NOT_FOUND"}}, exchange
            )
            return
        status, payload = self.owner.answer(exchange)
        if status == 200 and isinstance(payload, list) and exchange.query.get("alt") == ["sse"]:
            self._sse(payload, exchange)
        else:
            self._json(status, payload, exchange)

    def _json(self, status: int, payload: Any, exchange: Exchange) -> None:
        exchange.status, exchange.response = status, payload
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        exchange.sent = data

    def _sse(self, chunks: list[Any], exchange: Exchange) -> None:
        exchange.status, exchange.response = 200, chunks
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            data = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            exchange.sent += data
        self.wfile.write(b"0\r\n\r\n")
