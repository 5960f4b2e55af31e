"""A stream is billed at its final event, before the client reads it (issue 28): a client that sends its next
request the moment it reads the stop event finds the stream in that request's totals, and ``/metrics``
counts it, though the upstream still holds the stream open."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.proxy_server import ProxyServer

PROMPT_TOKENS = 1_200


def _anthropic_events() -> list[bytes]:
    usage = {"input_tokens": PROMPT_TOKENS, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    message = {"id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": []}
    text_block = {"type": "text", "text": ""}
    delta = {"type": "text_delta", "text": "ok"}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "usage": {**usage, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": text_block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


def _chat_events() -> list[bytes]:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o"}
    pieces = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 2}},
    ]
    return [f"data: {json.dumps(p)}\n\n".encode() for p in pieces] + [b"data: [DONE]\n\n"]


class HoldingUpstream:
    """Streams its answer's events, then holds the connection open (the body unfinished) until released:
    what a slow upstream's last bytes, or a slow network, look like after the stop event."""

    def __init__(self) -> None:
        self.release = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                events = _anthropic_events() if self.path.endswith("/messages") else _chat_events()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for event in events:
                    self.wfile.write(event)
                    self.wfile.flush()
                upstream.release.wait(30)  # the body ends when the connection closes

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HoldingUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def holding() -> Iterator[HoldingUpstream]:
    with HoldingUpstream() as upstream:
        yield upstream


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


@pytest.mark.parametrize(("path", "stop"), [("/v1/messages", "message_stop"), ("/v1/chat/completions", "[DONE]")])
def test_the_next_request_counts_a_stream_whose_stop_event_was_read(
    holding: HoldingUpstream, tmp_path: Path, path: str, stop: str
) -> None:
    body: dict[str, Any] = {"model": "claude-sonnet-4-5" if "messages" in path else "gpt-4o", "stream": True}
    body["messages"] = [{"role": "user", "content": "hello " * 400}]
    if "chat" in path:
        body["stream_options"] = {"include_usage": True}
    else:
        body["max_tokens"] = 64
    headers = {"authorization": "Bearer sk-stop", "x-api-key": "sk-ant-stop", "anthropic-version": "2023-06-01"}
    with (
        ProxyServer(holding.base_url, tmp_path / "s.db") as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=30, headers=headers) as client,
        client.stream("POST", path, json=body) as first,
    ):
        assert first.headers["x-microcompact-totals-through"] == "previous-request"
        assert first.headers["x-microcompact-requests"] == "0"
        seen = ""
        for text in first.iter_text():
            seen += text
            if stop in seen:
                break
        # The upstream still holds the stream open: it was billed when its stop event went by.
        metrics = client.get("/metrics").text
        assert _metric(metrics, "microcompact_answered_requests_total") == 1
        assert _metric(metrics, 'microcompact_cost_dollars_total{kind="spent"}') > 0
        with client.stream("POST", path, json=body) as second:
            assert second.headers["x-microcompact-totals-through"] == "previous-request"
            assert second.headers["x-microcompact-requests"] == "1"
            assert float(second.headers["x-microcompact-cost"]) > 0
            holding.release.set()
            second.read()
