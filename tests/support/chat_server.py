"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests, with scriptable faults.

The summarizer under test talks to it through the official SDK over HTTP, so what is tested is what
production does. Faults are queued (``add_faults``) and each one is consumed by the next completion
request; ``responder`` and ``latency`` can be changed at any time.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

# 401/429/500: that status with an OpenAI-style error body; "quota": a 429 saying insufficient_quota;
# "malformed": a 200 whose body is not JSON; "hang": no answer before the client gives up;
# "empty": empty content; "echo": the last user message's text as content.
Fault = Literal[401, 429, 500, "quota", "malformed", "hang", "empty", "echo"]
# A responder returns the reply's text, or a whole assistant message (e.g. with ``tool_calls``).
Responder = Callable[[dict[str, Any]], str | dict[str, Any]]

_ERRORS: dict[Any, tuple[int, dict[str, Any]]] = {
    401: (401, {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}),
    429: (429, {"message": "Rate limit reached for requests.", "type": "requests", "code": "rate_limit_exceeded"}),
    500: (
        500,
        {"message": "The server had an error while processing your request.", "type": "server_error", "code": None},
    ),
    "quota": (
        429,
        {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"},
    ),
}


def default_responder(request: dict[str, Any]) -> str:
    """A short deterministic summary that says how much it was asked to read, in the notes template."""
    chars = sum(len(str(m.get("content") or "")) for m in request.get("messages", []))
    return notes(f"Test summary of a {chars}-character request.")


def notes(work: str, goal: str = "none", findings: str = "none", upcoming: str = "none") -> str:
    """An answer in the HTTP summarizer's fill-in template (``templates/prose_template.md``)."""
    return f"### Goal\n{goal}\n### Work done\n{work}\n### Findings\n{findings}\n### Next\n{upcoming}"


def last_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


class RecordingServer:
    """A scripted HTTP server on 127.0.0.1 in a thread: records every request body and hands out queued
    faults, one per request. Subclasses give the handler class and the base URL's path."""

    path = ""
    thread_name = "recording-server"

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], responder: Any, latency: float, hang_seconds: float
    ) -> None:
        self.responder = responder
        self.latency = latency
        self.hang_seconds = hang_seconds
        self.requests: list[dict[str, Any]] = []
        self._faults: deque[Any] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self._httpd.app = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.path}"

    def add_faults(self, *faults: Any) -> None:
        with self._lock:
            self._faults.extend(faults)

    def close(self) -> None:
        """Stop serving; wakes hanging handlers so nothing outlives the test."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.requests.append(body)
            return self._faults.popleft() if self._faults else None

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the server is closing."""
        return not self._closing.wait(seconds) if seconds > 0 else not self._closing.is_set()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    app: Any


class ChatServer(RecordingServer):
    """Serves ``POST /v1/chat/completions`` and ``GET /v1/models``; records every request body."""

    path = "/v1"
    thread_name = "chat-server"

    def __init__(
        self,
        responder: Responder | None = None,
        latency: float = 0.0,
        hang_seconds: float = 5.0,
        model: str = "test-model",
    ) -> None:
        self.model = model
        super().__init__(_Handler, responder or default_responder, latency, hang_seconds)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        model = {"id": self.server.app.model, "object": "model", "created": 0, "owned_by": "tests"}
        self._json(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        chat = self.server.app
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        fault = chat._record(body)
        if not chat._wait(chat.latency):
            return
        if fault == "hang":
            chat._wait(chat.hang_seconds)
            return  # the client has given up; answering now would only hit a closed socket
        if isinstance(fault, tuple):  # (status, message): an error answer saying what the test needs
            status, message = fault
            self._json(status, {"error": {"message": message, "type": "invalid_request_error", "param": None}})
            return
        if fault in _ERRORS:
            status, error = _ERRORS[fault]
            self._json(status, {"error": {"param": None, **error}})
            return
        if fault == "malformed":
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [', "application/json")
            return
        if fault == "empty":
            content = ""
        elif fault == "echo":
            content = last_user_text(body)
        else:
            content = chat.responder(body)
        self._json(200, _completion(body, content, chat.model))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left


def _completion(request: dict[str, Any], reply: str | dict[str, Any], default_model: str) -> dict[str, Any]:
    message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
    content = str(message.get("content") or "")
    prompt_chars = sum(len(str(m.get("content") or "")) for m in request.get("messages", []))
    prompt_tokens, completion_tokens = prompt_chars // 4, len(content) // 4
    return {
        "id": f"chatcmpl-test-{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or default_model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
