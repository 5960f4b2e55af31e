"""Deep nesting in the body of a route ``serve`` forwards as it came (embeddings, batches, Gemini's other
model methods, any method): a 400 in the provider's shape naming where, nothing forwarded, never a 500,
like the compacted routes (test_wire_depth.py). A body that is not JSON goes up as it is, brackets and all;
a path of no known API stays a 404 that reaches nobody."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from microcompact.jsoninput import MAX_DEPTH
from microcompact.server.limits import THREAD_ABOVE, forwarded_nesting
from support import local_http
from support.gemini_server import GeminiUpstream
from support.serve_process import ServeProcess
from support.wire import nest, with_deep
from upstream import ScriptedUpstream

GEMINI_KEY = "gemini-forwarded-depth-key"
OPENAI_HEADERS = {"authorization": "Bearer sk-forwarded"}
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-forwarded", "anthropic-version": "2023-06-01"}
GEMINI_HEADERS = {"x-goog-api-key": GEMINI_KEY}

# (method, path, headers, body with "DEEP" where the deep value goes, where the error must say it is, api)
CASES: dict[str, tuple[str, str, dict[str, str], dict[str, Any], str, str]] = {
    "openai-embeddings": (
        "POST",
        "/v1/embeddings",
        OPENAI_HEADERS,
        {"model": "m", "input": ["a"], "extra": "DEEP"},
        "extra.d.d.d.d",
        "openai",
    ),
    "openai-no-v1": ("POST", "/moderations", OPENAI_HEADERS, {"input": [{"x": "DEEP"}]}, "input[0].x", "openai"),
    "openai-put": ("PUT", "/v1/vector_stores/vs1", OPENAI_HEADERS, {"metadata": "DEEP"}, "metadata.d", "openai"),
    "responses-input-tokens": (
        "POST",
        "/v1/responses/input_tokens",
        OPENAI_HEADERS,
        {"model": "m", "input": [{"role": "user", "content": "DEEP"}]},
        "input[0].content",
        "openai",
    ),
    "anthropic-batches": (
        "POST",
        "/v1/messages/batches",
        ANTHROPIC_HEADERS,
        {"requests": [{"custom_id": "a", "params": {"model": "m", "metadata": "DEEP"}}]},
        "requests[0].params.metadata.d.d",
        "anthropic",
    ),
    "anthropic-shared-models": (
        "PATCH",
        "/v1/models/m",
        ANTHROPIC_HEADERS,
        {"x": "DEEP"},
        "x.d.d.d.d.d",
        "anthropic",
    ),
    "gemini-embed": (
        "POST",
        "/v1beta/models/gemini-x:embedContent",
        GEMINI_HEADERS,
        {"content": {"parts": [{"text": "a", "x": "DEEP"}]}},
        "content.parts[0].x",
        "gemini",
    ),
    "gemini-v1-method": (
        "POST",
        "/v1/models/gemini-x:batchEmbedContents",
        GEMINI_HEADERS,
        {"requests": "DEEP"},
        "requests.d.d",
        "gemini",
    ),
}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ScriptedUpstream, GeminiUpstream]]:
    with ScriptedUpstream(validate=False) as scripted, GeminiUpstream(window=1_000_000, api_key=GEMINI_KEY) as gemini:
        yield scripted, gemini


@pytest.fixture(scope="module")
def served(
    upstreams: tuple[ScriptedUpstream, GeminiUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    scripted, gemini = upstreams
    tmp = tmp_path_factory.mktemp("forwarded-depth")
    options = ["--db", str(tmp / "s.db"), "--openai-upstream", scripted.openai_base_url]
    options += ["--anthropic-upstream", scripted.base_url, "--gemini-upstream", gemini.base_url]
    process = ServeProcess(tmp / "home", *options).start()
    try:
        yield process
    finally:
        process.kill()


def forwarded(upstreams: tuple[ScriptedUpstream, GeminiUpstream]) -> int:
    return len(upstreams[0].requests) + len(upstreams[1].exchanges)


def send(
    served: ServeProcess, method: str, path: str, headers: dict[str, str], content: bytes, content_type: str | None
) -> httpx.Response:
    sent = {**headers, **({"content-type": content_type} if content_type is not None else {})}
    return local_http.request(method, f"{served.base_url}{path}", content=content, headers=sent, timeout=60)


def assert_provider_400(response: httpx.Response, api: str, where: str) -> None:
    assert response.status_code == 400, response.text[:500]
    payload = response.json()
    error = payload["error"]
    if api == "gemini":
        assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
    elif api == "anthropic":
        assert payload["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert error["type"] == "invalid_request_error"
    assert f"nested more than {MAX_DEPTH} levels deep at {where}" in error["message"], error["message"]
    assert response.headers["x-microcompact-mode"] == "passthrough; reason=invalid_request"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", None])
@pytest.mark.parametrize("depth", [100, 3000])
@pytest.mark.parametrize("case", sorted(CASES))
def test_deep_nesting_on_a_forwarded_route_is_a_400_naming_where(
    served: ServeProcess,
    upstreams: tuple[ScriptedUpstream, GeminiUpstream],
    case: str,
    depth: int,
    content_type: str | None,
) -> None:
    method, path, headers, template, where, api = CASES[case]
    before = forwarded(upstreams)
    response = send(served, method, path, headers, with_deep(template, nest(depth)), content_type)
    assert_provider_400(response, api, where)
    assert forwarded(upstreams) == before, "a refused body went up"
    assert "Traceback" not in "".join(served.stderr)


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_the_cap_the_same_body_goes_up_as_it_came(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream], case: str
) -> None:
    method, path, headers, template, _, _ = CASES[case]
    body = with_deep(template, nest(30))
    before = forwarded(upstreams)
    response = send(served, method, path, headers, body, "application/json")
    # the upstream answers (the scripted Gemini refuses a body without contents): only the proxy's 400 is wrong
    assert response.status_code != 500 and "nested more than" not in response.text, response.text[:300]
    assert forwarded(upstreams) == before + 1
    scripted, gemini = upstreams
    if "gemini" in case:
        assert gemini.exchanges[-1].path == path
    else:
        assert scripted.requests[-1].raw == body, "a forwarded body must go up byte for byte"


def test_a_deep_body_larger_than_the_inline_check_is_refused_too(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream]
) -> None:
    padding = "x" * (THREAD_ABOVE + 1000)
    body = with_deep({"model": "m", "input": [padding], "extra": "DEEP"}, nest(200))
    assert len(body) > THREAD_ABOVE
    before = forwarded(upstreams)
    response = send(served, "POST", "/v1/embeddings", OPENAI_HEADERS, body, "application/json")
    assert_provider_400(response, "openai", "extra.d.d.d.d")
    assert forwarded(upstreams) == before


def test_a_body_that_is_not_json_goes_up_as_it_is(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream]
) -> None:
    brackets = b"[" * 500 + b"{" * 500
    multipart = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n' + brackets + b"\r\n--b--\r\n"
    )
    for content_type, body in (
        ("multipart/form-data; boundary=b", multipart),
        ("application/octet-stream", brackets),
        ("text/plain", brackets),
        (None, b"not json " + brackets),  # no content type, and it does not open like JSON
    ):
        before = forwarded(upstreams)
        response = send(served, "POST", "/v1/files", OPENAI_HEADERS, body, content_type)
        assert response.status_code != 400, (content_type, response.text[:300])
        assert forwarded(upstreams) == before + 1
        assert upstreams[0].requests[-1].raw == body


def test_json_the_proxy_cannot_read_but_not_deep_goes_up_for_the_upstream_to_answer(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream]
) -> None:
    for body in (b'{"input": [1, 2,', b'{"big": 123456789012345678901234567890}', b"{'single': 'quotes'}"):
        before = forwarded(upstreams)
        response = send(served, "POST", "/v1/embeddings", OPENAI_HEADERS, body, "application/json")
        assert response.status_code != 400, (body, response.text[:300])
        assert upstreams[0].requests[-1].raw == body and forwarded(upstreams) == before + 1


def test_a_connection_carries_on_after_the_400(served: ServeProcess) -> None:
    with httpx.Client(base_url=served.base_url, timeout=30) as client:
        deep = with_deep({"extra": "DEEP"}, nest(100))
        first = client.post(
            "/v1/embeddings", content=deep, headers={**OPENAI_HEADERS, "content-type": "application/json"}
        )
        assert first.status_code == 400 and first.headers.get("connection") != "close"
        second = client.get("/healthz")
        assert second.status_code == 200 and second.text == "ok\n"


def test_an_unknown_route_with_a_deep_body_stays_a_404_that_reaches_nobody(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream]
) -> None:
    before = forwarded(upstreams)
    response = send(served, "POST", "/v1/nowhere", {}, with_deep({"x": "DEEP"}, nest(3000)), "application/json")
    assert response.status_code == 404 and "no route for POST /v1/nowhere" in response.json()["error"]["message"]
    assert forwarded(upstreams) == before
    assert "Traceback" not in "".join(served.stderr)


def test_forwarded_nesting_reads_content_types_and_first_bytes() -> None:
    deep = with_deep({"a": "DEEP"}, nest(MAX_DEPTH + 5))
    for content_type in ("application/json", "APPLICATION/JSON;charset=utf-8", "application/vnd.api+json", ""):
        assert forwarded_nesting(deep, content_type) is not None, content_type
    for content_type in ("text/plain", "application/jsonl", "multipart/form-data; boundary=x", "application/x-json5"):
        assert forwarded_nesting(deep, content_type) is None, content_type
    assert forwarded_nesting(b"  \n" + deep, "") is not None
    assert forwarded_nesting(b"x" + deep, "") is None
    exactly = with_deep({"a": "DEEP"}, nest(MAX_DEPTH - 1))  # 64 levels in all: the cap, allowed
    assert forwarded_nesting(exactly, "application/json") is None
    assert json.loads(exactly)["a"]["d"]
