"""``microcompact claude|codex|gemini|aider`` with the pinned real clients, offline: the launcher starts
``serve`` in front of a scripted upstream and runs the client; what reached the upstream shows the client
used the proxy (every request carries serve's ``Via`` entry), did not compact on its own although the usage
it read was past its own trigger, and kept its window (Claude Code's 1M beta). Each test has a control run,
the same client without the launcher's settings, that does compact: the check can fail. Slow; skipped when
a client is not installed (``make e2e-install``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from support import aider as aider_cli
from support import claude_code, codex_cli
from support.gemini_server import GeminiUpstream
from support.serve_process import CLI, ServeProcess, cli_env
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream
from upstream.scripts import ToolLoop, offers_tool

pytestmark = pytest.mark.slow
GEMINI_BIN = Path(__file__).parents[1] / "e2e" / "gemini-cli" / "node_modules" / ".bin" / "gemini"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(tmp: Path, agent: str, options: list[str], args: list[str], env: Mapping[str, str], cwd: Path) -> str:
    """``microcompact AGENT --port P OPTIONS ARGS`` with a throwaway HOME; the launcher's whole output."""
    cwd.mkdir(parents=True, exist_ok=True)
    full = {**cli_env(tmp / "mchome"), "HOME": str(tmp / "home"), "TERM": "dumb", "NO_COLOR": "1", **env}
    command = [*CLI, agent, "--port", str(free_port()), "--db", str(tmp / "sessions.db"), *options, *args]
    done = subprocess.run(command, cwd=cwd, env=full, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout[-1500:], done.stderr[-3000:])
    return done.stdout + done.stderr


def through_serve(headers: Mapping[str, str]) -> bool:
    via = next((v for k, v in headers.items() if k.lower() == "via"), "")
    return "microcompact-" in via


# ---------------------------------------------------------------------------------------------- Claude Code


