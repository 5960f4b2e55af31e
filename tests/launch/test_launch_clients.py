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
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
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


@pytest.fixture
def secure_home() -> Iterator[Path]:
    """A MICROCOMPACT_HOME with no world-writable folder above it (under the user's home, not /tmp): Gemini
    CLI skips a system settings file below one, so the launcher writes its files under this home."""
    parent = Path.home() / ".cache"
    parent.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="microcompact-launch-test-", dir=parent))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(not GEMINI_BIN.exists(), reason="run tests/e2e/install-gemini-cli.sh")
def test_gemini_cli_through_the_launcher(tmp_path: Path, secure_home: Path) -> None:
    """Every answer reports about 600K prompt tokens, past Gemini CLI's default trigger (half its model's 1M
    window): straight through serve it compresses its history (the control, a ``state_snapshot`` request);
    through the launcher it leaves that to the proxy, and its requests reach the upstream through serve."""
    key = "gemini-launch-e2e-key"
    env = {"GEMINI_API_KEY": key, "GEMINI_CLI_TRUST_WORKSPACE": "true", "MICROCOMPACT_GEMINI_BIN": str(GEMINI_BIN)}
    env["MICROCOMPACT_HOME"] = str(secure_home)
    args = ["-m", "gemini-e2e-pro", "-p", "Run the numbered steps with run_shell_command.", "--yolo"]
    with GeminiUpstream(script=_gemini_script(3), overhead=600_000, api_key=key, window=3_000_000) as upstream:
        _gemini_home(tmp_path / "home")
        options = ["--gemini-upstream", upstream.base_url, "--context-limit", "2000000"]
        out = launch(tmp_path, "gemini", options, args, env, tmp_path / "work")
        sent = upstream.generations()
        assert "All steps are done." in out and key not in out
        assert len([e for e in sent if e.body.get("tools")]) == 4 and all(through_serve(e.headers) for e in sent)
        assert min(e.prompt_tokens for e in sent) > 524_288, "each past the client's own trigger"
        assert not [e for e in sent if GEMINI_SNAPSHOT in json.dumps(e.body)], "no compression of its own"
        assert not list((secure_home / "launch").iterdir()), "the run's settings file is removed after it"

        upstream.script = _gemini_script(3)
        _gemini_home(tmp_path / "control" / "home")
        serve = ServeProcess(tmp_path / "control" / "mchome", *options).start()
        try:
            control_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "control" / "home"), **env}
            control_env["GOOGLE_GEMINI_BASE_URL"] = serve.base_url
            (tmp_path / "work2").mkdir()
            command = [str(GEMINI_BIN), *args]
            subprocess.run(
                command, cwd=tmp_path / "work2", env=control_env, capture_output=True, timeout=300, check=False
            )
        finally:
            serve.stop()
        assert any(GEMINI_SNAPSHOT in json.dumps(e.body) for e in upstream.generations()[len(sent) :])


# ---------------------------------------------------------------------------------------------------- aider

AIDER_SUMMARY = "summarize this partial conversation"
LONG_ANSWER = "Noted. " + "The quick brown fox jumps over the lazy dog. " * 300  # about 3K tokens


@pytest.mark.skipif(aider_cli.unavailable_reason() is not None, reason=aider_cli.unavailable_reason() or "")
def test_aider_through_the_launcher(tmp_path: Path) -> None:
    """Four ``--message`` turns of one restored chat with long answers: aider summarizes its history on its
    own past its default limit (the control, straight through serve); through the launcher it does not."""
    flags = ["--model", "openai/gpt-4o", "--no-stream", "--yes-always", "--no-git", "--no-check-update"]
    flags += ["--no-show-model-warnings", "--analytics-disable", "--restore-chat-history", "--no-pretty"]
    flags += ["--no-fancy-input"]
    with ScriptedUpstream(lambda request: text(LONG_ANSWER)) as upstream:
        caches = tmp_path / "home" / ".aider" / "caches"
        caches.mkdir(parents=True)
        (caches / "model_prices_and_context_window.json").write_text('{"placeholder": {}}')
        env = {"OPENAI_API_KEY": "sk-aider-launch-e2e", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["MICROCOMPACT_AIDER_BIN"] = str(aider_cli.aider_bin())
        for turn in range(4):
            options = ["--openai-upstream", upstream.openai_base_url]
            out = launch(tmp_path, "aider", options, [*flags, "--message", f"turn {turn}"], env, tmp_path / "work")
            assert "Noted." in out and "sk-aider-launch-e2e" not in out
        sent = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
        assert len(sent) == 4 and all(through_serve(r.headers) for r in sent)
        assert not [r for r in sent if AIDER_SUMMARY in json.dumps(r.body)], "no summary of its own"

        serve = ServeProcess(tmp_path / "control", "--openai-upstream", upstream.openai_base_url).start()
        try:
            for turn in range(4):
                aider_cli.run_aider(f"{serve.base_url}/v1", f"turn {turn}", tmp_path / "work2", tmp_path / "home2")
        finally:
            serve.stop()
        control = [r for r in upstream.requests[len(sent) :] if r.path == "/v1/chat/completions"]
        assert any(AIDER_SUMMARY in json.dumps(r.body) for r in control)


@pytest.mark.skipif(aider_cli.unavailable_reason() is not None, reason=aider_cli.unavailable_reason() or "")
def test_aider_with_an_anthropic_model_through_the_launcher(tmp_path: Path) -> None:
    """An Anthropic model in aider goes through litellm's Anthropic client: ANTHROPIC_API_BASE takes it to
    serve, which forwards it to the Anthropic upstream."""
    flags = ["--model", "anthropic/claude-sonnet-4-5", "--no-stream", "--yes-always", "--no-git"]
    flags += ["--no-check-update", "--no-show-model-warnings", "--analytics-disable", "--no-pretty", "--no-fancy-input"]
    with ScriptedUpstream(lambda request: text("Anthropic path answered.")) as upstream:
        caches = tmp_path / "home" / ".aider" / "caches"
        caches.mkdir(parents=True)
        (caches / "model_prices_and_context_window.json").write_text('{"placeholder": {}}')
        env = {"ANTHROPIC_API_KEY": "sk-ant-aider-launch", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["MICROCOMPACT_AIDER_BIN"] = str(aider_cli.aider_bin())
        options = ["--anthropic-upstream", upstream.base_url]
        out = launch(tmp_path, "aider", options, [*flags, "--message", "hi"], env, tmp_path / "work")
        assert "Anthropic path answered." in out and "sk-ant-aider-launch" not in out
        [sent] = upstream.requests
        assert sent.path == "/v1/messages" and through_serve(sent.headers)
        assert sent.headers["x-api-key"] == "sk-ant-aider-launch"
