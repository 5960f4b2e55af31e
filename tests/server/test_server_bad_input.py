"""Bad input through ``serve``: each gets the provider's error shape (from the proxy, or the upstream's own,
verbatim), never a 500 with a traceback; nothing stored is lost and the next request works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from microcompact.server.run import proxy_config
from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from support.server_contract import compacted, contract_errors
from support.session_ids import named
from upstream import ScriptedUpstream, disconnect, error, garbage, text, tool_call

anthropic = lazy("anthropic")
openai = lazy("openai")

ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "k"}


@pytest.fixture
def proxy(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[ProxyServer]:
    with ProxyServer(upstream.base_url, tmp_path / "sessions.db") as server:
        yield server


def post(proxy: ProxyServer, path: str, content: bytes, **headers: str) -> httpx.Response:
    return local_http.post(f"{proxy.base_url}{path}", content=content, headers=headers, timeout=10)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}', "not valid JSON"),
        (b'{"model": "m", "messages": {"role": "user"}}', "messages"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 42}]}', "content"),
        (b'{"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}', "unknown role 'wizard'"),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_malformed_openai_requests_get_openai_shaped_400s(
    upstream: ScriptedUpstream, proxy: ProxyServer, content: bytes, says: str
) -> None:
    response = post(proxy, "/v1/chat/completions", content, **{"content-type": "application/json"})
    assert response.status_code == 400
    assert says in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"model": "c", "max_tokens": 5, "messages": [', "not valid JSON"),
        (b'{"model": "c", "max_tokens": 5, "messages": "hello"}', "messages"),
        (b'{"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]}', "type"),
        (b'{"model": "c", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}', "unknown role 'tool'"),
    ],
)
def test_malformed_anthropic_requests_get_anthropic_shaped_400s(
    upstream: ScriptedUpstream, proxy: ProxyServer, content: bytes, says: str
) -> None:
    response = post(proxy, "/v1/messages", content, **ANTHROPIC_HEADERS)
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert says in body["error"]["message"]
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="c", max_tokens=5, messages=[{"role": "robot", "content": "hi"}])  # type: ignore[misc,list-item]
    assert upstream.requests == []


@pytest.mark.parametrize("status", [500, 429, 529])
def test_upstream_errors_come_back_verbatim(upstream: ScriptedUpstream, proxy: ProxyServer, status: int) -> None:
    upstream.enqueue(error(status, retry_after=3 if status == 429 else None, message="upstream says no"))
    response = post(
        proxy,
        "/v1/messages",
        b'{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}',
        **ANTHROPIC_HEADERS,
    )
    assert response.status_code == status
    assert response.content == bytes(upstream.requests[-1].response)
    if status == 429:
        assert response.headers["retry-after"] == "3"
    upstream.enqueue(text("fine now"))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    assert client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}]).content


def test_upstream_garbage_is_passed_through(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(garbage(b"<html>bad gateway</html>"))
    response = post(proxy, "/v1/chat/completions", b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    assert response.status_code == 200 and response.content == b"<html>bad gateway</html>"


def test_unreachable_upstream_is_a_502_in_the_providers_shape(tmp_path: Path) -> None:
    with ProxyServer("http://127.0.0.1:9", tmp_path / "s.db") as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 502 and "unreachable" in caught.value.message
        client_a = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as caught_a:
            client_a.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert caught_a.value.status_code == 502
        assert caught_a.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_upstream_stream_cut_midway_reaches_the_client_cut(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(disconnect(after_events=2, reply=text("a long answer " * 20)))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    stream = client.messages.stream(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(Exception, match=r"incomplete|closed|peer"), stream as events:  # the SDK's transport error
        events.get_final_message()
    upstream.enqueue(text("whole"))
    assert client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}]).content


def test_client_disconnect_mid_stream_breaks_nothing(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.event_delay = 0.05
    upstream.enqueue(text("word " * 200, chunk_chars=4))
    body = {"model": "c", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "Tell a story."}]}
    with local_http.stream("POST", f"{proxy.base_url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS) as response:
        first = next(response.iter_raw())
        assert first
    upstream.event_delay = 0
    proxy.settle()
    cut = upstream.generation_requests()[-1]
    assert not cut.completed, "the proxy stopped reading the upstream stream once its client went away"
    history = [
        *body["messages"],
        {"role": "assistant", "content": "Once upon a time."},
        {"role": "user", "content": "Go on."},
    ]
    upstream.enqueue(text("The end."))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    raw = client.messages.with_raw_response.create(model="c", max_tokens=5, messages=history)  # type: ignore[arg-type]
    assert raw.parse().content[0].text == "The end."  # type: ignore[union-attr]
    session = raw.headers["x-microcompact-session"]
    stored = proxy.store.load_active(session)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["Tell a story.", "Go on."]


def test_a_rewritten_history_forks_and_never_mixes(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."}]
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=4096) as proxy:
        client = openai.OpenAI(
            base_url=f"{proxy.base_url}/v1",
            api_key="k",
            max_retries=0,
            default_headers={"X-Microcompact-Session": "s1"},
        )
        for turn in range(4):
            messages.append({"role": "user", "content": f"Turn {turn}."})
            upstream.enqueue(tool_call("Bash", {"command": f"t{turn}"}), text(f"done {turn}"))
            for _ in range(2):
                reply = client.chat.completions.create(model="m", messages=messages).choices[0].message  # type: ignore[arg-type]
                messages.append(reply.model_dump(exclude_none=True))
                for call in reply.tool_calls or []:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"output {turn} " * 300})
            proxy.settle()
        assert compacted(upstream.generation_requests()[-1].body["messages"])
        edited = [
            *messages[:2],
            {"role": "assistant", "content": "I will not use tools."},
            {"role": "user", "content": "OK?"},
        ]
        upstream.enqueue(text("Fine."))
        raw = client.chat.completions.with_raw_response.create(model="m", messages=edited)  # type: ignore[arg-type]
    assert proxy.proxy.settings.salt_file is not None
    assert raw.headers["x-microcompact-session"] == named("s1", proxy.proxy.settings.salt_file, "k") + "~2"
    assert upstream.generation_requests()[-1].body["messages"] == edited, "a fork forwards only its own history"


def test_proxy_key_is_required_when_set(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", api_key="proxy-secret") as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-upstream", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert local_http.get(f"{proxy.base_url}/metrics").status_code == 401
        assert local_http.get(f"{proxy.base_url}/healthz").status_code == 200
        keyed = openai.OpenAI(
            base_url=f"{proxy.base_url}/v1",
            api_key="sk-upstream",
            max_retries=0,
            default_headers={"X-Microcompact-Key": "proxy-secret"},
        )
        assert keyed.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
    sent = upstream.requests[-1]
    assert sent.headers["authorization"] == "Bearer sk-upstream" and "x-microcompact-key" not in sent.headers


def test_a_failing_store_degrades_to_forwarding(upstream: ScriptedUpstream, proxy: ProxyServer, caplog: Any) -> None:
    proxy.store.close()
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0)
    history = [{"role": "user", "content": "hi"}]
    raw = client.chat.completions.with_raw_response.create(model="m", messages=history)  # type: ignore[arg-type]
    assert raw.headers["x-microcompact-degraded"] in ("store-unavailable", "engine-error")
    assert upstream.generation_requests()[-1].body["messages"] == history
    assert 'microcompact_degraded_total{reason="' in local_http.get(f"{proxy.base_url}/metrics").text


def test_a_failing_summarizer_degrades_and_nothing_is_dropped(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    config = proxy_config(None, 4096).with_overrides(
        **{"auxiliary.compression": {"provider": "openai", "model": "gone", "base_url": "http://127.0.0.1:9/v1"}}
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."}]
    degraded = set()
    with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0)
        for turn in range(5):
            messages.append({"role": "user", "content": f"Turn {turn}."})
            upstream.enqueue(tool_call("Bash", {"command": f"t{turn}"}), text(f"done {turn}"))
            for _ in range(2):
                raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
                degraded.add(raw.headers.get("x-microcompact-degraded"))
                sent = upstream.generation_requests()[-1]
                assert sent.status == 200 and contract_errors(messages, sent.body["messages"]) == []
                reply = raw.parse().choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                for call in reply.tool_calls or []:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"output {turn} " * 300})
            proxy.settle()
    assert "summarizer-failed" in degraded


def test_an_empty_conversation_is_forwarded_and_stores_nothing(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    response = post(proxy, "/v1/chat/completions", b'{"model": "m", "messages": []}')
    assert response.status_code == 400 and response.content == bytes(upstream.requests[-1].response)
    assert "x-microcompact-session" not in response.headers
    assert proxy.store.list_sessions() == []


def test_json_orjson_refuses_but_the_provider_takes_goes_through(
    upstream: ScriptedUpstream, proxy: ProxyServer
) -> None:
    content = b'{"model": "m", "seed": 123456789012345678901234567890, "messages": [{"role": "user", "content": "hi"}]}'
    response = post(proxy, "/v1/chat/completions", content)
    assert response.status_code == 200
    assert upstream.requests[-1].raw == content
