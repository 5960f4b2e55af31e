"""``microcompact serve`` as users start it: one-line errors for bad options, a startup line naming where it
listens and what it forwards to, and proxy sessions that ``microcompact sessions`` lists afterwards."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import microcompact
from microcompact.cli import app
from microcompact.server.run import ServeOptions, serve
from support import local_http
from support.session_ids import named
from upstream import ScriptedUpstream

SRC = str(Path(microcompact.__file__).parent.parent)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "mchome"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    return home


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "70000"], "--port: expected 0 to 65535, got 70000"),
        (["--openai-upstream", "ftp://example.com"], "--openai-upstream: expected an http:// or https:// base URL"),
        (
            ["--anthropic-upstream", "http://host:99999"],
            "--anthropic-upstream: 'http://host:99999' has an invalid port",
        ),
        (["--context-limit", "10"], "--context-limit: expected at least 1024 tokens, got 10"),
        (["--host", "256.1.1.1", "--port", "0"], "cannot listen on 256.1.1.1:0"),
    ],
)
def test_bad_options_are_one_line_errors(home: Path, tmp_path: Path, args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "s.db"), *args])
    assert result.exit_code == 2
    assert says in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_port_in_use_is_a_one_line_error(home: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "s.db"), "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_a_bad_config_file_is_a_one_line_error(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("compression:\n  threshold: 7\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["serve", "--config", str(config), "--db", str(tmp_path / "s.db")])
    assert result.exit_code == 2 and "compression.threshold" in result.stderr


@pytest.mark.slow
def test_serve_runs_forwards_and_its_sessions_are_listed(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    env = {**os.environ, "MICROCOMPACT_HOME": str(home), "PYTHONPATH": SRC}
    with ScriptedUpstream() as upstream:
        command = [sys.executable, "-c", "from microcompact.cli import main; main()", "serve", "--port", "0"]
        command += ["--db", str(db), "--anthropic-upstream", upstream.base_url, "--log", str(tmp_path / "proxy.log")]
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            assert found, line
            assert upstream.base_url in line and "https://api.openai.com/v1" in line and str(db) in line
            base = found.group(1)
            assert local_http.get(f"{base}/healthz", timeout=5).text == "ok\n"
            body = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            headers = {
                "anthropic-version": "2023-06-01",
                "x-api-key": "sk-ant-secret-7",
                "x-microcompact-session": "cli-1",
            }
            response = local_http.post(f"{base}/v1/messages", json=body, headers=headers, timeout=10)
            stored = named("cli-1", home / "session-salt", "sk-ant-secret-7")
            assert response.status_code == 200 and response.headers["x-microcompact-session"] == stored
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=15)
    assert code == 0
    assert "sk-ant-secret-7" not in (tmp_path / "proxy.log").read_text(encoding="utf-8")
    assert upstream.requests[-1].headers["x-api-key"] == "sk-ant-secret-7"
    listed = CliRunner().invoke(app, ["sessions", "list", "--db", str(db)])
    assert listed.exit_code == 0 and "cli-1" in listed.stdout
    assert stored.partition("@")[2] in listed.stdout, "its credential's fingerprint"


def test_listening_beyond_localhost_without_a_key_is_warned_about(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []

    def no_server(self: object, sockets: list[socket.socket]) -> None:
        for sock in sockets:
            sock.close()

    monkeypatch.setattr("uvicorn.Server.run", no_server)
    serve(ServeOptions(host="0.0.0.0", port=0, db=str(tmp_path / "s.db")), said.append)
    assert said[0].startswith("warning: listening on 0.0.0.0 without --api-key")
    said.clear()
    serve(ServeOptions(host="0.0.0.0", port=0, db=str(tmp_path / "s.db"), api_key="k"), said.append)
    assert len(said) == 1 and said[0].startswith("microcompact serve: listening on http://0.0.0.0:")
