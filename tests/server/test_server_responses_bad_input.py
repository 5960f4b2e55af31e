"""Bad input on the Responses route (issue 19): every request gets a provider-shaped error or goes up as it
came (and says so), never a traceback, and nothing a conversation already stored is lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import local_http
from support.proxy_server import ProxyServer
from upstream.responses_server import ResponsesUpstream

SESSION = {"x-microcompact-session": "bad-input-conversation"}
CALL = {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


@pytest.fixture
def responses_upstream() -> Iterator[ResponsesUpstream]:
    with ResponsesUpstream() as server:
        yield server


@pytest.fixture
def proxy(responses_upstream: ResponsesUpstream, tmp_path: Path) -> Iterator[ProxyServer]:
    with ProxyServer(responses_upstream.base_url, tmp_path / "sessions.db") as server:
        yield server


def _post(proxy: ProxyServer, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return local_http.post(
        f"{proxy.base_url}/v1/responses",
        content=content,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=120,
    )


def _stored(proxy: ProxyServer) -> list[dict[str, Any]]:
    proxy.settle()
    [session] = [s for s in proxy.router.sessions() if s.session_id.startswith("bad-input")]
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in session.transcript]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (b"{not json", "not valid JSON"),
        ([1, 2], "JSON object"),
        ({"model": "m", "input": 7}, "'input'"),
        ({"model": "m", "input": [3]}, "input[0]"),
        ({"model": "m", "input": [{"type": 5}]}, "input[0].type"),
        ({"model": "m", "input": [{"type": "message", "role": "wizard", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": {"a": 1}}]}, "input[0].content"),
        (
            {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
            "arguments",
        ),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ],
)
def test_malformed_input_gets_an_openai_shaped_400_naming_where(
    proxy: ProxyServer, responses_upstream: ResponsesUpstream, body: Any, where: str
) -> None:
    response = _post(proxy, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert where in error["message"] and error["type"] == "invalid_request_error"
    assert response.headers["x-microcompact-mode"] == "passthrough; reason=invalid_request"
    assert not responses_upstream.responses_requests(), "refused before reaching the upstream"


@pytest.mark.parametrize(
    "items",
    [
        [{"role": "user", "content": "go"}, OUTPUT, CALL],  # the output before its call
        [{"role": "user", "content": "go"}, OUTPUT],  # an output with no call
        [{"role": "user", "content": "go"}, CALL],  # a call with no output
        [{"role": "user", "content": "go"}, CALL, {"role": "user", "content": "wait"}, OUTPUT],  # interleaved
        [{"role": "user", "content": "go"}, {"type": "reasoning", "id": "rs_1", "summary": []}],  # orphaned reasoning
    ],
)
def test_items_that_do_not_pair_up_go_up_as_they_came_and_say_so(
    proxy: ProxyServer, responses_upstream: ResponsesUpstream, items: list[Any]
) -> None:
    body = {"model": "m", "input": items}
    response = _post(proxy, body)
    assert response.headers["x-microcompact-mode"] == "passthrough; reason=unpaired_items"
    [sent] = responses_upstream.responses_requests()
    assert sent.raw == json.dumps(body).encode(), "forwarded byte for byte"
    assert response.status_code == sent.status, "the API's own answer reaches the client"
    if items[1:2] != [CALL] or len(items) == 2:
        assert sent.status == 400, "the scripted API refuses these, as OpenAI does"
    assert response.content == bytes(sent.response)
    assert not proxy.router.sessions(), "nothing was stored for a request the proxy could not order"


def test_bad_requests_lose_nothing_already_stored(proxy: ProxyServer, responses_upstream: ResponsesUpstream) -> None:
    items: list[Any] = [{"role": "user", "content": "Start."}]
    assert _post(proxy, {"model": "m", "input": items}, SESSION).status_code == 200
    items += [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Ok."}]}]
    items += [{"role": "user", "content": "Next."}]
    assert _post(proxy, {"model": "m", "input": items}, SESSION).status_code == 200
    before = _stored(proxy)
    assert len(before) == 3
    for bad in ([*items, 5], [*items, OUTPUT], [*items, {"type": "message", "role": "user"}]):
        assert _post(proxy, {"model": "m", "input": bad}, SESSION).status_code == 400
    assert _stored(proxy) == before


@pytest.mark.slow
def test_huge_and_deeply_nested_inputs_never_answer_a_traceback(
    proxy: ProxyServer, responses_upstream: ResponsesUpstream
) -> None:
    many = [{"role": "user", "content": f"message {i}"} for i in range(5_000)]
    response = _post(proxy, {"model": "m", "input": many})
    assert response.status_code == 200 and response.headers["x-microcompact-mode"] == "compacted"
    assert responses_upstream.responses_requests()[-1].body["input"] == many
    big = "x" * 2_000_000
    response = _post(proxy, {"model": "m", "input": big})
    assert response.status_code == 200 and responses_upstream.responses_requests()[-1].body["input"] == big
    too_many = _post(proxy, {"model": "m", "input": [{"role": "user", "content": "x"}] * 100_001})
    assert too_many.status_code == 400 and "at most 100000" in too_many.json()["error"]["message"]
    for depth in (200, 900, 5000):
        nested = '{"inner":[' * depth + '"bottom"' + "]}" * depth  # as text: json.dumps itself stops at ~1000
        body = '{"model":"m","input":[{"role":"user","content":"deep"},{"type":"hologram_call_v9","payload":%s}]}'
        response = _post(proxy, (body % nested).encode())
        assert response.status_code in (200, 400), (depth, response.text[:300])
        assert "error" not in response.json() or "Traceback" not in response.text
        if response.status_code == 400:
            assert "input" in response.json()["error"]["message"] or "JSON" in response.json()["error"]["message"]
