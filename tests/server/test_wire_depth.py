"""Deep nesting anywhere in a request body, on every compacted route of a real ``serve``: a 400 in the
provider's shape naming where (the transcript reader's cap, 64 levels), nothing forwarded, never a 500;
under the cap the same body goes up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from microcompact.jsoninput import MAX_DEPTH
from microcompact.server.limits import deep_path, parse_json
from support import local_http
from support.gemini_server import GeminiUpstream
from support.serve_process import ServeProcess
from support.wire import nest, with_deep
from upstream import ScriptedUpstream

GEMINI_KEY = "gemini-depth-key"
USER = {"role": "user", "content": "hello"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
ANTHROPIC_USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
RESULT = [{"type": "text", "text": "r", "x": "DEEP"}]
GEMINI_USER = {"role": "user", "parts": [{"text": "hello"}]}
GEMINI_CALL = {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}

# route -> position -> (body with "DEEP" where the deep value goes, where the error must say it is)
CASES: dict[str, dict[str, tuple[dict[str, Any], str]]] = {
    "/v1/chat/completions": {
        "system": (
            {"model": "m", "messages": [{"role": "system", "content": [{"type": "text", "text": "s", "x": "DEEP"}]}]},
            "messages[0].content[0].x",
        ),
        "first-user": (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "x": "DEEP"}]}]},
            "messages[0].content[0].x",
        ),
        "tool-result": (
            {
                "model": "m",
                "messages": [
                    USER,
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r", "x": "DEEP"}]},
                ],
            },
            "messages[2].content[0].x",
        ),
        "tools": (
            {
                "model": "m",
                "messages": [USER],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": "DEEP"}}],
            },
            "tools[0].function.parameters",
        ),
        "metadata": ({"model": "m", "messages": [USER], "metadata": "DEEP"}, "metadata.d.d"),
    },
    "/v1/messages": {
        "system": (
            {"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "s", "x": "DEEP"}], "messages": [USER]},
            "system[0].x",
        ),
        "first-user": (
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "x": "DEEP"}]}],
            },
            "messages[0].content[0].x",
        ),
        "tool-result": (
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [
                    USER,
                    {"role": "assistant", "content": [ANTHROPIC_USE]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": RESULT}]},
                ],
            },
            "messages[2].content[0].content[0]",
        ),
        "tools": (
            {"model": "m", "max_tokens": 8, "messages": [USER], "tools": [{"name": "f", "input_schema": "DEEP"}]},
            "tools[0].input_schema",
        ),
        "metadata": ({"model": "m", "max_tokens": 8, "messages": [USER], "metadata": "DEEP"}, "metadata.d.d"),
    },
    "/v1/responses": {
        "system": (
            {
                "model": "m",
                "input": [{"role": "system", "content": [{"type": "input_text", "text": "s", "x": "DEEP"}]}, USER],
            },
            "input[0].content[0].x",
        ),
        "first-user": (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi", "x": "DEEP"}]}]},
            "input[0].content[0].x",
        ),
        "tool-result": (
            {
                "model": "m",
                "input": [
                    USER,
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "DEEP"},
                ],
            },
            "input[2].output",
        ),
        "tools": (
            {"model": "m", "input": [USER], "tools": [{"type": "function", "name": "f", "parameters": "DEEP"}]},
            "tools[0].parameters",
        ),
        "metadata": ({"model": "m", "input": [USER], "metadata": "DEEP"}, "metadata.d.d"),
    },
    "/v1beta/models/gemini-depth:generateContent": {
        "system": (
            {"systemInstruction": {"parts": [{"text": "s", "x": "DEEP"}]}, "contents": [GEMINI_USER]},
            "systemInstruction.parts[0].x",
        ),
        "first-user": (
            {"contents": [{"role": "user", "parts": [{"text": "hi", "x": "DEEP"}]}]},
            "contents[0].parts[0].x",
        ),
        "tool-result": (
            {
                "contents": [
                    GEMINI_USER,
                    GEMINI_CALL,
                    {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "DEEP"}}]},
                ]
            },
            "contents[2].parts[0].functionResponse.response",
        ),
        "tools": (
            {"contents": [GEMINI_USER], "tools": [{"functionDeclarations": [{"name": "f", "parameters": "DEEP"}]}]},
            "tools[0].functionDeclarations[0].parameters",
        ),
        "metadata": ({"contents": [GEMINI_USER], "generationConfig": {"responseSchema": "DEEP"}}, "generationConfig"),
    },
}
ALL = [(route, position) for route, positions in CASES.items() for position in positions]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ScriptedUpstream, GeminiUpstream]]:
    with ScriptedUpstream(validate=False) as scripted, GeminiUpstream(window=1_000_000, api_key=GEMINI_KEY) as gemini:
        yield scripted, gemini


@pytest.fixture(scope="module")
def served(
    upstreams: tuple[ScriptedUpstream, GeminiUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    scripted, gemini = upstreams
    tmp = tmp_path_factory.mktemp("depth")
    options = ["--db", str(tmp / "s.db"), "--openai-upstream", scripted.openai_base_url]
    options += ["--anthropic-upstream", scripted.base_url, "--gemini-upstream", gemini.base_url]
    process = ServeProcess(tmp / "home", *options).start()
    try:
        yield process
    finally:
        process.kill()


def forwarded(upstreams: tuple[ScriptedUpstream, GeminiUpstream]) -> int:
    return len(upstreams[0].requests) + len(upstreams[1].exchanges)


def post(served: ServeProcess, route: str, content: bytes) -> httpx.Response:
    headers = {"content-type": "application/json", "x-goog-api-key": GEMINI_KEY, "authorization": "Bearer k"}
    return local_http.post(f"{served.base_url}{route}", content=content, headers=headers, timeout=60)


@pytest.mark.parametrize("depth", [100, 500, 3000])
@pytest.mark.parametrize(("route", "position"), ALL)
def test_deep_nesting_anywhere_is_a_400_naming_where(
    served: ServeProcess,
    upstreams: tuple[ScriptedUpstream, GeminiUpstream],
    route: str,
    position: str,
    depth: int,
) -> None:
    template, where = CASES[route][position]
    before = forwarded(upstreams)
    response = post(served, route, with_deep(template, nest(depth)))
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    if "gemini" in route:
        assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
    elif route == "/v1/messages":
        assert response.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert error["type"] == "invalid_request_error"
    assert f"nested more than {MAX_DEPTH} levels deep at {where}" in error["message"], error["message"]
    assert forwarded(upstreams) == before  # nothing went up
    assert "Traceback" not in "".join(served.stderr)


@pytest.mark.parametrize(("route", "position"), ALL)
def test_under_the_cap_the_same_body_goes_up(
    served: ServeProcess, upstreams: tuple[ScriptedUpstream, GeminiUpstream], route: str, position: str
) -> None:
    template, _ = CASES[route][position]
    before = forwarded(upstreams)
    response = post(served, route, with_deep(template, nest(20)))
    assert response.status_code != 500 and "nested more than" not in response.text, response.text[:300]
    assert forwarded(upstreams) == before + 1


def test_the_count_tokens_routes_refuse_deep_bodies_too(served: ServeProcess) -> None:
    anthropic = {"model": "m", "messages": [USER], "metadata": "DEEP"}
    response = post(served, "/v1/messages/count_tokens", with_deep(anthropic, nest(300)))
    assert response.status_code == 400 and "at metadata" in response.json()["error"]["message"]
    gemini = {"contents": [GEMINI_USER], "generationConfig": "DEEP"}
    response = post(served, "/v1beta/models/gemini-depth:countTokens", with_deep(gemini, nest(3000)))
    assert response.status_code == 400 and "at generationConfig" in response.json()["error"]["message"]


def test_the_path_is_read_from_the_text_in_document_order() -> None:
    body = with_deep({"a": [1, {"b": "x"}], "weird key": [{"c": "DEEP"}]}, nest(70))
    assert deep_path(body) == '["weird key"][0].c.d.d.d…'
    assert deep_path(json.dumps({"s": "[[[[{{{{" * 50, "n": [[[]]]}).encode()) is None  # brackets in strings
    exactly = with_deep({"k": "DEEP"}, nest(MAX_DEPTH - 1, "1"))  # the body, then 63 levels: 64 in all
    assert deep_path(exactly) is None and parse_json(exactly)["k"]["d"]
    assert deep_path(with_deep({"k": "DEEP"}, nest(MAX_DEPTH, "1"))) == "k.d.d.d.d.d…"
    assert deep_path(b"[" * 70 + b"]" * 70) == "[0][0][0][0][0][0]…"
    assert deep_path(b"[" * 64 + b"]" * 64) is None
