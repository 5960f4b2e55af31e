"""Claude Code itself (``claude -p``, the pinned npm package) against the scripted upstream.

These runs pin down what the real client sends (tests/e2e/README.md) and that the scripted upstream can
drive it through a long tool loop. The proxy's tests reuse ``run_tool_loop`` with the proxy's URL in
place of the upstream's. Skipped, with the reason, when the CLI is not installed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from support.claude_code import ClaudeRun, comparable, pinned_version, run_claude, unavailable_reason
from upstream import RecordedRequest, ScriptedUpstream
from upstream.scripts import ToolLoop, seq_command, tool_results

_missing = unavailable_reason()
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")

LOOP_PROMPT = "Run the numbered steps with the Bash tool until they are done."
ITERATIONS = 32


def run_tool_loop(base_url: str, tmp_path: Path, prompt: str = LOOP_PROMPT, **options: object) -> ClaudeRun:
    """One ``claude -p`` turn against ``base_url`` (the scripted upstream, or the proxy in front of it)."""
    return run_claude(base_url, prompt, workdir=tmp_path / "work", home=tmp_path / "home", **options)  # type: ignore[arg-type]


def cache_breakpoints(body: dict) -> list[str]:
    where = [f"system.{i}" for i, b in enumerate(body["system"]) if b.get("cache_control")]
    for i, message in enumerate(body["messages"]):
        if isinstance(message["content"], list):
            where += [f"messages.{i}.{j}" for j, b in enumerate(message["content"]) if b.get("cache_control")]
    return where


def test_request_shape(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    run = run_tool_loop(upstream.base_url, tmp_path, prompt="Say hello.")
    assert run.ok, run.stderr
    assert run.result is not None and run.result["result"] == "Scripted reply to request 1."
    [sent] = upstream.requests
    assert (sent.method, sent.path, sent.query) == ("POST", "/v1/messages", "beta=true")
    assert sent.headers["x-api-key"] == "sk-ant-e2e-dummy" and "authorization" not in sent.headers
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "claude-code-20250219" in sent.headers["anthropic-beta"].split(",")
    assert sent.headers["x-claude-code-session-id"] == run.result["session_id"]
    assert sent.headers["user-agent"].startswith(f"claude-cli/{pinned_version()} ")
    body = sent.body
    assert body["stream"] is True
    assert json.loads(body["metadata"]["user_id"])["session_id"] == run.result["session_id"]
    assert all(block["type"] == "text" for block in body["system"])
    assert {t["name"] for t in body["tools"]} >= {"Bash", "Read", "Edit", "Write"}
    first = body["messages"][0]
    assert first["role"] == "user" and first["content"][-1] == {"type": "text", "text": "Say hello."}
    assert first["content"][0]["text"].startswith("<system-reminder>")
    assert [m["role"] for m in body["messages"]] == ["user", "system"]  # the environment, as a system message
    assert cache_breakpoints(body) == ["system.1", "system.2", "messages.1.0"]


def assert_history_grows_by_appending(requests: list[RecordedRequest]) -> None:
    """Each request resends the previous one's messages and appends; the content is the same, but the bytes
    of the previous newest message differ (its cache_control moved on; the first time, the environment
    message also turned from a text block into a string), so identity by raw digest would see a rewrite."""
    for before, after in itertools.pairwise(requests):
        resent = after.messages[: len(before.messages)]
        assert comparable(resent) == comparable(before.messages)
        changed = [i for i, (old, new) in enumerate(zip(resent, before.messages, strict=True)) if old != new]
        assert changed == [len(before.messages) - 1]
        assert after.body["system"] == before.body["system"] and after.body["tools"] == before.body["tools"]


@pytest.mark.slow
def test_bash_loop_with_large_outputs(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script = ToolLoop(ITERATIONS, thinking=True)
    run = run_tool_loop(upstream.base_url, tmp_path)

    assert run.ok, run.stderr
    assert run.result is not None and run.result["result"] == "All steps are done."
    assert run.result["num_turns"] == ITERATIONS + 1
    requests = upstream.generation_requests()
    assert len(requests) == len(upstream.requests) == ITERATIONS + 1
    assert [tool_results(r.messages) for r in requests] == list(range(ITERATIONS + 1))
    assert {r.headers["x-claude-code-session-id"] for r in requests} == {run.result["session_id"]}
    assert_history_grows_by_appending(requests)

    last = requests[-1].messages
    calls = [b for m in last if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in last if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"]
    assert [c["input"]["command"] for c in calls] == [seq_command(i) for i in range(ITERATIONS)]
    for step, result in enumerate(results):  # the whole output of every command stayed in the history
        start = step * 1_000_000
        assert result["content"] == "\n".join(str(n) for n in range(start + 1, start + 3001))
    thinking = [b for m in last if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"]
    assert [(b["thinking"], b["signature"]) for b in thinking] == [
        (f"Plan for step {i}.", f"sig-step-{i}") for i in range(1, ITERATIONS + 1)
    ]
    assert upstream.prompt_tokens(requests[-1].body) > 150_000
    # the moving breakpoint still reads the whole previous request from the cache (the baseline a proxy
    # that compacts should stay close to)
    for before, after in itertools.pairwise(requests):
        assert after.usage is not None
        assert after.usage["cache_read_input_tokens"] == upstream.prompt_tokens(before.body) - upstream.overhead


def test_continue_resends_the_history_with_the_new_prompt(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script = ToolLoop(2)
    first = run_tool_loop(upstream.base_url, tmp_path)
    before = upstream.generation_requests()[-1]
    second = run_tool_loop(upstream.base_url, tmp_path, prompt="And one more thing.", continue_session=True)

    assert first.ok and second.ok, second.stderr
    assert first.result is not None and second.result is not None
    assert second.result["session_id"] == first.result["session_id"]
    after = upstream.generation_requests()[-1]
    assert after.headers["x-claude-code-session-id"] == first.result["session_id"]
    final_answer = {"role": "assistant", "content": "All steps are done."}
    new_prompt = {"role": "user", "content": "And one more thing."}
    assert comparable(after.messages) == [*comparable(before.messages), final_answer, new_prompt]
