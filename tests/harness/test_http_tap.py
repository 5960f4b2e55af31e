"""The recording relay the Claude Code end-to-end test stands on: what it reports is exactly what crossed the
wire (JSON, chunked SSE, HEAD, keep-alive, several connections), and it follows its target to a new port."""

from __future__ import annotations

import httpx

from support import local_http
from support.http_tap import TapRelay
from upstream import ScriptedUpstream, Text, Thinking, text
from upstream.replies import Reply

HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "k"}


def body(prompt: str, *, stream: bool = False) -> dict[str, object]:
    return {"model": "m", "max_tokens": 10, "stream": stream, "messages": [{"role": "user", "content": prompt}]}


def test_exchanges_are_the_bytes_both_ways_in_order() -> None:
    with ScriptedUpstream() as upstream, TapRelay(upstream.port) as tap, httpx.Client(base_url=tap.base_url) as client:
        upstream.enqueue(text("plain"), Reply((Thinking("hm", "sig-1"), Text("streamed"))))
        plain = client.post("/v1/messages", json=body("one"), headers=HEADERS)
        with client.stream("POST", "/v1/messages?beta=true", json=body("two", stream=True), headers=HEADERS) as r:
            streamed = r.read()
        head = client.head("/api/hello")
        with httpx.Client(base_url=tap.base_url) as other:  # a second connection
            other.post("/v1/messages", json=body("three"), headers=HEADERS)
        exchanges = tap.exchanges()

    assert [(e.method, e.target) for e in exchanges] == [
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages?beta=true"),
        ("HEAD", "/api/hello"),
        ("POST", "/v1/messages"),
    ]
    assert [e.request_body for e in exchanges] == [r.raw for r in upstream.requests]
    posts = [0, 1, 3]  # a HEAD answer has no body on the wire, whatever the server meant to send
    assert [exchanges[i].response_body for i in posts] == [bytes(upstream.requests[i].response) for i in posts]
    assert exchanges[0].response_body == plain.content and exchanges[1].response_body == streamed
    assert exchanges[1].response_headers["transfer-encoding"] == "chunked" and b"sig-1" in streamed
    assert exchanges[2].status == head.status_code == 404 and exchanges[2].response_body == b""
    assert all(e.complete for e in exchanges)


def test_compressed_bodies_are_kept_as_sent() -> None:
    with ScriptedUpstream(gzip_json=True) as upstream, TapRelay(upstream.port) as tap:
        response = local_http.post(f"{tap.base_url}/v1/messages", json=body("zip"), headers=HEADERS)
        [exchange] = tap.exchanges()
    assert exchange.response_headers["content-encoding"] == "gzip"
    assert exchange.response_body == bytes(upstream.requests[0].response) != response.content


def test_the_target_can_move() -> None:
    with ScriptedUpstream() as first, ScriptedUpstream() as second, TapRelay(first.port) as tap:
        local_http.post(f"{tap.base_url}/v1/messages", json=body("a"), headers=HEADERS)
        tap.target_port = second.port
        local_http.post(f"{tap.base_url}/v1/messages", json=body("b"), headers=HEADERS)
        assert [len(first.requests), len(second.requests)] == [1, 1]
        assert [e.request_body for e in tap.exchanges()] == [first.requests[0].raw, second.requests[0].raw]
