"""Gemini CLI itself (``gemini -p``, the pinned npm package in tests/e2e/gemini-cli) through a real
``microcompact serve`` in front of the scripted Gemini upstream (``support.gemini_server``): a long tool loop
of real shell commands with large outputs over a 32K window. The proxy compacts (old outputs stubbed by its
batch prune; every prompt under the window, which the upstream enforces), Gemini CLI's first user content
(its session context and the prompt) arrives verbatim in every request, calls and responses stay paired,
and the signatures the upstream issued come back (it refuses a current-turn call without one). Skipped when
the CLI is not installed (``tests/e2e/install-gemini-cli.sh``).

How Gemini CLI runs offline here: ``GOOGLE_GEMINI_BASE_URL`` points it at serve, ``GEMINI_API_KEY`` and
``security.auth.selectedType: gemini-api-key`` in its settings pick key auth (without them it exits 41,
"Invalid auth method selected"), ``GEMINI_CLI_TRUST_WORKSPACE=true`` lets it run headless (else exit 55),
``--yolo`` approves its shell calls, and ``-m`` names a model, which skips its model router (a JSON-mode
classifier request to a flash-lite model before every turn).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.gemini_server import GeminiUpstream, markers, pairing_errors
from support.serve_process import ServeProcess

GEMINI_BIN = Path(__file__).parent / "gemini-cli" / "node_modules" / ".bin" / "gemini"
_missing = None if GEMINI_BIN.exists() and shutil.which("node") else "run tests/e2e/install-gemini-cli.sh"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing is not None, reason=_missing or "")]

STEPS = 24  # below Gemini CLI's 30 turns before its loop detection asks a model
LINES = 400  # about 2K tokens of shell output a step
WINDOW = 32_768
KEY = "gemini-cli-e2e-key"
MODEL = "gemini-e2e-pro"
PROMPT = "Run the numbered steps with run_shell_command until they are done."
DONE = f"All {STEPS} steps are done."


def step_command(step: int) -> str:
    return f"seq -f 'step {step} line %g: checked' 1 {LINES}"


def cli_script() -> Any:
    """The model: a shell call per step, then the final text; requests without tools (side requests) get
    plain text and do not count as a step."""
    steps = [0]

    def script(_: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [{"text": "ok"}]
        steps[0] += 1
        if steps[0] > STEPS:
            return [{"text": DONE}]
        args = {"command": step_command(steps[0]), "description": f"Step {steps[0]}."}
        return [{"text": f"Step {steps[0]}."}, {"functionCall": {"name": "run_shell_command", "args": args}}]

    return script


@pytest.fixture
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream(script=cli_script(), window=WINDOW, api_key=KEY) as upstream:
        yield upstream


def run_gemini(base_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    command = [str(GEMINI_BIN), "-m", MODEL, "-p", PROMPT, "--yolo"]
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_gemini_cli_tool_loop_compacts_through_serve(gemini: GeminiUpstream, tmp_path: Path) -> None:
    options = ("--db", str(tmp_path / "s.db"), "--gemini-upstream", gemini.base_url, "--context-limit", str(WINDOW))
    served = ServeProcess(tmp_path / "mchome", *options, "--log", str(tmp_path / "proxy.log")).start()
    try:
        run = run_gemini(served.base_url, tmp_path)
    finally:
        served.kill()

    assert run.returncode == 0, run.stderr[-2000:]
    assert DONE in run.stdout
    requests = [r for r in gemini.generations() if r.body.get("tools")]
    assert len(requests) == STEPS + 1
    assert all(r.status == 200 for r in requests), [r.response for r in requests if r.status != 200][:1]
    assert all(r.path == f"/v1beta/models/{MODEL}:streamGenerateContent" for r in requests)
    assert all(r.headers.get("x-goog-api-key") == KEY for r in requests)
    # Uncompacted, the last request would hold STEPS whole outputs: about 75K tokens, refused by the upstream.
    assert max(r.prompt_tokens for r in requests) < WINDOW
    last = requests[-1].body["contents"]
    outputs = [p["functionResponse"]["response"]["output"] for c in last for p in c["parts"] if "functionResponse" in p]
    whole = [o for o in outputs if f"line {LINES}: checked" in o]
    assert len(outputs) == STEPS or markers(requests[-1].body), "every step still answered, or folded into a marker"
    assert len(whole) <= STEPS // 4, "old outputs were shortened (stubs) or folded"
    first = requests[0].body["contents"][0]
    assert any(p.get("text") == PROMPT for p in first["parts"])
    for n, request in enumerate(requests):
        assert request.body["contents"][0] == first, f"request {n}: the first user content verbatim"
        assert pairing_errors(request.body["contents"]) == [], f"request {n}"
    assert f"step {STEPS} line {LINES}: checked" in outputs[-1], "the newest output is kept whole"
