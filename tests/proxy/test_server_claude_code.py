"""Claude Code itself (``claude -p``, the pinned npm package) through ``serve`` in front of the scripted
upstream: a long Bash loop with large outputs and signed thinking is compacted on the way up, every
forwarded request keeps the contract, Claude Code finishes the task, and ``--continue`` after a restart of
the proxy goes on in the same session. Skipped, with the reason, when the CLI is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.claude_code import run_claude, unavailable_reason
from support.proxy_server import ProxyServer
from support.server_contract import compacted, contract_errors, is_marker
from support.session_ids import named
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, Thinking, ToolCall, text
from upstream.scripts import offers_tool, seq_command

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

PROMPT = "Run the numbered steps with the Bash tool until they are done."
STEPS = 24


class Steps:
    """Call Bash ``steps`` times, counting the requests it answered: a count read from the request would
    shrink when the proxy compacts the history."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.done = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        if self.done >= self.steps:
            self.done = 0
            return text("All steps are done.")
        self.done += 1
        n = self.done
        command = {"command": seq_command(n), "description": f"Print numbers (step {n})"}
        return Reply((Thinking(f"Plan for step {n}.", f"sig-step-{n}"), Text(f"Step {n}."), ToolCall("Bash", command)))


def check_every_request(proxy: ProxyServer, upstream: ScriptedUpstream) -> list[dict[str, Any]]:
    sent = proxy.client_messages()
    forwarded = upstream.generation_requests()[-len(sent) :]
    assert len(sent) == len(forwarded)
    for client, request in zip(sent, forwarded, strict=True):
        assert request.status == 200, bytes(request.response)[:300]
        assert contract_errors(client, request.messages) == []
        assert request.messages[-1] == client[-1], "the newest message, with its breakpoint, goes out as sent"
        for m in request.messages:
            if m["role"] == "assistant" and not is_marker(m):
                assert all(b["signature"].startswith("sig-step-") for b in m["content"] if b["type"] == "thinking")
    return forwarded[-1].messages


def test_claude_code_bash_loop_through_the_proxy(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script = Steps(STEPS)
    db = tmp_path / "sessions.db"
    with ProxyServer(upstream.base_url, db, context_limit=120_000) as proxy:
        run = run_claude(proxy.base_url, PROMPT, workdir=tmp_path / "work", home=tmp_path / "home")
        assert run.ok, run.stderr
        assert run.result is not None and run.result["result"] == "All steps are done."
        assert run.result["num_turns"] == STEPS + 1
        last = check_every_request(proxy, upstream)
        proxy.settle()
    requests = upstream.generation_requests()
    assert {r.headers["x-claude-code-session-id"] for r in requests} == {run.result["session_id"]}
    assert compacted(last), "24 outputs of 24 KB in a 120K window must compact"
    full = proxy.client_messages()[-1]
    assert upstream.prompt_tokens({"messages": last}) < upstream.prompt_tokens({"messages": full}) / 2
    # the prompt cache still works across most requests: the moving breakpoint reads the previous prefix
    reads = [r.usage["cache_read_input_tokens"] for r in requests[1:] if r.usage]
    assert sum(1 for n in reads if n > 0) >= len(reads) // 2

    upstream.script = Steps(2)
    with ProxyServer(upstream.base_url, db, context_limit=120_000) as proxy:
        again = run_claude(
            proxy.base_url, "Two more steps.", workdir=tmp_path / "work", home=tmp_path / "home", continue_session=True
        )
        assert again.ok, again.stderr
        check_every_request(proxy, upstream)
        resumed = upstream.generation_requests()[len(requests)]
        assert compacted(resumed.messages), "the restarted proxy resumed the compacted session"
        stored = [s["id"] for s in proxy.store.list_sessions()]
    assert proxy.proxy.settings.salt_file is not None
    key = requests[0].headers["x-api-key"]
    only = named(run.result["session_id"], proxy.proxy.settings.salt_file, key)
    assert stored == [only], "one session, never forked: Claude Code only appends"
