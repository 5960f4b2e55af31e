"""The scripted upstream (tests/upstream/) against the real openai and anthropic SDKs.

The proxy's tests trust this server to speak both APIs exactly; these tests are what earns that trust:
the official clients parse its JSON and SSE (text, tool calls, thinking with signatures, usage), retry on
its 429s, and fail the way they fail in production on its garbage and cut streams.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support import local_http
from support.lazy_sdk import lazy
from upstream import (
    PromptCache,
    RedactedThinking,
    Reply,
    ScriptedUpstream,
    Text,
    Thinking,
    ToolCall,
    disconnect,
    error,
    garbage,
    hang,
    prompt_tokens,
    text,
)
from upstream.scripts import ToolLoop, seq_command, tool_results

anthropic = lazy("anthropic")
openai = lazy("openai")

USER = [{"role": "user", "content": "Count the files."}]
THINKING_REPLY = Reply(
    (
        Thinking("The user wants a count; I should list the directory first.", "EqQBCkgIARABGAIiQL1signature=="),
        RedactedThinking("EmwKAhgBEgy3redacted"),
        Text("Let me list the directory."),
        ToolCall("Bash", {"command": "ls -la | wc -l", "description": "Count entries"}),
    )
)


def anthropic_client(upstream: ScriptedUpstream, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=upstream.base_url, api_key="sk-ant-test", **{"max_retries": 0, **options})


def openai_client(upstream: ScriptedUpstream, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=upstream.openai_base_url, api_key="sk-test", **{"max_retries": 0, **options})


def bash_tool_anthropic() -> dict[str, Any]:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    return {"name": "Bash", "description": "Run a shell command.", "input_schema": schema}


def bash_tool_openai() -> dict[str, Any]:
    tool = bash_tool_anthropic()
    function = {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]}
    return {"type": "function", "function": function}


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_plain_message_with_thinking_and_tool_use(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(THINKING_REPLY)
    message = anthropic_client(upstream).messages.create(model="claude-test", max_tokens=1024, messages=USER)

    assert [b.type for b in message.content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    thinking, redacted, said, call = message.content
    assert thinking.type == "thinking" and thinking.signature == "EqQBCkgIARABGAIiQL1signature=="
    assert redacted.type == "redacted_thinking" and redacted.data == "EmwKAhgBEgy3redacted"
    assert said.type == "text" and said.text == "Let me list the directory."
    assert call.type == "tool_use" and call.name == "Bash" and call.input["command"] == "ls -la | wc -l"
    assert message.stop_reason == "tool_use" and message.model == "claude-test"
    sent = upstream.requests[-1]
    assert message.usage.input_tokens == prompt_tokens(sent.body) == upstream.prompt_tokens(sent.body)
    assert message.usage.output_tokens > 0
    assert sent.usage == message.usage.model_dump(exclude_none=True)


def test_anthropic_stream_events_rebuild_the_same_message(upstream: ScriptedUpstream) -> None:
    client = anthropic_client(upstream)
    upstream.enqueue(THINKING_REPLY, THINKING_REPLY)
    plain = client.messages.create(model="claude-test", max_tokens=1024, messages=USER)
    seen: list[str] = []
    with client.messages.stream(model="claude-test", max_tokens=1024, messages=USER) as stream:
        for event in stream:
            seen.append(event.type if event.type not in ("content_block_delta",) else event.delta.type)
        streamed = stream.get_final_message()

    def blocks(message: Any) -> list[dict[str, Any]]:
        return [b.model_dump(exclude={"id", "parsed_output"}) for b in message.content]  # ids name the request

    assert blocks(streamed) == blocks(plain)
    assert streamed.stop_reason == "tool_use"
    assert streamed.usage.input_tokens == plain.usage.input_tokens
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    for kind in ("message_start", "thinking_delta", "signature_delta", "text_delta", "input_json_delta"):
        assert kind in seen
    assert seen[-1] == "message_stop"
    raw = upstream.requests[-1].response.decode()
    names = [line.removeprefix("event: ") for line in raw.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[2] == "ping" and names[-2:] == ["message_delta", "message_stop"]


def test_anthropic_tool_loop_runs_the_scripted_iterations(upstream: ScriptedUpstream) -> None:
    upstream.script = ToolLoop(iterations=6)
    client = anthropic_client(upstream)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    for _ in range(20):
        with client.messages.stream(
            model="claude-test", max_tokens=1024, messages=messages, tools=[bash_tool_anthropic()]
        ) as stream:
            reply = stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        output = "\n".join(str(n) for n in range(100))
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": output} for c in calls]
        messages.append({"role": "user", "content": results})

    assert reply.content[-1].type == "text" and reply.content[-1].text == "All steps are done."
    requests = upstream.generation_requests()
    assert len(requests) == 7
    assert [tool_results(r.messages) for r in requests] == list(range(7))
    calls_made = [b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    commands = [b["input"]["command"] for b in calls_made]
    assert commands == [seq_command(i) for i in range(6)]
    sizes = [prompt_tokens(r.body) for r in requests]
    assert sizes == sorted(sizes) and len(set(sizes)) == 7  # usage grows with the history


def test_anthropic_prompt_cache_reads_what_an_earlier_request_wrote(upstream: ScriptedUpstream) -> None:
    client = anthropic_client(upstream)
    system = [{"type": "text", "text": "You are a test agent. " * 50, "cache_control": {"type": "ephemeral"}}]
    first = client.messages.create(model="claude-test", max_tokens=10, system=system, messages=USER)  # type: ignore[arg-type]
    history = [*USER, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "And now?"}]
    second = client.messages.create(model="claude-test", max_tokens=10, system=system, messages=history)  # type: ignore[arg-type]

    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    total = second.usage.input_tokens + second.usage.cache_read_input_tokens
    assert total == prompt_tokens(upstream.requests[-1].body)


def test_prompt_cache_follows_a_breakpoint_that_moves_to_the_newest_message() -> None:
    """Claude Code's pattern: the breakpoint sits on the newest block; the next request finds the old prefix
    within the 20-block lookback, and once more than 20 blocks were added, only the system prefix."""
    cache = PromptCache()
    system = [{"type": "text", "text": "rules " * 100, "cache_control": {"type": "ephemeral"}}]
    marked = {"type": "ephemeral"}
    first = {
        "system": system,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "go", "cache_control": marked}]}],
    }
    one = cache.usage(first, overhead=10)
    history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]
    second = {
        "system": system,
        "messages": [
            *history,
            {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": marked}]},
        ],
    }
    two = cache.usage(second, overhead=10)

    assert (one.cache_read_input_tokens, one.input_tokens) == (0, 10)
    assert two.cache_read_input_tokens == one.total - 10  # the string "go" is the same block as before
    assert two.cache_creation_input_tokens == two.total - 10 - two.cache_read_input_tokens
    padding = [{"role": "user", "content": [{"type": "text", "text": str(i)} for i in range(25)]}]
    far = {
        "system": system,
        "messages": [
            *history,
            *padding,
            {"role": "assistant", "content": [{"type": "text", "text": "x", "cache_control": marked}]},
        ],
    }
    three = cache.usage(far, overhead=10)
    system_only = cache.usage({"system": system, "messages": []}, overhead=0).total
    assert three.cache_read_input_tokens == system_only


def test_gzip_json_is_decoded_by_the_sdk_and_recorded_compressed() -> None:
    with ScriptedUpstream(gzip_json=True) as upstream:
        message = anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=USER)
        sent = upstream.requests[-1]
        assert message.content[0].text == "Scripted reply to request 1."  # type: ignore[union-attr]
        assert sent.response_headers["content-encoding"] == "gzip" and sent.response.startswith(b"\x1f\x8b")
        assert int(sent.response_headers["content-length"]) == len(sent.response)
        assert json.loads(sent.response_text)["id"] == message.id
        stream = list(openai_client(upstream).chat.completions.create(model="gpt-test", messages=USER, stream=True))
        assert stream and "content-encoding" not in upstream.requests[-1].response_headers  # SSE is never gzipped


def test_anthropic_count_tokens_and_models(upstream: ScriptedUpstream) -> None:
    client = anthropic_client(upstream)
    counted = client.messages.count_tokens(model="claude-test", messages=USER)
    assert counted.input_tokens == prompt_tokens({"messages": USER})
    models = client.models.list()
    assert [m.id for m in models.data] == [upstream.model]
    assert [r.path for r in upstream.requests] == ["/v1/messages/count_tokens", "/v1/models"]


def test_anthropic_request_is_recorded_with_headers_and_beta_query(upstream: ScriptedUpstream) -> None:
    client = anthropic_client(upstream)
    client.messages.create(
        model="claude-test",
        max_tokens=10,
        messages=USER,
        extra_query={"beta": "true"},
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
    )
    sent = upstream.requests[-1]
    assert sent.path == "/v1/messages" and sent.query == "beta=true" and sent.api == "anthropic"
    # anthropic 2.x sends the key as a bearer token; older SDKs and Claude Code send x-api-key
    key = sent.headers.get("x-api-key") or sent.headers["authorization"].removeprefix("Bearer ")
    assert key == "sk-ant-test"
    assert sent.headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert sent.headers["anthropic-version"]
    assert sent.body["messages"] == USER and json.loads(sent.raw) == sent.body
    assert sent.status == 200 and sent.completed


def test_anthropic_rejects_a_broken_tool_pair_like_the_api(upstream: ScriptedUpstream) -> None:
    broken = [
        *USER,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": "no result here"},
    ]
    with pytest.raises(anthropic.BadRequestError, match="`tool_use` ids were found without `tool_result`"):
        anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=broken)  # type: ignore[arg-type]


def test_anthropic_rejects_more_than_four_cache_breakpoints(upstream: ScriptedUpstream) -> None:
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    messages = [{"role": "user", "content": [marked] * 5}]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
        anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=messages)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- OpenAI


def test_openai_plain_completion_with_tool_call(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Reply((Text("Listing."), ToolCall("Bash", {"command": "ls"}))))
    completion = openai_client(upstream).chat.completions.create(
        model="gpt-test", messages=USER, tools=[bash_tool_openai()]
    )  # type: ignore[list-item]
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Listing."
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "Bash" and json.loads(call.function.arguments) == {"command": "ls"}  # type: ignore[union-attr]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == prompt_tokens(upstream.requests[-1].body)


def test_openai_stream_with_usage_chunk(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Reply((Text("Listing the directory now."), ToolCall("Bash", {"command": "ls -la /tmp"}))))
    stream = openai_client(upstream).chat.completions.create(
        model="gpt-test", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    arguments = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function
    )
    assert content == "Listing the directory now."
    assert json.loads(arguments) == {"command": "ls -la /tmp"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == prompt_tokens(upstream.requests[-1].body)
    assert all(c.usage is None for c in chunks[:-1])
    assert upstream.requests[-1].response.endswith(b"data: [DONE]\n\n")


def test_openai_stream_without_include_usage_has_no_usage_chunk(upstream: ScriptedUpstream) -> None:
    chunks = list(openai_client(upstream).chat.completions.create(model="gpt-test", messages=USER, stream=True))
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
    assert b'"usage"' not in upstream.requests[-1].response


def test_openai_tool_loop_over_many_iterations(upstream: ScriptedUpstream) -> None:
    upstream.script = ToolLoop(iterations=12)
    client = openai_client(upstream)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    for _ in range(30):
        message = client.chat.completions.create(model="gpt-test", messages=messages, tools=[bash_tool_openai()])  # type: ignore[arg-type]
        reply = message.choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "1\n2\n3"})
    assert reply.content == "All steps are done."
    assert len(upstream.generation_requests()) == 13


def test_openai_rejects_tool_call_without_result(upstream: ScriptedUpstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    broken = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "?"}]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: call_1"):
        openai_client(upstream).chat.completions.create(model="gpt-test", messages=broken)  # type: ignore[arg-type]


def test_openai_models(upstream: ScriptedUpstream) -> None:
    assert [m.id for m in openai_client(upstream).models.list()] == [upstream.model]


# --------------------------------------------------------------------------- faults and latency


@pytest.mark.parametrize("status", [500, 529])
def test_error_status_reaches_the_sdk_in_provider_shape(upstream: ScriptedUpstream, status: int) -> None:
    upstream.enqueue(error(status, message="boom"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=USER)
    assert raised.value.status_code == status
    assert raised.value.body == {
        "type": "error",
        "error": {"type": raised.value.body["error"]["type"], "message": "boom"},
    }  # type: ignore[index]
    upstream.enqueue(error(500))
    with pytest.raises(openai.InternalServerError):
        openai_client(upstream).chat.completions.create(model="gpt-test", messages=USER)


def test_429_retry_after_is_honoured_by_the_sdk_retry(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(error(429, retry_after=0.2), text("after the retry"))
    started = time.monotonic()
    message = anthropic_client(upstream, max_retries=1).messages.create(
        model="claude-test", max_tokens=10, messages=USER
    )
    assert message.content[0].text == "after the retry"  # type: ignore[union-attr]
    assert time.monotonic() - started >= 0.2
    first, second = upstream.generation_requests()
    assert first.status == 429 and first.response_headers["retry-after"] == "0.2"
    assert second.headers["x-stainless-retry-count"] == "1"


def test_garbage_body_fails_to_parse(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(garbage(), garbage())
    with pytest.raises(json.JSONDecodeError):
        anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=USER)
    with pytest.raises(json.JSONDecodeError):
        openai_client(upstream).chat.completions.create(model="gpt-test", messages=USER)


def test_cut_stream_breaks_the_client_mid_stream(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(disconnect(after_events=4, reply=THINKING_REPLY))
    received: list[str] = []
    with pytest.raises(Exception, match="incomplete chunked read"):  # the SDK's own httpx2 error, unwrapped
        for event in anthropic_client(upstream).messages.create(
            model="claude-test", max_tokens=10, messages=USER, stream=True
        ):
            received.append(event.type)
    assert received[0] == "message_start" and "message_stop" not in received
    cut = upstream.requests[-1]
    assert not cut.completed and cut.response.count(b"event: ") == 4

    upstream.enqueue(disconnect(after_events=2))
    with pytest.raises(openai.APIConnectionError):
        list(openai_client(upstream).chat.completions.create(model="gpt-test", messages=USER, stream=True))


def test_cut_json_body_is_a_connection_error(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(disconnect())
    with pytest.raises(anthropic.APIConnectionError):
        anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=USER)


def test_latency_and_event_delay(upstream: ScriptedUpstream) -> None:
    upstream.latency, upstream.event_delay = 0.2, 0.02
    started = time.monotonic()
    with local_http.stream(
        "POST",
        f"{upstream.base_url}/v1/messages",
        json={"model": "m", "max_tokens": 5, "messages": USER, "stream": True},
    ) as response:
        chunks = iter(response.iter_raw())
        next(chunks)
        first_byte = time.monotonic() - started
        body = b"".join(chunks)
    total = time.monotonic() - started
    events = upstream.requests[-1].response.count(b"event: ")
    assert first_byte >= 0.2
    assert total >= 0.2 + 0.02 * (events - 1) * 0.9
    assert body.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_hang_trips_the_client_timeout(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(hang(5))
    with pytest.raises(anthropic.APITimeoutError):
        anthropic_client(upstream, timeout=0.3).messages.create(model="claude-test", max_tokens=10, messages=USER)


def test_raw_bytes_received_are_the_bytes_recorded(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(THINKING_REPLY)
    payload = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
    response = local_http.post(f"{upstream.base_url}/v1/messages", json=payload)
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.content == bytes(upstream.requests[-1].response)


def test_bad_json_request_gets_a_provider_shaped_400(upstream: ScriptedUpstream) -> None:
    response = local_http.post(
        f"{upstream.base_url}/v1/messages", content=b'{"model": ', headers={"anthropic-version": "x"}
    )
    assert response.status_code == 400 and response.json()["type"] == "error"
    response = local_http.post(f"{upstream.openai_base_url}/chat/completions", content=b"[1, 2")
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests[-1].body is None and upstream.requests[-1].raw == b"[1, 2"


def test_a_client_that_leaves_mid_stream_is_noticed_and_the_stream_stops(upstream: ScriptedUpstream) -> None:
    upstream.event_delay = 0.05
    upstream.enqueue(Reply((Text("x" * 2000),)))  # 125 text deltas: about 6 s at this pace
    payload = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
    with local_http.stream("POST", f"{upstream.base_url}/v1/messages", json=payload) as response:
        next(response.iter_raw())
    sent = upstream.requests[-1]
    deadline = time.monotonic() + 3
    while not sent.client_disconnected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sent.client_disconnected and not sent.completed
    size = len(sent.response)
    time.sleep(0.2)
    assert len(sent.response) == size  # nothing more was generated


def test_a_client_that_reads_to_the_end_is_not_marked_as_leaving(upstream: ScriptedUpstream) -> None:
    list(anthropic_client(upstream).messages.create(model="claude-test", max_tokens=10, messages=USER, stream=True))
    time.sleep(0.1)
    assert upstream.requests[-1].completed and not upstream.requests[-1].client_disconnected


def test_runs_as_its_own_process(tmp_path: Path) -> None:
    tests_dir = Path(__file__).parents[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "upstream", "--tool-loop", "2"],
        cwd=tests_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), process.stderr.read() if process.stderr else line
        base_url = line.split()[-1]
        client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0)
        message = client.messages.create(model="m", max_tokens=10, messages=USER, tools=[bash_tool_anthropic()])  # type: ignore[list-item]
        assert message.stop_reason == "tool_use" and message.content[-1].input["command"] == seq_command(0)  # type: ignore[union-attr]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_process_reports_an_unreadable_transcript(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "upstream", "--replay", str(tmp_path / "missing.jsonl")],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("upstream: cannot read transcript") and "Traceback" not in done.stderr


def test_keep_bounds_the_records_but_not_the_numbering() -> None:
    with ScriptedUpstream(keep=2) as upstream:
        client = openai_client(upstream)
        for _ in range(5):
            client.chat.completions.create(model="gpt-test", messages=USER)
        assert [r.number for r in upstream.requests] == [4, 5]
        assert upstream.requests[-1].response_text.startswith('{"id":"chatcmpl-00000000000000000005"')
