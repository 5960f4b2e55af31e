"""``serve --audit`` as users start it (a real ``serve`` subprocess): the startup line says so, the answer's
mode and the per-request line say ``audit``, the config file's ``proxy.audit`` does the same and
``--rewrite`` beats it; ``microcompact sessions rewrite ID`` is the switch for one conversation, and an
unknown conversation is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.keys import REWRITE_META
from microcompact.server.request_line import request_line
from microcompact.store import open_store
from support import local_http
from support.serve_process import ServeProcess
from support.wire import wait_for
from upstream import ScriptedUpstream

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}


def _serve(home: Path, upstream: ScriptedUpstream, *extra: str) -> ServeProcess:
    return ServeProcess(home, "--db", str(home / "s.db"), "--openai-upstream", f"{upstream.base_url}/v1", *extra)


def _mode_and_line(served: ServeProcess, upstream: ScriptedUpstream) -> tuple[str, str]:
    raw = json.dumps(CHAT, separators=(", ", ": ")).encode()  # not the proxy's own spelling of it
    answer = local_http.post(
        f"{served.base_url}/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200 and upstream.requests[-1].raw == raw
    assert wait_for(lambda: any(line.startswith("200 POST") for line in served.stderr), timeout=30)
    [line] = [line for line in served.stderr if line.startswith("200 POST")]
    return answer.headers["x-microcompact-mode"], line


def test_audit_is_said_at_startup_on_the_answer_and_on_its_line(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    served = _serve(tmp_path / "home", upstream, "--audit").start()
    try:
        assert any(
            line.startswith("audit mode: every request goes upstream as the client sent it") for line in served.stderr
        )
        mode, line = _mode_and_line(served, upstream)
        assert mode == "audit" and "  audit  " in line
    finally:
        served.kill()


@pytest.mark.slow
def test_the_config_files_audit_and_rewrite_beating_it(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("proxy:\n  audit: true\n", encoding="utf-8")
    served = _serve(tmp_path / "home", upstream, "--config", str(config)).start()
    try:
        assert _mode_and_line(served, upstream)[0] == "audit"
    finally:
        served.kill()
    served = _serve(tmp_path / "home2", upstream, "--config", str(config), "--rewrite").start()
    try:
        assert not any(line.startswith("audit mode") for line in served.stderr)
        assert _mode_and_line(served, upstream)[0] == "compacted"
    finally:
        served.kill()


def test_a_bad_audit_value_in_the_config_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("proxy:\n  audit: sometimes\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["serve", "--config", str(config), "--db", str(tmp_path / "s.db")])
    assert result.exit_code == 2 and "proxy.audit" in result.stderr and "Traceback" not in result.stderr


def test_sessions_rewrite_sets_the_switch_by_prefix_and_turns_it_off(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with open_store(db) as store:
        store.create_session("conversation-one@abc")
        store.create_session("other")
    result = CliRunner().invoke(app, ["sessions", "rewrite", "conversation-o", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "conversation-one@abc: rewriting" in result.output
    with open_store(db) as store:
        assert store.session_meta("conversation-one@abc").get(REWRITE_META) is True
        assert REWRITE_META not in store.session_meta("other")
    assert (
        CliRunner().invoke(app, ["sessions", "rewrite", "conversation-one@abc", "--off", "--db", str(db)]).exit_code
        == 0
    )
    with open_store(db) as store:
        assert store.session_meta("conversation-one@abc").get(REWRITE_META) is False
    missing = CliRunner().invoke(app, ["sessions", "rewrite", "nobody", "--db", str(db)])
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1 and "no session 'nobody'" in missing.stderr


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {
                "x-microcompact-session": "s@f",
                "x-microcompact-mode": "audit",
                "x-microcompact-occupancy": "18.3",
                "x-microcompact-would-have-folds": "2",
                "x-microcompact-cost": "0.5",
                "x-microcompact-cost-uncompacted": "0.5",
                "x-microcompact-would-have-cost": "0.123456",
                "x-microcompact-would-have-saved": "0.376544",
            },
            "200 POST /v1/messages  s@f  audit  occupancy 18.3%  would-have folds 2  $0.5000  (uncompacted $0.5000)"
            "  would have $0.1235  (saved $0.3765)",
        ),
    ],
)
def test_the_audit_line_reads_the_would_have_headers(headers: dict[str, str], expected: str) -> None:
    assert request_line(200, "POST", "/v1/messages", headers) == expected
