"""The launcher's lifecycle, run as users run it (``microcompact claude ...`` in a subprocess) with a stand-in
agent: a ``serve`` started when none answers and stopped when the agent exits (also on SIGTERM), one that
was running reused and left running, the agent's exit code returned, keys never printed, ``--audit``
starting ``serve --audit``, and one-line errors (exit 2) for a missing agent, a port held by something else,
an unknown agent, and a running serve in the other mode than the one asked (or one that does not say)."""

from __future__ import annotations

import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from microcompact.launch import ServeSettings
from support.serve_process import CLI, ServeProcess, cli_env

SECRET = "sk-ant-launcher-secret-0123456789"
# The stand-in agent: writes what it was given, checks the proxy answers, sleeps if asked, exits as asked.
AGENT = f"""#!{sys.executable}
import json, os, sys, time, urllib.request
base = os.environ.get("ANTHROPIC_BASE_URL") or os.environ["GOOGLE_GEMINI_BASE_URL"]
answer = urllib.request.urlopen(base + "/healthz")
health, mode = answer.read().decode(), answer.headers.get("x-microcompact-serve-mode")
metrics = urllib.request.urlopen(base + "/metrics").status
record = {{"argv": sys.argv[1:], "health": health, "mode": mode, "metrics": metrics,
    "env": {{k: v for k, v in os.environ.items()
    if k in ("ANTHROPIC_BASE_URL", "DISABLE_AUTO_COMPACT", "GOOGLE_GEMINI_BASE_URL", "ANTHROPIC_API_KEY")}}}}
open(os.environ["AGENT_RECORD"], "w").write(json.dumps(record))
time.sleep(float(os.environ.get("AGENT_SLEEP", "0")))
sys.exit(int(os.environ.get("AGENT_EXIT", "0")))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "fake-agent"
    path.write_text(AGENT)
    path.chmod(0o755)
    return path


def launcher_env(tmp_path: Path, agent: Path, **extra: str) -> dict[str, str]:
    env = cli_env(tmp_path / "mchome")
    env.update(MICROCOMPACT_CLAUDE_BIN=str(agent), MICROCOMPACT_GEMINI_BIN=str(agent), ANTHROPIC_API_KEY=SECRET)
    env.update(AGENT_RECORD=str(tmp_path / "record.json"), MICROCOMPACT_PROXY_KEY="not-for-the-started-serve")
    env.update(extra)
    return env


def launch(tmp_path: Path, agent: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = launcher_env(tmp_path, agent, **extra)
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow  # a serve process started and stopped: several seconds
def test_a_serve_is_started_for_the_agent_and_stopped_after(tmp_path: Path, agent: Path) -> None:
    port = free_port()
    done = launch(tmp_path, agent, "claude", "--port", str(port), "-p", "say hi", "--model", "x", AGENT_EXIT="7")
    assert done.returncode == 7, done.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["argv"] == ["-p", "say hi", "--model", "x"] and record["health"] == "ok\n"
    assert record["mode"] == "rewrite"
    assert record["metrics"] == 200, "MICROCOMPACT_PROXY_KEY is not passed to the serve: agents send no key"
    assert record["env"] == {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "DISABLE_AUTO_COMPACT": "1",
        "ANTHROPIC_API_KEY": SECRET,
    }
    assert not listening(port), "the serve the launcher started is stopped when the agent exits"
    assert SECRET not in done.stdout + done.stderr
    started = (tmp_path / "mchome" / "logs" / f"serve-{port}.out").read_text()
    assert f"listening on http://127.0.0.1:{port}" in started and SECRET not in started


@pytest.mark.slow  # a serve process started and stopped: several seconds
def test_a_running_serve_is_reused_and_left_running(tmp_path: Path, agent: Path) -> None:
    serve = ServeProcess(tmp_path / "served").start()
    try:
        done = launch(tmp_path, agent, "gemini", "--port", str(serve.port), "--", "--port", "3")
        assert done.returncode == 0, done.stderr
        record = json.loads((tmp_path / "record.json").read_text())
        assert record["argv"] == ["--port", "3"]
        assert record["env"]["GOOGLE_GEMINI_BASE_URL"] == serve.base_url
        assert serve.process is not None and serve.process.poll() is None and listening(serve.port)
        assert not (tmp_path / "mchome" / "logs" / f"serve-{serve.port}.out").exists()
    finally:
        serve.stop()


@pytest.mark.slow  # a serve process started and stopped: several seconds
def test_sigterm_reaches_the_agent_and_the_started_serve_is_stopped(tmp_path: Path, agent: Path) -> None:
    port = free_port()
    env = launcher_env(tmp_path, agent, AGENT_SLEEP="60")
    process = subprocess.Popen([*CLI, "claude", "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "record.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert not listening(port)


@pytest.fixture
def other_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and not done.stdout, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_a_port_held_by_something_else_is_refused(tmp_path: Path, agent: Path, other_server: int) -> None:
    line = one_line_error(launch(tmp_path, agent, "claude", "--port", str(other_server), "-p", "x"))
    assert f"127.0.0.1:{other_server} is taken by something that is not microcompact serve" in line
    assert not (tmp_path / "record.json").exists()


def test_a_missing_agent_is_one_line(tmp_path: Path, agent: Path) -> None:
    port = free_port()
    env = {"MICROCOMPACT_CLAUDE_BIN": str(tmp_path / "nowhere" / "claude")}
    line = one_line_error(launch(tmp_path, agent, "claude", "--port", str(port), **env))
    assert "MICROCOMPACT_CLAUDE_BIN=" in line and "is not an executable file" in line
    line = one_line_error(launch(tmp_path, agent, "codex", "--port", str(port), PATH=str(tmp_path)))
    assert "'codex' is not on PATH" in line and "npm install -g @openai/codex" in line
    assert not listening(port), "no serve is started for an agent that cannot run"


def test_an_unknown_agent_exits_2(tmp_path: Path, agent: Path) -> None:
    done = launch(tmp_path, agent, "claudee", "-p", "x")
    assert done.returncode == 2 and "No such command 'claudee'" in done.stderr


@pytest.mark.slow  # a serve process started and stopped: several seconds
def test_a_serve_that_needs_a_proxy_key_is_refused(tmp_path: Path, agent: Path) -> None:
    serve = ServeProcess(tmp_path / "served", "--api-key", "proxy-key-0123").start()
    try:
        line = one_line_error(launch(tmp_path, agent, "claude", "--port", str(serve.port)))
        assert f"the microcompact serve on {serve.base_url} needs a proxy key" in line
        assert "proxy-key-0123" not in line and not (tmp_path / "record.json").exists()
    finally:
        serve.stop()


@pytest.mark.slow  # a serve process started and stopped: several seconds
def test_audit_starts_serve_in_audit_mode(tmp_path: Path, agent: Path) -> None:
    port = free_port()
    done = launch(tmp_path, agent, "claude", "--audit", "--port", str(port), "--audit-me")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["mode"] == "audit" and record["argv"] == ["--audit-me"]
    assert not listening(port)


@pytest.mark.slow  # two serve processes started and stopped: several seconds
def test_a_running_serve_in_the_other_mode_is_refused(tmp_path: Path, agent: Path) -> None:
    rewriting = ServeProcess(tmp_path / "rewriting").start()
    auditing = ServeProcess(tmp_path / "auditing", "--audit").start()
    try:
        line = one_line_error(launch(tmp_path, agent, "claude", "--audit", "--port", str(rewriting.port)))
        assert line == (
            f"error: the microcompact serve on {rewriting.base_url} runs in rewrite mode, --audit was asked; "
            "stop it or pick another --port"
        )
        line = one_line_error(launch(tmp_path, agent, "gemini", "--rewrite", "--port", str(auditing.port)))
        assert f"{auditing.base_url} runs in audit mode, --rewrite was asked" in line
        assert not (tmp_path / "record.json").exists(), "the agent never ran against the wrong mode"
        for serve in (rewriting, auditing):
            assert serve.process is not None and serve.process.poll() is None, "a reused serve is left running"
        done = launch(tmp_path, agent, "gemini", "--audit", "--port", str(auditing.port))
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / "record.json").read_text())["mode"] == "audit"
        (tmp_path / "record.json").unlink()
        assert launch(tmp_path, agent, "gemini", "--port", str(auditing.port)).returncode == 0, "no mode asked: used"
    finally:
        rewriting.stop()
        auditing.stop()


class OlderServe(http.server.BaseHTTPRequestHandler):
    """A serve from before /healthz named its mode: ok, and microcompact's metrics."""

    def do_GET(self) -> None:
        body = b"ok\n" if self.path == "/healthz" else b"# HELP microcompact_requests_total Requests.\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_serve_that_does_not_say_its_mode_is_refused_only_when_a_mode_is_asked(tmp_path: Path, agent: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OlderServe)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = str(server.server_address[1])
    try:
        line = one_line_error(launch(tmp_path, agent, "claude", "--audit", "--port", port))
        assert "does not say its mode (an older version), --audit was asked; stop it or pick another" in line
        assert not (tmp_path / "record.json").exists()
        assert launch(tmp_path, agent, "claude", "--port", port).returncode == 0, "no mode asked: it is used"
        assert json.loads((tmp_path / "record.json").read_text())["mode"] is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_started_serve_is_told_the_mode_asked() -> None:
    assert ServeSettings(audit=True).command()[-1] == "--audit"
    assert ServeSettings(audit=False).command()[-1] == "--rewrite"
    assert not {"--audit", "--rewrite"} & set(ServeSettings().command()), "the config file decides"
