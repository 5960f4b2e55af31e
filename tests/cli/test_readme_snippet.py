"""The README's agent-loop snippet runs as written (issue 28): copied out of the README, run as a script
against a scripted OpenAI-compatible upstream on 127.0.0.1, with a real shell tool call in between."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.serve_process import SRC
from upstream import ScriptedUpstream, text, tool_call

REPO = Path(__file__).resolve().parents[2]


def _snippet() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use it in your own agent loop", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the README's agent-loop section has a python block"
    return found.group(1)


def test_the_readme_agent_loop_runs_as_written(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a.py", "b.py", "notes.txt"):
        (work / name).write_text("x = 1\n", encoding="utf-8")
    script = tmp_path / "agent.py"
    script.write_text(_snippet(), encoding="utf-8")
    upstream.enqueue(tool_call("shell", {"command": "ls *.py | wc -l"}))
    upstream.enqueue(text("There are 2 Python files."))
    home = tmp_path / "home"
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "MICROCOMPACT_HOME": str(home),
        "OPENAI_API_KEY": "sk-readme",
        "OPENAI_BASE_URL": f"{upstream.base_url}/v1",
    }
    done = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "There are 2 Python files."
    second = upstream.generation_requests()[-1].body
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert result["content"].strip() == "2", "the shell tool ran and its output went back to the model"
    assert [m["content"] for m in second["messages"] if m["role"] == "user"] == [
        "How many Python files are in this folder?"
    ]
    assert (home / "logs" / "agent.log").exists(), "log_telemetry() opened the log report reads"
