"""Claude Code itself through a real ``microcompact serve --summarizer upstream`` process: its summary
requests are its own last requests (thinking, tools, betas and all) plus the instruction, read from the
scripted upstream's cache, on its own credential; the notes the upstream writes are what the markers say.
Skipped, naming the install command, when Claude Code is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from microcompact.messages import MARKER_PREFIX
from support.claude_code import run_claude, unavailable_reason
from support.numbered_steps import NumberedSteps
from support.serve_process import ServeProcess
from upstream import Answer, RecordedRequest, ScriptedUpstream, text

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

INSTRUCTION = "[microcompact] This message comes from microcompact"
LISTED = re.compile(r"^E(\d+): the assistant turn that begins “Step (\d+)\.”", re.MULTILINE)
STEPS = 24
KEY = "sk-ant-e2e-upstream-summary"


def is_summary(record: RecordedRequest) -> bool:
    messages = (record.body or {}).get("messages") or []
    return bool(messages) and INSTRUCTION in json.dumps(messages[-1], ensure_ascii=False)


class StepsAndNotes:
    """Claude Code's numbered steps; microcompact's summary requests get a note on each turn they list."""

    def __init__(self) -> None:
        self.steps = NumberedSteps("us", STEPS)

    def __call__(self, record: RecordedRequest) -> Answer:
        if not is_summary(record):
            return self.steps(record)
        blocks = ["### Goal\nRun the numbered steps with the Bash tool until they are done."]
        for label, step in LISTED.findall(record.body["messages"][-1]["content"][0]["text"]):
            blocks.append(
                f"### E{label}\nWork done: Step {step} ran with the Bash tool.\n"
                f"Findings: step {step} finished cleanly and step {step} printed its numbers.\n"
                f"Next: run the step after step {step}."
            )
        return text("\n".join(blocks))


def test_claude_codes_summary_requests_ride_its_cache(tmp_path: Path):
    with ScriptedUpstream(StepsAndNotes()) as upstream:
        served = ServeProcess(
            tmp_path / "home",
            "--db",
            str(tmp_path / "s.db"),
            "--anthropic-upstream",
            upstream.base_url,
            "--context-limit",
            "100000",
            "--summarizer",
            "upstream",
        ).start()
        try:
            run = run_claude(
                served.base_url,
                "Run the numbered steps with the Bash tool until they are done.",
                workdir=tmp_path / "work",
                home=tmp_path / "claude",
                max_turns=STEPS + 10,
                api_key=KEY,
                timeout=900,
            )
        finally:
            served.stop(timeout=120)
    assert run.ok, run.stderr[-2000:]
    sent = [r for r in upstream.generation_requests() if isinstance(r.body, dict)]
    summaries = [r for r in sent if is_summary(r)]
    agent = [r for r in sent if not is_summary(r)]
    assert summaries, "no summary request went upstream"
    for summary in summaries:
        # It continues the conversation's last request when its fold was planned; Claude Code's side requests
        # (titles, checks) and, on a loaded machine, further steps may go up before it is sent, so any earlier
        # request counts, and the upstream's cache below says whether that prefix was still cached.
        earlier = [r for r in agent if r.number < summary.number]
        prefix = orjson.dumps(summary.body["messages"][:-1])
        matching = [r for r in earlier if orjson.dumps(r.body["messages"]) == prefix]
        assert matching, f"summary request {summary.number} continues no request that went up before it"
        last = matching[-1]
        for key in ("system", "tools", "model", "thinking", "tool_choice", "metadata"):
            assert orjson.dumps(summary.body.get(key)) == orjson.dumps(last.body.get(key)), key
        assert summary.headers.get("anthropic-beta") == last.headers.get("anthropic-beta")
        assert summary.body["stream"] is False
        # Claude Code's credential, as it sent it (the anthropic SDK puts it in x-api-key).
        assert KEY in (summary.headers.get("x-api-key", "") + summary.headers.get("authorization", ""))
        assert summary.usage["cache_read_input_tokens"] > 0 and summary.usage["cache_creation_input_tokens"] == 0
    later: list[Any] = [json.dumps(r.body["messages"]) for r in agent if MARKER_PREFIX in json.dumps(r.body)]
    assert any("finished cleanly" in m for m in later), "the markers do not carry the upstream's notes"
