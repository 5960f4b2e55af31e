"""Bad input on the Gemini routes of a real ``serve``: Google's error shape (``{"error": {"code": 400,
"message", "status": "INVALID_ARGUMENT"}}``) from the proxy or the upstream's own, or a passthrough that lets
Gemini judge; never a traceback, and the conversation's next request still works. Unit checks of the format
(pairing by id, name and order; kept signatures; the marker merged as its own part) come last."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from microcompact.server.gemini_format import CALLS_KEY, PLACEHOLDER_SIGNATURE, GeminiFormat
from support import local_http
from support.gemini_server import GeminiUpstream
from support.serve_process import ServeProcess

KEY = "gemini-test-key"
PATH = "/v1beta/models/gemini-bad:generateContent"
USER = {"role": "user", "parts": [{"text": "hello"}]}


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream(window=1_000_000, api_key=KEY) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def served(gemini: GeminiUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("gemini-bad")
    options = ("--db", str(tmp / "s.db"), "--gemini-upstream", gemini.base_url, "--context-limit", "8192")
    process = ServeProcess(tmp / "home", *options).start()
    try:
        yield process
    finally:
        process.kill()


def post(served: ServeProcess, content: bytes, path: str = PATH) -> httpx.Response:
    headers = {"x-goog-api-key": KEY, "content-type": "application/json"}
    return local_http.post(f"{served.base_url}{path}", content=content, headers=headers, timeout=30)


def google_error(response: httpx.Response) -> dict[str, Any]:
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "status"} and error["code"] == response.status_code
    assert "Traceback" not in error["message"]
    return dict(error)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}', "not valid JSON"),
        (b'{"contents": {"role": "user"}}', "contents: must be an array"),
        (b'{"contents": [{"role": "wizard", "parts": [{"text": "hi"}]}]}', "unknown role 'wizard'"),
        (b'{"contents": [{"role": "user", "parts": "hi"}]}', "contents.0.parts"),
        (b'{"contents": [{"role": "user", "parts": [{"text": 42}]}]}', "contents.0.parts.0.text"),
        (b'{"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]}', "belongs to a 'model'"),
        (b"[1, 2]", "JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels deep at [0][0][0]"),
    ],
    ids=["truncated", "not-array", "role", "parts", "text", "call-in-user", "array-body", "deep-nesting"],
)
def test_bad_bodies_get_googles_400(served: ServeProcess, content: bytes, says: str) -> None:
    response = post(served, content)
    assert response.status_code == 400
    error = google_error(response)
    assert error["status"] == "INVALID_ARGUMENT" and says in error["message"]


def test_a_function_response_with_no_call_is_passed_to_gemini_to_judge(
    served: ServeProcess, gemini: GeminiUpstream
) -> None:
    orphan = {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a"}}}]}
    response = post(
        served, json.dumps({"contents": [USER, {"role": "model", "parts": [{"text": "ok"}]}, orphan]}).encode()
    )
    assert response.status_code == 400
    assert "function response parts" in google_error(response)["message"]  # Gemini's own words, verbatim
    assert gemini.exchanges[-1].body["contents"][2] == orphan


def test_unknown_parts_deep_values_and_huge_inputs_go_up_as_they_came(
    served: ServeProcess, gemini: GeminiUpstream
) -> None:
    deep: Any = "leaf"
    for _ in range(60):  # the body, generationConfig, then 60 levels: within the cap (server/limits.py)
        deep = {"d": deep}
    odd = {"executableCode": {"language": "PYTHON", "code": "print(1)"}, "videoMetadata": {"fps": 2}}
    user = {
        "role": "user",
        "parts": [{"text": "x" * 2_000_000}, odd, {"inlineData": {"mimeType": "image/png", "data": "QUJD"}}],
    }
    body = {"contents": [user], "generationConfig": {"responseSchema": deep}, "safetySettings": [{"x": 1}]}
    raw = json.dumps(body).encode()
    response = post(served, raw)
    assert response.status_code == 200, response.text
    assert json.dumps(gemini.exchanges[-1].body).encode() == raw  # byte for byte: nothing to compact yet


def test_over_the_window_the_upstream_refusal_comes_back_and_the_next_request_works(
    served: ServeProcess, gemini: GeminiUpstream
) -> None:
    too_big = {"contents": [{"role": "user", "parts": [{"text": "y " * 2_100_000}]}]}
    response = post(served, json.dumps(too_big).encode())
    assert response.status_code == 400 and "exceeds the maximum number of tokens" in google_error(response)["message"]
    assert post(served, json.dumps({"contents": [USER]}).encode()).status_code == 200


def test_other_model_methods_pass_through_to_gemini_only(served: ServeProcess, gemini: GeminiUpstream) -> None:
    response = post(served, b'{"content": {"parts": [{"text": "hi"}]}}', "/v1beta/models/gemini-bad:embedContent")
    assert gemini.exchanges[-1].path == "/v1beta/models/gemini-bad:embedContent"
    assert gemini.exchanges[-1].headers["x-goog-api-key"] == KEY
    assert response.status_code == 400  # the scripted upstream has no embedContent: its answer, verbatim


# ---------------------------------------------------------------------- the format itself


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def call(name: str, **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": {}, **extra}}


def answer(name: str, **extra: Any) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": name}, **extra}}


def test_responses_pair_by_id_then_name_then_order() -> None:
    fmt = GeminiFormat()
    contents = [
        user({"text": "go"}),
        model(call("a", id="x1"), call("b"), call("b")),
        user(answer("b"), answer("zzz"), answer("a", id="x1")),
    ]
    history = fmt.history({"contents": contents})
    assert history[1][CALLS_KEY] == ["x1", "call-1-1", "call-1-2"]
    assert history[2][CALLS_KEY] == ["call-1-1", "call-1-2", "x1"]
    tools = fmt.convert(history[2])
    assert [(t["tool_call_id"], t["name"]) for t in tools] == [("call-1-1", "b"), ("call-1-2", "zzz"), ("x1", "a")]
    assert fmt.passthrough_reason({"contents": contents}) is None
    assert fmt.passthrough_reason({"contents": [*contents[:2], user(answer("b"))]}) == "unpaired_function_parts"


def test_signatures_stay_on_their_parts_and_the_marker_is_a_part_of_its_own() -> None:
    fmt = GeminiFormat()
    signed = model(
        {"text": "thinking", "thought": True, "thoughtSignature": "T"}, {**call("ls"), "thoughtSignature": "S"}
    )
    history = fmt.history({"contents": [user({"text": "go"}), signed, user(answer("ls"))]})
    marker = fmt.render({"role": "assistant", "content": "summary"})
    assert marker == {"role": "model", "parts": [{"text": "summary"}]}
    merged = fmt.normalize({}, [history[0], marker, history[1], history[2]])
    assert [c["role"] for c in merged] == ["user", "model", "user"]
    assert merged[1]["parts"] == [{"text": "summary"}, *signed["parts"]]
    sent = json.loads(fmt.body({"x": 1}, merged))
    assert sent["x"] == 1 and all(CALLS_KEY not in c for c in sent["contents"])
    written = fmt.render(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "i", "function": {"name": "f", "arguments": "{}"}}]}
    )
    assert written["parts"][0]["thoughtSignature"] == PLACEHOLDER_SIGNATURE
    assert fmt.view_problem(merged) is None
    assert fmt.view_problem([history[0], signed, user({"text": "and?"})]) is not None  # an unanswered call


def test_usage_metadata_of_a_response_a_chunk_and_a_streamed_array() -> None:
    fmt = GeminiFormat()
    usage = {"usageMetadata": {"promptTokenCount": 900, "cachedContentTokenCount": 800}}
    assert fmt.prompt_tokens(usage) == 900
    assert fmt.prompt_tokens([{"usageMetadata": {"promptTokenCount": 5}}, usage]) == 900
    assert fmt.prompt_tokens({"usageMetadata": {"cachedContentTokenCount": 7}}) == 7
    assert fmt.prompt_tokens({"candidates": []}) is None
