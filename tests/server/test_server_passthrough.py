"""``serve`` as a plain proxy: real SDK clients get the upstream's answers byte for byte, headers are
forwarded (credentials included) and the proxy's own are added; other paths pass through."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from upstream import Reply, ScriptedUpstream, Text, Thinking, ToolCall, text

anthropic = lazy("anthropic")
openai = lazy("openai")

USER = [{"role": "user", "content": "Count the files."}]


@pytest.fixture
def proxy(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[ProxyServer]:
    with ProxyServer(upstream.base_url, tmp_path / "sessions.db") as server:
        yield server


def test_openai_plain_reply_is_the_upstreams_bytes(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test-123", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=USER)

    sent = upstream.generation_requests()[-1]
    assert raw.http_response.content == bytes(sent.response)
    assert raw.parse().choices[0].message.content == "Scripted reply to request 1."
    assert sent.headers["authorization"] == "Bearer sk-test-123"
    assert sent.body["messages"] == USER
    assert raw.headers["x-microcompact-session"].startswith("openai-")
    assert not any(name.startswith("x-microcompact") for name in sent.headers)


def test_openai_stream_is_passed_through_byte_for_byte(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    body = {"model": "gpt-test", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    with local_http.stream("POST", f"{proxy.base_url}/v1/chat/completions", json=body, timeout=10) as response:
        received = b"".join(response.iter_raw())
        assert response.headers["content-type"].startswith("text/event-stream")
    assert received == bytes(upstream.generation_requests()[-1].response)
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test", max_retries=0)
    chunks = list(client.chat.completions.create(model="gpt-test", messages=USER, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Scripted reply to request 2."


def test_anthropic_plain_and_stream_keep_thinking_signatures(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    reply = Reply((Thinking("Plan.", "sig-abc=="), Text("Listing."), ToolCall("Bash", {"command": "ls"})))
    upstream.enqueue(reply, reply)
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-ant-test", max_retries=0)
    raw = client.messages.with_raw_response.create(model="claude-test", max_tokens=100, messages=USER)
    assert raw.http_response.content == bytes(upstream.generation_requests()[-1].response)
    message = raw.parse()
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].signature == "sig-abc=="

    with client.messages.stream(model="claude-test", max_tokens=100, messages=USER) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature == "sig-abc=="
    sent = upstream.generation_requests()[-1]
    assert sent.headers["anthropic-version"] and sent.body["messages"] == USER


def test_other_paths_pass_through(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    models = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test", max_retries=0).models.list()
    assert [m.id for m in models.data] == ["scripted-model"]
    anthropic_models = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0).models.list()
    assert [m.id for m in anthropic_models.data] == ["scripted-model"]
    before = len(upstream.requests)
    missing = local_http.get(f"{proxy.base_url}/v1/nowhere", timeout=5)
    # issue 19: a path of no known API is refused by the proxy itself (it used to go to OpenAI's upstream)
    assert missing.status_code == 404 and "no route for GET /v1/nowhere" in missing.json()["error"]["message"]
    assert len(upstream.requests) == before, "an unknown path reaches no upstream"


def test_healthz_and_metrics(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(text("one"))
    openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0).chat.completions.create(
        model="m", messages=USER
    )
    assert local_http.get(f"{proxy.base_url}/healthz").text == "ok\n"
    page = local_http.get(f"{proxy.base_url}/metrics").text
    assert 'microcompact_requests_total{api="openai",status="200"} 1' in page
    assert "microcompact_proxy_overhead_seconds_count 1" in page
    assert "# TYPE microcompact_occupancy_percent histogram" in page


def test_upstream_bodies_come_uncompressed_so_usage_can_be_read(tmp_path: Path) -> None:
    with ScriptedUpstream(gzip_json=True) as upstream, ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        body = {"model": "c", "max_tokens": 5, "messages": USER}
        headers = {"anthropic-version": "2023-06-01", "x-api-key": "k", "accept-encoding": "gzip, br"}
        response = local_http.post(f"{proxy.base_url}/v1/messages", json=body, headers=headers)
        assert response.status_code == 200 and "content-encoding" not in response.headers
        assert upstream.requests[-1].headers["accept-encoding"] == "identity"
        proxy.settle()
        [session] = proxy.router.sessions()
        assert session.counter.overhead != 0, "the JSON body's usage calibrated the session"


def test_every_answer_carries_each_header_once(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    """The upstream writes Date and Server and so does the proxy's HTTP server: a client reads one of each
    (issue 28), on a compacted route, a stream, a passthrough and the proxy's own answers."""
    chat = {"model": "m", "messages": USER}
    answers = [
        local_http.post(f"{proxy.base_url}/v1/chat/completions", json=chat, timeout=10),
        local_http.post(f"{proxy.base_url}/v1/chat/completions", json={**chat, "stream": True}, timeout=10),
        local_http.get(f"{proxy.base_url}/v1/models", headers={"authorization": "Bearer k"}, timeout=10),
        local_http.get(f"{proxy.base_url}/healthz", timeout=10),
        local_http.get(f"{proxy.base_url}/v1/nowhere", timeout=10),
    ]
    for answer in answers:
        names = [name.lower() for name, _ in answer.headers.multi_items()]
        assert answer.status_code in (200, 404), answer.text
        assert {"date", "server"} <= set(names), names
        repeated = sorted({name for name in names if names.count(name) > 1})
        assert repeated == [], f"{answer.request.url.path}: {repeated} more than once"
