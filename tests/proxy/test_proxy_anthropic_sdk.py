"""The official ``anthropic`` SDK streaming a 36-step tool loop through a real ``microcompact serve`` process,
shaped like Claude Code (a ``system``-role environment entry with an extra field, signed and redacted
thinking, a breakpoint that moves to the newest message), with the server killed (SIGKILL) halfway and
started again on the same store. The session has no header: its key is the digest of the system prompt
and first message, which the new process must find again. Checked at both ends of the wire as in
``test_proxy_claude_code``; the in-process SDK loops of ``test_server_anthropic`` cover the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.anthropic_contract import marker_texts, request_errors
from support.http_tap import TapRelay
from support.lazy_sdk import lazy
from support.numbered_steps import NumberedSteps
from support.serve_process import ServeProcess
from support.stored_session import stored_session_errors
from upstream import ScriptedUpstream

anthropic = lazy("anthropic")

pytestmark = pytest.mark.slow

STEPS = 36
KILL_AFTER = 18  # requests answered by the first server
LINES = 1000  # 8 KB of output a step, about 2K tokens
CONTEXT_LIMIT = 32_768
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: sdk-e2e"},
    {"type": "text", "text": "You are an agent that runs shell commands.", "cache_control": EPHEMERAL},
]
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
HEAD = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>Attribute commits to the user.</system-reminder>"},
            {"type": "text", "text": "Run the numbered steps."},
        ],
    },
    {"role": "system", "content": "Working directory: /work\nPlatform: linux", "output_config": {"effort": "medium"}},
]


def run_command(command: str) -> str:
    """What ``seq A B`` prints: the tool, run by the loop itself."""
    _, first, last = command.split()
    return "\n".join(str(n) for n in range(int(first), int(last) + 1))


def with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    """The newest message as Claude Code sends it: its last block marked (a string becomes one text block)."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content]
    blocks[-1]["cache_control"] = EPHEMERAL
    return {**message, "content": blocks}


def tool_loop(client: anthropic.Anthropic, messages: list[dict[str, Any]], restart: Any) -> str:
    """Call the model, run its Bash calls, send the results, until it answers in text; ``restart`` runs
    between two requests after ``KILL_AFTER`` of them."""
    for n in range(STEPS + 1):
        if n == KILL_AFTER:
            restart()
        request = [*messages[:-1], with_breakpoint(messages[-1])]
        with client.messages.stream(
            model="claude-e2e", max_tokens=4096, system=SYSTEM, tools=TOOLS, messages=request
        ) as stream:
            reply = stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            return "".join(b.text for b in reply.content if b.type == "text")
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": run_command(c.input["command"])} for c in calls
        ]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the loop did not end")


def test_sdk_tool_loop_through_serve_survives_a_kill(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script = NumberedSteps("s", STEPS, lines=LINES)
    db, home = tmp_path / "sessions.db", tmp_path / "mchome"
    options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT))
    served = [ServeProcess(home, *options, "--log", str(tmp_path / "proxy.log")).start()]
    messages = [dict(m) for m in HEAD]
    with TapRelay(served[0].port) as tap:

        def restart() -> None:
            served[0].kill()
            served.append(ServeProcess(home, *options, "--log", str(tmp_path / "proxy.log")).start())
            tap.target_port = served[1].port

        try:
            client = anthropic.Anthropic(base_url=tap.base_url, api_key="sk-ant-sdk-e2e", max_retries=0)
            final = tool_loop(client, messages, restart)
            assert served[1].stop() == 0
        finally:
            for process in served:
                process.kill()
        exchanges = tap.exchanges()

    assert final == "Run s: all steps are done."
    assert [e.path for e in exchanges] == [r.path for r in upstream.requests] == ["/v1/messages"] * (STEPS + 1)
    sessions = set()
    for n, (sent, received) in enumerate(zip(exchanges, upstream.requests, strict=True)):
        assert received.status == 200 and sent.response_body == bytes(received.response), f"request {n}"
        assert request_errors(json.loads(sent.request_body), received.body) == [], f"request {n}"
        sessions.add(sent.response_headers["x-microcompact-session"])
    assert len(sessions) == 1, "the digest of the head named the same session in both processes"
    compacted = [r for r in upstream.requests if marker_texts(r.messages)]
    assert len(compacted) >= STEPS // 2
    assert (
        upstream.prompt_tokens(upstream.requests[-1].body)
        < upstream.prompt_tokens(json.loads(exchanges[-1].request_body)) / 2
    )
    before_kill = marker_texts(upstream.requests[KILL_AFTER - 1].messages)
    assert before_kill, "the killed server had compacted"
    assert stored_session_errors(db, sessions.pop(), len(messages) - 1, before_kill) == []