def counted_loop(steps: int) -> Any:
    """Bash calls counted here (a compacting proxy shortens the history, so counting the tool results in a
    request would never reach the end), then the final text; side requests get a short answer."""
    done = [0]

    def script(request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        done[0] += 1
        if done[0] > steps:
            return text("All steps are done.")
        call = ToolCall("Bash", {"command": f"seq {done[0]} {done[0] + 200}", "description": f"Step {done[0]}"})
        return Reply((Text(f"Step {done[0]}."), call))

    return script


CLAUDE_SUMMARY = "create a detailed summary of the conversation"
CLAUDE_USER_WINDOW = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000"}  # a user's own setting: compact at 100K


@pytest.mark.skipif(claude_code.unavailable_reason() is not None, reason=claude_code.unavailable_reason() or "")
def test_claude_code_through_the_launcher(tmp_path: Path) -> None:
    """Every request reported about 107K tokens and up, past the 100K window the user set: Claude Code
    compacts there on its own (the control, straight at the upstream), never through the launcher, and the
    ``[1m]`` model keeps its ``context-1m`` beta through the proxy."""
    model = "claude-sonnet-4-5[1m]"
    with ScriptedUpstream(counted_loop(4), overhead=95_000) as upstream:
        binary = str(claude_code.find_claude())
        env = {**claude_code.QUIET_ENV, **CLAUDE_USER_WINDOW, "MICROCOMPACT_CLAUDE_BIN": binary}
        env["ANTHROPIC_API_KEY"] = "sk-ant-launch-e2e"
        args = ["-p", "Run the steps.", "--output-format", "json", "--allowedTools", "Bash", "--model", model]
        out = launch(tmp_path, "claude", ["--anthropic-upstream", upstream.base_url], args, env, tmp_path / "work")
        assert json.loads(out[: out.rindex("}") + 1])["result"] == "All steps are done."
        sent = [r for r in upstream.requests if r.path.startswith("/v1/messages")]
        assert len(sent) == 5 and all(through_serve(r.headers) for r in sent)
        assert not [r for r in sent if CLAUDE_SUMMARY in json.dumps(r.body)], "no compaction of its own"
        assert all("context-1m-2025-08-07" in r.headers.get("anthropic-beta", "") for r in sent)
        assert min(upstream.prompt_tokens(r.body) for r in sent) > 100_000, "each past the client's own trigger"
        assert "sk-ant-launch-e2e" not in out

        upstream.script = ToolLoop(4)  # straight at the upstream nothing shortens the history
        saved = dict(claude_code.QUIET_ENV)
        claude_code.QUIET_ENV.update(CLAUDE_USER_WINDOW)
        try:
            control = claude_code.run_claude(
                upstream.base_url,
                "Run the steps.",
                workdir=tmp_path / "w2",
                home=tmp_path / "h2",
                extra_args=("--model", model),
            )
        finally:
            claude_code.QUIET_ENV.clear()
            claude_code.QUIET_ENV.update(saved)
        direct = [r for r in upstream.requests[len(sent) :] if r.path.startswith("/v1/messages")]
        assert control.returncode in (0, 1) and any(CLAUDE_SUMMARY in json.dumps(r.body) for r in direct)


# ---------------------------------------------------------------------------------------------------- Codex


def _codex_compactions(requests: list[Any]) -> int:
    """Requests that compact: remote (a ``compaction_trigger`` item) or local (Codex's summary turn)."""
    count = 0
    for request in requests:
        items = request.body.get("input") or []
        trigger = any(isinstance(i, dict) and i.get("type") == "compaction_trigger" for i in items)
        count += trigger or "CONTEXT CHECKPOINT COMPACTION" in json.dumps(request.body)
    return count


@pytest.mark.skipif(codex_cli.unavailable_reason() is not None, reason=codex_cli.unavailable_reason() or "")
def test_codex_through_the_launcher(tmp_path: Path) -> None:
    """No ``config.toml`` at all: the launcher's ``-c`` overrides alone take Codex to the proxy, under a
    provider not named "OpenAI" (so no remote compaction toward a server that is not OpenAI's), and the
    user's own ``-c`` after them still applies (the model)."""
    steps = 3
    base = [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-c",
        'model="gpt-5.1-codex"',
    ]
    prompt = "Run the numbered steps with exec_command until they are done."
    with ResponsesUpstream(ResponsesToolLoop(steps)) as upstream:
        env = {"MICROCOMPACT_CODEX_BIN": str(codex_cli.find_codex()), "OPENAI_API_KEY": "sk-codex-launch-e2e"}
        env["CODEX_HOME"] = str(tmp_path / "codex-home")
        (tmp_path / "codex-home").mkdir()
        options = ["--openai-upstream", upstream.openai_base_url]
        out = launch(tmp_path, "codex", options, [*base, prompt], env, tmp_path / "work")
        sent = upstream.responses_requests()
        assert "All steps are done." in out and "sk-codex-launch-e2e" not in out
        assert "provider: microcompact" in out
        assert len(sent) == steps + 1 and all(through_serve(r.headers) for r in sent)
        assert all(r.body["model"] == "gpt-5.1-codex" for r in sent)
        assert all(r.headers["authorization"] == "Bearer sk-codex-launch-e2e" for r in sent)
        assert _codex_compactions(sent) == 0


# ----------------------------------------------------------------------------------------------- Gemini CLI

GEMINI_SNAPSHOT = "state_snapshot"


def _gemini_home(home: Path) -> None:
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))


def _gemini_script(steps: int) -> Any:
    done = [0]

    def script(_: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [{"text": "ok"}]
        done[0] += 1
        if done[0] > steps:
            return [{"text": "All steps are done."}]
        call = {"name": "run_shell_command", "args": {"command": f"seq {done[0]} {done[0] + 50}", "description": "s"}}
        return [{"text": f"Step {done[0]}."}, {"functionCall": call}]

    return script


@pytest.mark.skipif(not GEMINI_BIN.exists(), reason="run tests/e2e/install-gemini-cli.sh")
def test_gemini_cli_through_the_launcher(tmp_path: Path) -> None:
    """Gemini CLI reaches the upstream only through serve (GOOGLE_GEMINI_BASE_URL) and runs its steps. Its own
    compression is not checked here: with 600K reported tokens it still compressed through the launcher
    (``model.compressionThreshold`` in the system settings did not stop it on 0.61; an open item)."""
    key = "gemini-launch-e2e-key"
    env = {"GEMINI_API_KEY": key, "GEMINI_CLI_TRUST_WORKSPACE": "true", "MICROCOMPACT_GEMINI_BIN": str(GEMINI_BIN)}
    args = ["-m", "gemini-e2e-pro", "-p", "Run the numbered steps with run_shell_command.", "--yolo"]
    with GeminiUpstream(script=_gemini_script(3), api_key=key) as upstream:
        _gemini_home(tmp_path / "home")
        out = launch(tmp_path, "gemini", ["--gemini-upstream", upstream.base_url], args, env, tmp_path / "work")
        sent = upstream.generations()
        assert "All steps are done." in out and key not in out
        assert len([e for e in sent if e.body.get("tools")]) == 4 and all(through_serve(e.headers) for e in sent)
