"""The whole loop with the real client: Claude Code runs ``microcompact mcp`` as its MCP server and talks to
a real ``microcompact serve`` (subprocess, SQLite store) in front of a scripted upstream. The script runs
Bash steps whose 24 KB outputs each print an identifier of their own until the first ones are folded; then,
reading the conversation and handle from the marker's note in the request it got, it has Claude Code call
the recall tool (loading it with ToolSearch first when Claude Code deferred it) for the first step's
identifier, which is no longer in the prompt, and ends with what the tool returned. Skipped, naming the
install command, when Claude Code is missing (``$MICROCOMPACT_CLAUDE_BIN`` points at another binary)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from microcompact.store import open_store
from support.claude_code import run_claude, unavailable_reason
from support.serve_process import ServeProcess
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.scripts import offers_tool, seq_command

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

STEPS = 14
CONTEXT_LIMIT = 60_000
RECALL = "mcp__microcompact__recall"
NOTE = re.compile(r'conversation=\\?"([0-9a-f]{24})\\?"')


def ident(n: int) -> str:
    return f"probe_identifier_{n}_7f3a"


class RecallProbe:
    """Bash ``STEPS`` times, then recall step 1's identifier through the tool the marker names."""

    def __init__(self) -> None:
        self.asked_in: str = ""  # the request text the recall was decided on (step 1's output must be gone)

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        last_id, last_text = _last_result(request.body)
        if last_id == "toolu_recall":
            return text(f"RECALLED: {last_text}")
        if last_id == "toolu_search":
            return self._recall(request)
        found = re.fullmatch(r"toolu_probe_(\d+)", last_id)
        done = int(found.group(1)) if found else 0
        if done < STEPS:
            n = done + 1
            command = f"echo {ident(n)}; {seq_command(n)}"
            return Reply((Text(f"Step {n}."), ToolCall("Bash", {"command": command}, id=f"toolu_probe_{n}")))
        if offers_tool(request.body, RECALL):
            return self._recall(request)
        search = {"query": f"select:{RECALL}", "max_results": 1}
        return Reply((Text("Loading the recall tool."), ToolCall("ToolSearch", search, id="toolu_search")))

    def _recall(self, request: RecordedRequest) -> Reply:
        sent = json.dumps(request.body.get("messages"))
        note = NOTE.search(sent)
        if note is None:
            return text("NO NOTE in the marker")
        self.asked_in = sent
        arguments = {"conversation": note.group(1), "query": ident(1)}
        return Reply((Text("Recalling step 1."), ToolCall(RECALL, arguments, id="toolu_recall")))


def _last_result(body: dict[str, Any]) -> tuple[str, str]:
    """The newest tool result's id and text."""
    messages = body.get("messages") or []
    blocks = messages[-1].get("content") if messages and isinstance(messages[-1].get("content"), list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return "", ""
    content = results[-1].get("content")
    if isinstance(content, list):
        content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(results[-1].get("tool_use_id") or ""), str(content or "")


def test_claude_code_recalls_a_folded_output_through_the_tool(tmp_path: Path) -> None:
    db, home = tmp_path / "sessions.db", tmp_path / "mchome"
    workdir, claude_home = tmp_path / "work", tmp_path / "claude-home"
    mcp_config = tmp_path / "mcp.json"
    command = str(Path(sys.executable).with_name("microcompact"))
    server = {"command": command, "args": ["mcp", "--db", str(db)], "env": {"MICROCOMPACT_HOME": str(home)}}
    mcp_config.write_text(json.dumps({"mcpServers": {"microcompact": server}}))
    probe = RecallProbe()
    with ScriptedUpstream(probe) as upstream:
        served = ServeProcess(
            home, "--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT)
        ).start()
        try:
            run = run_claude(
                served.base_url,
                "Run the probe steps, then recall the first one.",
                workdir=workdir,
                home=claude_home,
                max_turns=STEPS + 6,
                allowed_tools=("Bash", "ToolSearch", RECALL),
                extra_args=("--mcp-config", str(mcp_config), "--strict-mcp-config"),
            )
        finally:
            served.stop()
    assert run.ok, run.stderr or run.stdout
    answer = str(run.result and run.result.get("result"))
    assert answer.startswith("RECALLED: "), answer
    assert ident(1) in answer and "expand a handle" in answer, "the tool found step 1's folded output"
    assert "1000001\\n1000002" not in probe.asked_in, "step 1's output was folded out of the prompt when recalled"
    handles = re.findall(r"(?m)^m(\d+) tool result", answer)
    with open_store(db, read_only=True) as store:
        rows = {m["_row"]: m for m in store.export(store.list_sessions()[0]["id"], include_absorbed=True)}
    assert handles and all(rows[int(h)]["_state"] == "absorbed" for h in handles), "handles of folded originals"
