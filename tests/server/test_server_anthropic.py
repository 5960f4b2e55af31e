"""The official anthropic SDK through ``serve``: tool_use / tool_result loops with signed thinking blocks,
compacted on the way up; every forwarded request keeps the contract and the API's own rules (tool pairs in
adjacent messages, alternating roles, at most 4 cache breakpoints), kept messages go out exactly as the
client sent them, and a restart resumes the same session."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx

from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from support.server_contract import compacted, contract_errors, is_marker
from upstream import RedactedThinking, Reply, ScriptedUpstream, Text, Thinking, ToolCall, text

anthropic = lazy("anthropic")

SYSTEM = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
REMINDER = "<system-reminder>Keep the todo list current.</system-reminder>"


def tool_output(turn: int, step: int) -> str:
    return "\n".join(f"turn {turn} step {step} line {n}: " + "bytes " * 12 for n in range(40))


def step_reply(turn: int, step: int) -> Reply:
    return Reply(
        (
            Thinking(f"Plan for {turn}.{step}.", f"sig-{turn}-{step}=="),
            RedactedThinking(f"EmwKAhgBEgy3redacted-{turn}-{step}"),
            Text(f"Step {step}."),
            ToolCall("Bash", {"command": f"run {turn}.{step}"}),
        )
    )


def with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    """The message with a cache breakpoint on its last block, as Claude Code marks the newest message."""
    blocks = [dict(b) for b in message["content"]]
    blocks[-1]["cache_control"] = {"type": "ephemeral"}
    return {**message, "content": blocks}


def check_api_rules(forwarded: list[dict[str, Any]]) -> None:
    roles = [m["role"] for m in forwarded if m["role"] != "system"]
    assert all(a != b for a, b in itertools.pairwise(roles)), f"roles do not alternate: {roles}"
    for m in forwarded:
        if m["role"] == "assistant" and isinstance(m["content"], list) and m["content"]:
            kinds = [b["type"] for b in m["content"]]
            if "thinking" in kinds:
                assert kinds[:2] == ["thinking", "redacted_thinking"], f"thinking must open the message: {kinds}"


def run_turn(
    client: anthropic.Anthropic, upstream: ScriptedUpstream, messages: list[dict[str, Any]], turn: int, steps: int
) -> list[str]:
    upstream.enqueue(*[step_reply(turn, s) for s in range(steps)], text(f"Turn {turn} done."))
    messages.append({"role": "user", "content": [{"type": "text", "text": f"Turn {turn}: run {steps} steps."}]})
    sessions = []
    while True:
        # Like Claude Code: the newest message carries a cache breakpoint, the system prompt another.
        request = [*messages[:-1], with_breakpoint(messages[-1])]
        raw = client.messages.with_raw_response.create(
            model="claude-test", max_tokens=1024, system=SYSTEM, tools=TOOLS, messages=request
        )
        sent = upstream.generation_requests()[-1]
        assert sent.status == 200, bytes(sent.response)
        assert raw.http_response.content == bytes(sent.response)
        forwarded = sent.body["messages"]
        assert contract_errors(request, forwarded) == []
        check_api_rules(forwarded)
        assert forwarded[-1] == request[-1], "the newest message (and its breakpoint) goes out as sent"
        sessions.append(raw.headers["x-microcompact-session"])
        reply = raw.parse()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            return sessions
        results: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": c.id, "content": tool_output(turn, len(sessions))} for c in calls
        ]
        messages.append({"role": "user", "content": [*results, {"type": "text", "text": REMINDER}]})


def test_tool_use_loop_with_thinking_is_compacted_and_resumes(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    messages: list[dict[str, Any]] = []
    with ProxyServer(upstream.base_url, db, context_limit=8192) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-ant-test", max_retries=0)
        sessions = []
        for turn in range(4):
            sessions += run_turn(client, upstream, messages, turn, steps=4)
            proxy.settle()
    assert len(set(sessions)) == 1
    requests = upstream.generation_requests()
    assert any(compacted(r.body["messages"]) for r in requests)
    for r in requests:  # every kept message is the client's own, byte for byte (thinking signatures too)
        for m in r.body["messages"]:
            if m["role"] == "assistant" and not is_marker(m):
                signed = [b for b in m["content"] if b["type"] == "thinking"]
                assert all(b["signature"].startswith("sig-") for b in signed)
                redacted = [b for b in m["content"] if b["type"] == "redacted_thinking"]
                assert all(b["data"].startswith("EmwKAhgBEgy3redacted-") for b in redacted)
    with ProxyServer(upstream.base_url, db, context_limit=8192) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-ant-test", max_retries=0)
        after = run_turn(client, upstream, messages, 4, steps=2)
    assert set(after) == set(sessions)
    assert compacted(upstream.generation_requests()[-3].body["messages"])


def test_streaming_with_usage_from_the_stream(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = []
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=8192) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        for turn in range(3):
            upstream.enqueue(*[step_reply(turn, s) for s in range(3)], text("done"))
            messages.append({"role": "user", "content": f"Turn {turn}."})
            while True:
                with client.messages.stream(
                    model="claude-test", max_tokens=1024, system=SYSTEM, tools=TOOLS, messages=messages
                ) as stream:
                    reply = stream.get_final_message()
                sent = upstream.generation_requests()[-1]
                assert sent.status == 200 and contract_errors(messages, sent.body["messages"]) == []
                check_api_rules(sent.body["messages"])
                messages.append(
                    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
                )
                calls = [b for b in reply.content if b.type == "tool_use"]
                if not calls:
                    break
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": c.id, "content": tool_output(turn, len(messages))}
                            for c in calls
                        ],
                    }
                )
            proxy.settle()
        session = proxy.router.sessions()[0]
        assert session.counter.overhead != 0, "message_start's usage (cache reads included) calibrated the session"
    assert any(compacted(r.body["messages"]) for r in upstream.generation_requests())


def test_count_tokens_counts_the_compacted_view(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = []
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=8192) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        for turn in range(3):
            run_turn(client, upstream, messages, turn, steps=4)
            proxy.settle()
        messages.append({"role": "user", "content": "How much context is left?"})
        counted = client.messages.count_tokens(model="claude-test", system=SYSTEM, tools=TOOLS, messages=messages)
        forwarded = upstream.requests[-1]
        assert forwarded.path == "/v1/messages/count_tokens"
        assert compacted(forwarded.body["messages"]) and forwarded.body["messages"][-1] == messages[-1]
        assert counted.input_tokens == upstream.prompt_tokens(forwarded.body)
        full = {"system": SYSTEM, "tools": TOOLS, "messages": messages, "model": "claude-test"}
        assert counted.input_tokens < upstream.prompt_tokens(full)
        # counting changed nothing: the next real request still ends the previous turn
        before = len(upstream.generation_requests())
        upstream.enqueue(text("Plenty."))
        client.messages.create(model="claude-test", max_tokens=10, system=SYSTEM, tools=TOOLS, messages=messages)
        assert len(upstream.generation_requests()) == before + 1


def test_system_entries_images_and_unknown_fields_go_out_as_sent(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Look."}, image], "x-extra": {"kept": True}},
        {"role": "assistant", "content": "I see a picture."},
        {"role": "system", "content": "Mid-conversation instruction."},
        {"role": "user", "content": "Describe it."},
    ]
    with ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        response = local_http.post(
            f"{proxy.base_url}/v1/messages?beta=true",
            json={"model": "claude-test", "max_tokens": 10, "messages": messages},
            headers={"anthropic-version": "2023-06-01", "anthropic-beta": "some-beta-2025", "x-api-key": "k"},
        )
    sent = upstream.generation_requests()[-1]
    assert response.status_code == 200 and response.content == bytes(sent.response)
    assert (
        sent.raw
        == httpx.Request("POST", "/", json={"model": "claude-test", "max_tokens": 10, "messages": messages}).content
    )
    assert sent.query == "beta=true" and sent.headers["anthropic-beta"] == "some-beta-2025"


def test_more_breakpoints_than_the_api_allows_are_trimmed_oldest_first(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    marked = [
        {"role": role, "content": [{"type": "text", "text": f"message {i}", "cache_control": {"type": "ephemeral"}}]}
        for i, role in enumerate(["user", "assistant", "user", "assistant", "user"])
    ]
    with ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        reply = client.messages.create(model="claude-test", max_tokens=10, system=SYSTEM, messages=marked)  # type: ignore[arg-type]
    assert reply.content
    sent = upstream.generation_requests()[-1].body
    kept = [bool(m["content"][0].get("cache_control")) for m in sent["messages"]]
    assert kept == [False, False, True, True, True] and sent["system"] == SYSTEM
