"""``microcompact claude --audit`` with the pinned Claude Code, offline: the launcher starts ``serve --audit``
in front of a scripted upstream, and a loop long enough to fold under a small window goes up as Claude Code
sent it (no marker in any request, each request's messages the previous one's and more) while the store
holds the folds it would have made, the page's "would fold". Slow; skipped without Claude Code."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from microcompact.messages import MARKER_HEADING
from microcompact.server.ui.data import conversations, folds
from microcompact.store import open_store
from microcompact.store.request_figures import RequestFigures
from support import claude_code
from support.serve_process import CLI, cli_env
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.scripts import offers_tool, seq_command

pytestmark = pytest.mark.slow
STEPS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Loop:
    """Bash steps of ~24 KB output each, counted here (so a run that did rewrite ends too, and fails the
    checks below), then the final text; side requests get a short answer."""

    def __init__(self) -> None:
        self.done = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        self.done += 1
        n = self.done
        if n > STEPS:
            return text("All steps are done.")
        call = ToolCall("Bash", {"command": seq_command(n), "description": f"Step {n}"})
        return Reply((Text(f"Step {n}."), call))


@pytest.mark.skipif(claude_code.unavailable_reason() is not None, reason=claude_code.unavailable_reason() or "")
def test_claude_code_audited_through_the_launcher(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    with ScriptedUpstream(Loop()) as upstream:
        env = {**cli_env(tmp_path / "mchome"), **claude_code.QUIET_ENV, "HOME": str(tmp_path / "home")}
        env.update(MICROCOMPACT_CLAUDE_BIN=str(claude_code.find_claude()), ANTHROPIC_API_KEY="sk-ant-audit-e2e")
        options = ["--port", str(free_port()), "--db", str(db), "--anthropic-upstream", upstream.base_url]
        options += ["--context-limit", "60000", "--audit"]
        args = ["-p", "Run the steps.", "--output-format", "json", "--allowedTools", "Bash"]
        (tmp_path / "work").mkdir()
        done = subprocess.run(
            [*CLI, "claude", *options, *args],
            cwd=tmp_path / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, (done.stdout[-1500:], done.stderr[-3000:])
        assert json.loads(done.stdout[: done.stdout.rindex("}") + 1])["result"] == "All steps are done."
        sent = [r.body for r in upstream.requests if r.path.startswith("/v1/messages") and offers_tool(r.body, "Bash")]
    assert len(sent) == STEPS + 1
    assert not [b for b in sent if MARKER_HEADING in json.dumps(b)], "nothing rewritten: no marker went up"
    results = [json.dumps(b).count('"tool_result"') for b in sent]
    assert results == list(range(STEPS + 1)), "every tool result still in the history: none folded away"
    store = open_store(db)
    try:
        [conversation] = [c for c in conversations(store) if (c["client"] or "").startswith("claude-cli/")]
        would = folds(RequestFigures(store).of(conversation["id"]))
    finally:
        store.close()
    assert conversation["mode"] == "audit" and conversation["audited_requests"] == len(sent)
    assert conversation["would_have_tokens"] < conversation["audited_prompt_tokens"]
    assert would and all(f["mode"] == "audit" for f in would), "the folds it would have made"
