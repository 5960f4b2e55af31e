"""The official openai SDK through ``serve``: a tool loop over many iterations and turns, compacted on the
way up, every forwarded request keeping the contract, answers byte-identical, and a restart of the proxy
resuming the same session from the SQLite store."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.telemetry import setup_file_logging
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from support.server_contract import compacted, contract_errors
from support.session_ids import named
from upstream import ScriptedUpstream, text, tool_call

openai = lazy("openai")

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
SESSION = {"X-Microcompact-Session": "report-me"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def tool_output(turn: int, step: int) -> str:
    return "\n".join(f"turn {turn} step {step} line {n}: " + "data " * 12 for n in range(40))


def run_turn(
    client: openai.OpenAI, upstream: ScriptedUpstream, messages: list[dict[str, Any]], turn: int, steps: int, **kw: Any
) -> list[str]:
    """One user turn of ``steps`` tool calls and a final answer; returns the session header of each reply."""
    upstream.enqueue(*[tool_call("Bash", {"command": f"step {turn}.{s}"}) for s in range(steps)], text(f"done {turn}"))
    messages.append({"role": "user", "content": f"Turn {turn}: please run {steps} steps."})
    sessions = []
    while True:
        raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=messages, tools=TOOLS, **kw)
        sent = upstream.generation_requests()[-1]
        assert raw.http_response.content == bytes(sent.response)
        assert contract_errors(messages, sent.body["messages"]) == []
        sessions.append(raw.headers["x-microcompact-session"])
        reply = raw.parse().choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            return sessions
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_output(turn, len(sessions))})


def test_tool_loop_is_compacted_and_resumes_after_a_restart(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    messages: list[dict[str, Any]] = [SYSTEM]
    with ProxyServer(upstream.base_url, db, context_limit=8192) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test", max_retries=0)
        sessions = []
        for turn in range(4):
            sessions += run_turn(client, upstream, messages, turn, steps=4)
            proxy.settle()
    assert len(set(sessions)) == 1
    forwarded = [r.body["messages"] for r in upstream.generation_requests()]
    assert any(compacted(m) for m in forwarded), "a small window over 20 requests must compact"
    assert len(forwarded[-1]) < len(messages) - 1

    with ProxyServer(upstream.base_url, db, context_limit=8192) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test", max_retries=0)
        after = run_turn(client, upstream, messages, 4, steps=2)
    assert set(after) == set(sessions), "the restarted proxy continues the same session"
    resumed = upstream.generation_requests()[-3].body["messages"]
    assert compacted(resumed), "the compacted view survives the restart"


def test_streaming_tool_loop_keeps_the_contract(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [SYSTEM]
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=8192) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-test", max_retries=0)
        for turn in range(3):
            upstream.enqueue(*[tool_call("Bash", {"command": f"s{turn}.{s}"}) for s in range(4)], text("done"))
            messages.append({"role": "user", "content": f"Turn {turn}."})
            while True:
                stream = client.chat.completions.create(
                    model="gpt-test",
                    messages=messages,
                    tools=TOOLS,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                content, calls = "", {}
                for chunk in stream:
                    for choice in chunk.choices:
                        content += choice.delta.content or ""
                        for tc in choice.delta.tool_calls or []:
                            entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                            entry["name"] += (tc.function and tc.function.name) or ""
                            entry["arguments"] += (tc.function and tc.function.arguments) or ""
                sent = upstream.generation_requests()[-1]
                assert contract_errors(messages, sent.body["messages"]) == []
                assistant: dict[str, Any] = {"role": "assistant", "content": content or None}
                if calls:
                    assistant["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in calls.values()
                    ]
                messages.append(assistant)
                if not calls:
                    break
                for c in calls.values():
                    messages.append(
                        {"role": "tool", "tool_call_id": c["id"], "content": tool_output(turn, len(messages))}
                    )
            proxy.settle()
        session = proxy.router.sessions()[0]
        assert session.counter.overhead != 0, "the stream's usage calibrated the session"
    assert any(compacted(r.body["messages"]) for r in upstream.generation_requests())


@pytest.mark.parametrize("header", ["X-Microcompact-Session", "X-Claude-Code-Session-Id"])
def test_the_clients_session_header_names_the_session(upstream: ScriptedUpstream, tmp_path: Path, header: str) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        client = openai.OpenAI(
            base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, default_headers={header: "my-session-1"}
        )
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert proxy.proxy.settings.salt_file is not None
        assert raw.headers["x-microcompact-session"] == named("my-session-1", proxy.proxy.settings.salt_file, "k")
        assert header.lower() not in upstream.requests[-1].headers or header.startswith("X-Claude")


def test_report_reads_the_proxys_telemetry(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    log_file = tmp_path / "proxy.log"
    handler = setup_file_logging(log_file)
    try:
        messages: list[dict[str, Any]] = [SYSTEM]
        with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=8192) as proxy:
            client = openai.OpenAI(
                base_url=f"{proxy.base_url}/v1", api_key="sk-secret-77", max_retries=0, default_headers=SESSION
            )
            for turn in range(3):
                run_turn(client, upstream, messages, turn, steps=4)
                proxy.settle()
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    assert "sk-secret-77" not in log_file.read_text(encoding="utf-8")
    result = CliRunner().invoke(app, ["report", str(log_file), "--per-session", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "report-me" in json.dumps(report) and '"absorbed"' in json.dumps(report)


def test_concurrent_conversations_under_one_session_id_each_get_their_own_branch(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """Like an agent's sub-agents: several histories at once under one client session id."""

    def conversation(client: openai.OpenAI, n: int) -> set[str]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"Sub-agent {n}."}]
        seen = set()
        for step in range(3):
            messages.append({"role": "user", "content": f"Agent {n}, step {step}."})
            raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
            seen.add(raw.headers["x-microcompact-session"])
            messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        return seen

    with ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, default_headers=SESSION)
        with ThreadPoolExecutor(max_workers=6) as pool:
            branches = list(pool.map(lambda n: conversation(client, n), range(6)))
        proxy.settle()
        stored = {s["id"] for s in proxy.store.list_sessions()}
    assert all(len(b) == 1 for b in branches), "each conversation stays on its branch"
    assert len(set().union(*branches)) == 6 and stored == set().union(*branches)
    for request in upstream.generation_requests():
        n = request.messages[0]["content"].removeprefix("Sub-agent ").rstrip(".")
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        assert users and all(u.startswith(f"Agent {n}, ") for u in users), "one conversation's messages only"
