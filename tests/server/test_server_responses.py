"""The OpenAI Responses API through ``serve`` (issue 19): the openai SDK's ``client.responses.create``,
plain and streaming, and a tool loop that the proxy compacts, against a scripted Responses upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from microcompact.messages import MARKER_PREFIX
from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from support.responses_loop import TOOLS, tool_loop
from upstream import Reply, Text, Thinking
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream

openai = lazy("openai")

PROMPT = "Print the numbers, step by step, with the tool."


@pytest.fixture
def responses_upstream() -> Iterator[ResponsesUpstream]:
    with ResponsesUpstream() as server:
        yield server


@pytest.fixture
def proxy(responses_upstream: ResponsesUpstream, tmp_path: Path) -> Iterator[ProxyServer]:
    with ProxyServer(responses_upstream.base_url, tmp_path / "sessions.db") as server:
        yield server


def _client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-responses-test", max_retries=0)


def is_marker_item(item: dict[str, Any]) -> bool:
    content = item.get("content")
    texts = [p.get("text", "") for p in content if isinstance(p, dict)] if isinstance(content, list) else [content]
    return item.get("role") == "assistant" and any(isinstance(t, str) and t.startswith(MARKER_PREFIX) for t in texts)


def test_plain_create_answers_the_upstreams_bytes(responses_upstream: ResponsesUpstream, proxy: ProxyServer) -> None:
    raw = _client(proxy).responses.with_raw_response.create(
        model="gpt-test", input="Say hello.", instructions="Be brief."
    )
    [sent] = responses_upstream.responses_requests()
    assert raw.http_response.content == bytes(sent.response)
    assert raw.parse().output_text == "Scripted reply to request 1."
    assert sent.body["input"] == "Say hello." and sent.body["instructions"] == "Be brief."
    assert sent.headers["authorization"] == "Bearer sk-responses-test"
    assert raw.headers["x-microcompact-mode"] == "compacted"
    assert raw.headers["x-microcompact-session"].startswith("openai-")
    proxy.settle()
    [session] = proxy.router.sessions()
    assert session.counter.overhead != 0, "usage.input_tokens of the JSON body calibrated the session"


def test_streaming_create_passes_every_event_through_in_order(
    responses_upstream: ResponsesUpstream, proxy: ProxyServer
) -> None:
    responses_upstream.enqueue(Reply((Thinking("Think.", "enc-1"), Text("Streamed answer."))))
    stream = _client(proxy).responses.create(
        model="gpt-test",
        input=[{"role": "user", "content": "Stream it."}],
        stream=True,
        include=["reasoning.encrypted_content"],
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    final: Any = events[-1]
    assert final.response.output_text == "Streamed answer."
    assert final.response.output[0].encrypted_content == "enc-1"
    body = {"model": "gpt-test", "input": "again", "stream": True}
    with local_http.stream("POST", f"{proxy.base_url}/v1/responses", json=body, timeout=10) as response:
        received = b"".join(response.iter_raw())
        assert response.headers["x-microcompact-mode"] == "compacted"
    assert received == bytes(responses_upstream.responses_requests()[-1].response)
    proxy.settle()
    sessions = proxy.router.sessions()
    assert any(s.counter.overhead != 0 for s in sessions), "response.completed's usage calibrated a session"


@pytest.mark.parametrize("stream", [False, pytest.param(True, marks=pytest.mark.slow)])  # make test: JSON answers
def test_a_long_tool_loop_is_compacted_with_items_whole(tmp_path: Path, stream: bool) -> None:
    steps = 14
    with (
        ResponsesUpstream(ResponsesToolLoop(steps)) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=32_768) as proxy,
    ):
        loop = tool_loop(_client(proxy), steps, PROMPT, stream=stream)
        items, answers = loop.items, loop.answers
        proxy.settle()
        requests = upstream.responses_requests()
        assert answers[-1] == "All steps are done." and len(requests) == steps + 1
        assert all(r.status == 200 for r in requests), [r.response_text[:200] for r in requests if r.status != 200]
        forwarded = [r.body["input"] for r in requests]
        assert any(is_marker_item(i) for i in forwarded[-1]), "the loop was compacted"
        client_bytes = len(json.dumps(items))
        assert len(json.dumps(forwarded[-1])) < client_bytes / 2
        peak = max(r.usage["input_tokens"] for r in requests if r.usage)
        assert peak < 32_768, f"the peak prompt {peak} fits the window"
        for sent in forwarded:
            assert sent[0] == {"role": "user", "content": PROMPT}, "the first prompt goes verbatim"
            for i, item in enumerate(sent):
                if item.get("type") == "reasoning":
                    assert sent[i + 1].get("type") == "message" and sent[i + 2]["type"] == "function_call"
                if is_marker_item(item):
                    assert item == {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": item["content"][0]["text"]}],
                    }
                elif item not in items:
                    assert item.get("type") == "function_call_output", f"only outputs are shortened: {item}"


def test_previous_response_id_is_passed_through_and_said(
    responses_upstream: ResponsesUpstream, proxy: ProxyServer
) -> None:
    client = _client(proxy)
    first = client.responses.create(model="gpt-test", input="Remember 7.")
    raw = client.responses.with_raw_response.create(
        model="gpt-test", input="What number?", previous_response_id=first.id
    )
    assert raw.headers["x-microcompact-mode"] == "passthrough; reason=previous_response_id"
    sent = responses_upstream.responses_requests()[-1]
    assert sent.body["previous_response_id"] == first.id and proxy.received[-1][1] == sent.raw
    conversation = local_http.post(
        f"{proxy.base_url}/v1/responses", json={"model": "m", "input": "hi", "conversation": "conv_1"}, timeout=10
    )
    assert conversation.headers["x-microcompact-mode"] == "passthrough; reason=conversation"
    page = local_http.get(f"{proxy.base_url}/metrics").text
    assert 'microcompact_mode_total{api="openai",mode="passthrough",reason="previous_response_id"} 1' in page
    assert 'microcompact_mode_total{api="openai",mode="compacted",reason=""} 1' in page


def test_stored_responses_and_compact_pass_through(responses_upstream: ResponsesUpstream, proxy: ProxyServer) -> None:
    client = _client(proxy)
    created = client.responses.create(model="gpt-test", input="Keep this.")
    assert client.responses.retrieve(created.id).output_text == created.output_text
    assert [i.type for i in client.responses.input_items.list(created.id).data] == []
    compact = local_http.post(f"{proxy.base_url}/v1/responses/compact", json={"model": "m", "input": "x"}, timeout=10)
    assert compact.json()["output"][0]["type"] == "compaction"
    assert compact.headers["x-microcompact-mode"] == "passthrough; reason=endpoint"
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert [r.path for r in responses_upstream.requests][-2:] == [f"/v1/responses/{created.id}"] * 2


def test_reasoning_items_and_unknown_items_stay_where_they_were(
    responses_upstream: ResponsesUpstream, proxy: ProxyServer
) -> None:
    compaction = {"type": "compaction", "encrypted_content": "opaque-blob"}
    future = {"type": "hologram_call_v9", "id": "h1", "payload": {"deep": [1, 2, 3]}}
    items = [
        {"role": "developer", "content": "Rules."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Go."},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            ],
        },
        compaction,
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-a"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a.txt"}]},
        future,
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
        {
            "type": "local_shell_call",
            "call_id": "c3",
            "id": "lsh_1",
            "action": {"type": "exec", "command": ["ls"]},
            "status": "completed",
        },
        {"type": "local_shell_call_output", "call_id": "c3", "output": "a.txt"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Found it."}]},
        {"role": "user", "content": "Thanks."},
    ]
    response = local_http.post(f"{proxy.base_url}/v1/responses", json={"model": "m", "input": items}, timeout=10)
    assert response.status_code == 200 and response.headers["x-microcompact-mode"] == "compacted"
    assert responses_upstream.responses_requests()[-1].body["input"] == items
    proxy.settle()
    [session] = proxy.router.sessions()
    roles = [m["role"] for m in session.transcript]
    assert roles == [
        "system",
        "user",
        "system",
        "assistant",
        "tool",
        "system",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


def test_a_passthrough_is_logged_once_per_conversation(
    responses_upstream: ResponsesUpstream, proxy: ProxyServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(proxy)
    first = client.responses.create(model="gpt-test", input="Start.")
    caplog.set_level("WARNING", logger="microcompact")
    for conversation in ("codex-a", "codex-a", "codex-a", "codex-b"):
        client.responses.create(
            model="gpt-test", input="More.", previous_response_id=first.id, extra_headers={"session-id": conversation}
        )
    # the passthrough lines only (the proxy's cost telemetry line names its "uncompacted" cost too)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Proxy: passing")]
    assert lines == [
        "Proxy: passing conversation codex-a through uncompacted (previous_response_id)",
        "Proxy: passing conversation codex-b through uncompacted (previous_response_id)",
    ]


def test_a_remote_compaction_request_goes_up_as_it_came(tmp_path: Path) -> None:
    """Codex's remote compaction (a ``compaction_trigger`` item, its provider named "OpenAI"): the request the
    proxy would otherwise compact reaches the upstream byte for byte, the answer's one ``compaction`` item
    comes back, and the conversation goes on with that item in its input."""
    steps = 14
    with (
        ResponsesUpstream(ResponsesToolLoop(steps)) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=32_768) as proxy,
    ):
        items = tool_loop(_client(proxy), steps, PROMPT).items
        assert any(is_marker_item(i) for i in upstream.responses_requests()[-1].body["input"]), "compacted before"
        trigger = json.dumps(
            {"model": "gpt-test", "input": [*items, {"type": "compaction_trigger"}], "tools": TOOLS, "store": False}
        ).encode()
        answer = local_http.post(
            f"{proxy.base_url}/v1/responses",
            content=trigger,
            headers={"authorization": "Bearer sk-responses-test", "content-type": "application/json"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text[:300]
        assert answer.headers["x-microcompact-mode"] == "passthrough; reason=provider_compaction"
        assert upstream.responses_requests()[-1].raw == trigger
        [compaction] = [item for item in answer.json()["output"] if item["type"] == "compaction"]
        assert len(answer.json()["output"]) == 1
        after = [items[0], compaction, {"role": "user", "content": "Go on."}]
        going_on = _client(proxy).responses.create(model="gpt-test", input=after, tools=TOOLS, store=False)
        assert upstream.responses_requests()[-1].body["input"] == after
        # The compaction absorbed the last step: the loop is done rather than started again at step 1.
        assert going_on.output_text == "All steps are done."
