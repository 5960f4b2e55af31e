"""Upstream URLs with userinfo (``http://user:password@host/v1``): the credentials go upstream, but the
startup line, option errors and every log line print the URL without them."""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.server.userinfo import HideUserinfo, without_userinfo
from support import local_http
from support.serve_process import ServeProcess
from upstream import ScriptedUpstream

SECRET = "s3cr3t-Pa55"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_startup_errors_and_logs_never_print_the_password(tmp_path: Path) -> None:
    port = closed_port()
    log = tmp_path / "proxy.log"
    with ScriptedUpstream() as scripted:
        anthropic = scripted.base_url.replace("http://", f"http://bob:{SECRET}2@")
        options = ["--db", str(tmp_path / "s.db"), "--log", str(log), "--anthropic-upstream", anthropic]
        options += ["--openai-upstream", f"http://alice:{SECRET}@127.0.0.1:{port}/v1"]
        served = ServeProcess(tmp_path / "home", *options).start()
        try:
            startup = "".join(served.stderr)
            assert f"forwarding to http://127.0.0.1:{port}/v1, {scripted.base_url} and" in startup
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            response = local_http.post(f"{served.base_url}/v1/chat/completions", json=chat, timeout=60)
            assert response.status_code == 502  # nothing listens there: a log line names the upstream
            assert f"127.0.0.1:{port}" in response.json()["error"]["message"]
            messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
            response = local_http.post(f"{served.base_url}/v1/messages", json=messages, timeout=60)
            assert response.status_code == 200
            assert scripted.requests[-1].headers["authorization"].startswith("Basic ")  # the userinfo went up
            assert served.stop() == 0
        finally:
            served.kill()
    printed = "".join(served.stderr) + log.read_text(encoding="utf-8")
    assert "unreachable" in log.read_text(encoding="utf-8")
    assert SECRET not in printed and "alice" not in printed and "bob" not in printed


@pytest.mark.parametrize(
    "url", [f"http://alice:{SECRET}@127.0.0.1:99999/v1", f"ftp://alice:{SECRET}@example.com/v1"], ids=["port", "scheme"]
)
def test_an_upstream_option_error_does_not_print_the_password(tmp_path: Path, url: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "s.db"), "--openai-upstream", url])
    assert result.exit_code == 2 and "--openai-upstream" in result.stderr
    assert SECRET not in result.stderr and "alice" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_log_records_lose_userinfo_in_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(HideUserinfo())
    logger = logging.getLogger("microcompact.test-userinfo")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("upstream %s failed", f"https://alice:{SECRET}@api.example.com/v1")
        logger.warning(f"dsn postgresql://app:{SECRET}@db:5432/sessions, raw @ kept, mail a@b.c kept")
        try:
            raise RuntimeError(f"cannot reach http://alice:p@ss:{SECRET}@host:8080/x")
        except RuntimeError:
            logger.exception("request failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert SECRET not in text and "alice" not in text
    assert "upstream https://api.example.com/v1 failed" in text
    assert "dsn postgresql://db:5432/sessions, raw @ kept, mail a@b.c kept" in text
    assert "cannot reach http://host:8080/x" in text and "RuntimeError" in text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://user:pw@host/v1", "http://host/v1"),
        ("https://token@host:8443", "https://host:8443"),
        ("http://host/v1?next=a@b", "http://host/v1?next=a@b"),  # an "@" after the host is not userinfo
        ("see http://u:p@h/a and https://v:q@k/b", "see http://h/a and https://k/b"),
        ("no url @ all", "no url @ all"),
    ],
)
def test_without_userinfo(text: str, shown: str) -> None:
    assert without_userinfo(text) == shown
