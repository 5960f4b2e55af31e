"""The google-genai SDK running a long function-calling loop through a real ``microcompact serve`` process in
front of the scripted Gemini upstream (``support.gemini_server``, which refuses prompts over its window and
current-turn calls without their thought signature): ``generate_content`` and ``generate_content_stream``
(SSE). The proxy compacts (a marker upstream, every prompt under the window), the first prompt arrives
verbatim in every request, calls and responses stay paired part for part, signatures are returned as they
came, and the key goes to the Gemini upstream only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import local_http
from support.gemini_server import GeminiUpstream, final_text, markers, numbered_steps, pairing_errors
from support.lazy_sdk import lazy
from support.serve_process import ServeProcess

genai = lazy("google.genai")
types = lazy("google.genai.types")

pytestmark = pytest.mark.slow

STEPS = 30
LINES = 400  # about 2K tokens of output a step
WINDOW = 32_768
MODEL = "gemini-3-pro-e2e"
PROMPT = "Run the numbered steps with run_step, one call a step, and say when all are done."
SYSTEM = "You are an agent that runs numbered steps."
KEY = "gemini-test-key"


def tools() -> list[types.Tool | Any]:
    """The one function the model calls, built in the tests: collecting this file imports no google-genai."""
    declaration = types.FunctionDeclaration(
        name="run_step",
        description="Run one numbered step.",
        parameters_json_schema={
            "type": "object",
            "properties": {"step": {"type": "integer"}, "lines": {"type": "integer"}},
            "required": ["step"],
        },
    )
    return [types.Tool(function_declarations=[declaration])]


def run_step(args: dict[str, Any]) -> str:
    return "\n".join(f"step {args['step']} line {n}: checked" for n in range(int(args.get("lines") or 1)))


@pytest.fixture
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream(script=numbered_steps(STEPS, lines=LINES), window=WINDOW, api_key=KEY) as upstream:
        yield upstream


@pytest.fixture
def served(gemini: GeminiUpstream, tmp_path: Path) -> Iterator[ServeProcess]:
    options: tuple[str, ...] = ("--db", str(tmp_path / "s.db"), "--gemini-upstream", gemini.base_url)
    options += ("--anthropic-upstream", "http://127.0.0.1:9", "--openai-upstream", "http://127.0.0.1:9/v1")
    process = ServeProcess(tmp_path / "home", *options, "--context-limit", str(WINDOW)).start()
    try:
        yield process
    finally:
        process.kill()


def tool_loop(client: genai.Client, stream: bool) -> tuple[str, list[types.Content]]:
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=tools(),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        temperature=0.2,
    )
    contents = [types.Content(role="user", parts=[types.Part(text=PROMPT)])]
    for _ in range(STEPS + 1):
        if stream:
            chunks = list(client.models.generate_content_stream(model=MODEL, contents=contents, config=config))
            parts = [p for c in chunks if c.candidates for p in (c.candidates[0].content.parts or [])]  # type: ignore[union-attr]
        else:
            response = client.models.generate_content(model=MODEL, contents=contents, config=config)
            parts = list(response.candidates[0].content.parts or [])  # type: ignore[index, union-attr]
        contents.append(types.Content(role="model", parts=parts))
        calls = [p.function_call for p in parts if p.function_call is not None]
        if not calls:
            return "".join(p.text or "" for p in parts), contents
        answers = [
            types.Part(
                function_response=types.FunctionResponse(name=c.name, response={"output": run_step(c.args or {})})
            )
            for c in calls
        ]
        contents.append(types.Content(role="user", parts=answers))
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize(
    ("stream", "version"),
    [(False, "v1"), (True, "v1beta")],
    ids=["generate_content-v1", "generate_content_stream-v1beta"],
)
def test_sdk_tool_loop_compacts_through_serve(
    gemini: GeminiUpstream, served: ServeProcess, stream: bool, version: str
) -> None:
    options = types.HttpOptions(base_url=served.base_url, api_version=version)
    client = genai.Client(api_key=KEY, http_options=options)
    final, contents = tool_loop(client, stream)

    assert final == final_text(STEPS + 1)
    requests = gemini.generations()
    assert len(requests) == STEPS + 1
    assert all(r.status == 200 for r in requests), [r.response for r in requests if r.status != 200][:1]
    suffix = ":streamGenerateContent" if stream else ":generateContent"
    assert all(r.path == f"/{version}/models/{MODEL}{suffix}" for r in requests)
    assert all(r.headers.get("x-goog-api-key") == KEY for r in requests)
    compacted = [r for r in requests if markers(r.body)]
    assert len(compacted) >= STEPS // 3, "the loop ran over the window: the proxy folded old steps"
    assert max(r.prompt_tokens for r in requests) < WINDOW
    sent_in_full = json.loads(types.Content.model_validate(contents[0]).model_dump_json(exclude_none=True))
    for n, request in enumerate(requests):
        body = request.body
        assert body["contents"][0]["parts"][0]["text"] == PROMPT, f"request {n}: the first prompt verbatim"
        assert body["contents"][0]["role"] == sent_in_full["role"] == "user"
        assert body["systemInstruction"]["parts"][0]["text"] == SYSTEM
        assert body["tools"][0]["functionDeclarations"][0]["name"] == "run_step"
        assert body["generationConfig"] == {"temperature": 0.2}
        assert pairing_errors(body["contents"]) == [], f"request {n}"
    last = requests[-1].body["contents"]
    assert len(json.dumps(last)) < len(json.dumps([c.model_dump(mode="json") for c in contents])) / 2


def test_count_tokens_answers_for_the_compacted_view(gemini: GeminiUpstream, served: ServeProcess) -> None:
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=served.base_url))
    _, contents = tool_loop(client, stream=False)
    counted = client.models.count_tokens(model=MODEL, contents=contents[:-1])
    forwarded = [e for e in gemini.exchanges if e.path.endswith(":countTokens")]
    assert len(forwarded) == 1 and forwarded[0].status == 200
    assert markers(forwarded[0].body), "countTokens went up with the compacted view"
    assert forwarded[0].body["contents"][0]["parts"][0]["text"] == PROMPT
    assert counted.total_tokens is not None and counted.total_tokens < WINDOW


def test_streamed_json_array_and_query_key_pass_through(gemini: GeminiUpstream, served: ServeProcess) -> None:
    """``streamGenerateContent`` without ``alt=sse`` answers one JSON array, passed back byte for byte; the
    key in ``?key=`` goes to the Gemini upstream and nowhere else."""
    body = {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}
    url = f"{served.base_url}/v1beta/models/{MODEL}:streamGenerateContent?key={KEY}"
    response = local_http.post(url, json=body, timeout=30)
    assert response.status_code == 200, response.text
    chunks = response.json()
    assert isinstance(chunks, list) and chunks[-1]["usageMetadata"]["promptTokenCount"] > 0
    assert response.content == json.dumps(gemini.exchanges[-1].response).encode()
    assert gemini.exchanges[-1].query["key"] == [KEY]
    assert response.headers["x-microcompact-session"]


def test_upstream_errors_come_back_in_googles_shape(gemini: GeminiUpstream, served: ServeProcess) -> None:
    client = genai.Client(api_key="wrong", http_options=types.HttpOptions(base_url=served.base_url))
    with pytest.raises(genai.errors.ClientError) as raised:
        client.models.generate_content(model=MODEL, contents=PROMPT)
    assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
