"""A real Anthropic Messages API server on 127.0.0.1 for tests (``POST /v1/messages``), with scriptable faults.

The summarizer under test talks to it through the official ``anthropic`` SDK (sync or async) over HTTP.
Faults are queued (``add_faults``); each is consumed by the next request. ``latency`` delays every answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from support.chat_server import RecordingServer, _HTTPServer

# 401/429/500/529: that status with an Anthropic-style error body; "credit": the 400 a prepaid account
# out of credit gets; "max_tokens": output stopped at the token limit; "thinking_only": a thinking block and
# no text; "hang": no answer before the client gives up.
Fault = Literal[401, 429, 500, 529, "credit", "max_tokens", "thinking_only", "hang"]
Responder = Callable[[dict[str, Any]], str]

_ERRORS: dict[Any, tuple[int, str, str]] = {
    401: (401, "authentication_error", "invalid x-api-key"),
    429: (429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: (500, "api_error", "Internal server error"),
    529: (529, "overloaded_error", "Overloaded"),
    "credit": (400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
}


def default_responder(request: dict[str, Any]) -> str:
    chars = len(str(request.get("system") or "")) + sum(len(str(m.get("content"))) for m in request["messages"])
    return f"### Summary\n- Anthropic test summary of a {chars}-character request."


class AnthropicServer(RecordingServer):
    """Serves ``POST /v1/messages``; records every request body."""

    thread_name = "anthropic-server"

    def __init__(self, responder: Responder | None = None, latency: float = 0.0, hang_seconds: float = 5.0) -> None:
        super().__init__(_Handler, responder or default_responder, latency, hang_seconds)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        api = self.server.app
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.rstrip("/") != "/v1/messages":
            self._error(404, "not_found_error", f"no route {self.path}")
            return
        fault = api._record(body)
        if not api._wait(api.latency):
            return
        if fault == "hang":
            api._wait(api.hang_seconds)
            return
        if fault in _ERRORS:
            self._error(*_ERRORS[fault])
            return
        content: list[dict[str, Any]] = []
        stop = "end_turn"
        if fault == "thinking_only":
            content = [{"type": "thinking", "thinking": "Let me think.", "signature": "sig"}]
        else:
            text = api.responder(body)
            if fault == "max_tokens":
                text, stop = text[: len(text) // 2], "max_tokens"
            content = [
                {"type": "thinking", "thinking": "Planning.", "signature": "sig"},
                {"type": "text", "text": text},
            ]
        self._json(
            200,
            {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 10},
            },
        )

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
