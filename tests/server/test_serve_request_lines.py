"""``serve`` says what it does (issue 28): the log's path at startup, and one line per answered request on
stderr (status, request, conversation, mode, occupancy, folds, dollars), the same figures as the response
headers; ``--quiet`` leaves the per-request lines out. A real ``serve`` subprocess, a scripted upstream."""

from __future__ import annotations

from pathlib import Path

import pytest

from microcompact.server.request_line import request_line
from support import local_http
from support.serve_process import ServeProcess
from support.wire import wait_for
from upstream import ScriptedUpstream

ANSWERED = "200 POST /v1/chat/completions"
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}


def _serve(home: Path, upstream: ScriptedUpstream, *extra: str) -> ServeProcess:
    return ServeProcess(home, "--db", str(home / "s.db"), "--openai-upstream", f"{upstream.base_url}/v1", *extra)


def test_a_request_gets_one_line_with_the_figures_its_headers_carry(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    served = _serve(tmp_path / "home", upstream).start()
    try:
        assert any(line.strip() == f"logs in {tmp_path / 'home' / 'logs' / 'agent.log'}" for line in served.stderr)
        answer = local_http.post(
            f"{served.base_url}/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer k"}
        )
        assert answer.status_code == 200
        session = answer.headers["x-microcompact-session"]
        assert wait_for(lambda: any(line.startswith(ANSWERED) for line in served.stderr), timeout=30)
        [line] = [line for line in served.stderr if line.startswith(ANSWERED)]
        assert session in line
        assert answer.headers["x-microcompact-mode"] in line
        assert f"occupancy {answer.headers['x-microcompact-occupancy']}%" in line
        assert "Bearer" not in line and " k " not in line
    finally:
        served.kill()


@pytest.mark.slow
def test_quiet_leaves_the_request_lines_out(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    served = _serve(tmp_path / "home", upstream, "--quiet").start()
    try:
        assert local_http.post(f"{served.base_url}/v1/chat/completions", json=CHAT).status_code == 200
        assert local_http.get(f"{served.base_url}/healthz").status_code == 200
        assert not wait_for(lambda: any(line.startswith(ANSWERED) for line in served.stderr), timeout=3)
        assert any("listening on" in line for line in served.stderr)
    finally:
        served.kill()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, "502 POST /v1/messages  -  -"),
        (
            {
                "x-microcompact-session": "s@f",
                "x-microcompact-mode": "compacted",
                "x-microcompact-occupancy": "18.3",
                "x-microcompact-folds": "2",
                "x-microcompact-cost": "0.123456",
                "x-microcompact-cost-uncompacted": "0.5",
                "x-microcompact-degraded": "summarizer-failed",
            },
            "502 POST /v1/messages  s@f  compacted  occupancy 18.3%  folds 2  $0.1235  (uncompacted $0.5000)"
            "  degraded: summarizer-failed",
        ),
    ],
)
def test_the_line_reads_the_headers(headers: dict[str, str], expected: str) -> None:
    assert request_line(502, "POST", "/v1/messages", headers) == expected


def test_a_long_path_is_cut() -> None:
    line = request_line(200, "GET", "/v1/files/" + "x" * 500, {})
    assert len(line) < 120 and "..." in line
