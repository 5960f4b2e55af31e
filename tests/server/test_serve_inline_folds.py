"""``serve`` at its defaults runs micro passes inline with the extractive summarizer: a fold lands at the request
that makes it due, not a request or more later (as a worker starved by back-to-back requests made it), and it
never reaches the request's own newest message, which goes out as the client sent it (its tool results and its
cache breakpoint too, also when the message holds text beside them, as Claude Code's reminders do).

A real ``microcompact serve`` (the CLI, in a subprocess, no config file) in front of a scripted Anthropic upstream;
the same with ``micro_compact_background: true`` in a config file shows the contrast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from support.serve_process import ServeProcess
from support.server_contract import compacted, contract_errors
from upstream import Reply, ScriptedUpstream, Text, ToolCall

REMINDER = "<system-reminder>Keep the todo list current.</system-reminder>"
STEPS = 12  # 24 KB each (~6K tokens): ~72K tokens at the first request, below the batch threshold of 100K
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-inline", "x-microcompact-session": "inline-1"}


def output(step: int) -> str:
    """A 24 KB tool output, its lines naming the step."""
    return "\n".join(f"step {step} line {n}: " + "checked " * 6 for n in range(400))


def call(step: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{step:024d}", "name": "Bash", "input": {"command": f"run {step}"}}


def results(step: int, *, reminder: bool) -> dict[str, Any]:
    """The user message answering ``step``'s call; with ``reminder``, as Claude Code sends its newest one: a text
    block beside the result, carrying the cache breakpoint."""
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": f"toolu_{step:024d}", "content": output(step)}
    ]
    if reminder:
        blocks.append({"type": "text", "text": REMINDER, "cache_control": {"type": "ephemeral"}})
    return {"role": "user", "content": blocks}


def history(steps: int) -> list[dict[str, Any]]:
    """A conversation that arrives with a long tool loop: ``steps`` iterations, the newest answered with a
    reminder beside its result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing tests."}]
    for step in range(steps):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"Step {step}."}, call(step)]})
        messages.append(results(step, reminder=step == steps - 1))
    return messages


def send(base: str, messages: list[dict[str, Any]]) -> None:
    body = {"model": "claude-test", "max_tokens": 512, "system": "You are Claude Code.", "messages": messages}
    response = httpx.post(f"{base}/v1/messages", json=body, headers=HEADERS, timeout=60)
    assert response.status_code == 200, response.text


def serve(tmp_path: Path, upstream: ScriptedUpstream, name: str, *options: str) -> ServeProcess:
    db, log = tmp_path / f"{name}.db", tmp_path / f"{name}.log"
    flags = ("--db", str(db), "--log", str(log), "--context-limit", "200000", "--quiet")
    return ServeProcess(tmp_path / f"home-{name}", *flags, "--anthropic-upstream", upstream.base_url, *options)


@pytest.mark.slow
def test_a_fold_lands_at_the_request_that_makes_it_due_and_the_newest_message_goes_out_whole(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    upstream.enqueue(Reply((Text("Next."), ToolCall("Bash", {"command": f"run {STEPS}"}))))
    messages = history(STEPS)
    served = serve(tmp_path, upstream, "defaults").start()
    try:
        assert any("passes inline" in line for line in served.stderr), served.stderr
        send(served.base_url, messages)
        first = upstream.generation_requests()[-1].body["messages"]
        # The next request of the loop: the answer, and the newest result with the reminder beside it again.
        reply = {"role": "assistant", "content": [{"type": "text", "text": "Next."}, call(STEPS)]}
        messages = [*messages[:-1], results(STEPS - 1, reminder=False), reply, results(STEPS, reminder=True)]
        send(served.base_url, messages)
        second = upstream.generation_requests()[-1].body["messages"]
    finally:
        assert served.stop() == 0
    sent = history(STEPS)
    # Due at once (nothing cached yet: a fold costs no cache write), and made at this very request.
    assert compacted(first) and len(first) < len(sent), "the first request went out folded"
    assert contract_errors(sent, first) == [] and contract_errors(messages, second) == []
    for client, forwarded, step in ((sent, first, STEPS - 1), (messages, second, STEPS)):
        assert forwarded[-1] == client[-1], "the newest message (its result, text and breakpoint) as sent"
        # The call it answers, verbatim (the marker, an assistant message too, may open the same message).
        assert forwarded[-2]["content"][-2:] == client[-2]["content"] and call(step) in forwarded[-2]["content"]


@pytest.mark.slow
def test_in_the_background_the_same_request_goes_out_unfolded(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """The contrast: background passes asked for in a config file (an explicit value beats the derived one),
    the request that makes the fold due goes out as sent; the fold lands at a later one."""
    config = tmp_path / "background.yaml"
    config.write_text("compression:\n  micro_compact_background: true\n", encoding="utf-8")
    served = serve(tmp_path, upstream, "background", "--config", str(config)).start()
    try:
        assert any("passes in the background" in line for line in served.stderr), served.stderr
        send(served.base_url, history(STEPS))
    finally:
        assert served.stop() == 0
    assert not compacted(upstream.generation_requests()[-1].body["messages"])
