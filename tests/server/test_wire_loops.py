"""An upstream URL that leads back to the proxy (issue 28): refused at once with a 508 in the provider's shape,
the hop counted, nothing hangs, memory does not grow and SIGTERM still stops the process. Real ``serve``
subprocesses on 127.0.0.1: one pointed at itself, and two pointed at each other."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from microcompact.server.hops import MAX_HOPS, VIA_HEADER, Hops
from support import local_http
from support.serve_process import ServeProcess

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pointed_at(home: Path, port: int, target: int) -> ServeProcess:
    url = f"http://127.0.0.1:{target}"
    options = ["--db", str(home / "s.db"), "--port", str(port), "--openai-upstream", f"{url}/v1"]
    return ServeProcess(home, *options, "--anthropic-upstream", url).start()


def test_a_proxy_pointed_at_itself_refuses_at_once_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    served = _pointed_at(tmp_path, port, port)
    try:
        started = time.monotonic()
        answer = local_http.post(f"{served.base_url}/v1/chat/completions", json=CHAT, timeout=30)
        assert answer.status_code == 508 and time.monotonic() - started < 10
        error = answer.json()["error"]
        assert (
            "points at this microcompact serve itself" in error["message"] and "--openai-upstream" in error["message"]
        )
        assert set(error) >= {"message", "type", "param", "code"}  # OpenAI's error shape
        answer = local_http.post(
            f"{served.base_url}/v1/messages", json=MESSAGES, headers={"x-api-key": "k", "anthropic-version": "1"}
        )
        assert answer.status_code == 508 and answer.json()["type"] == "error"  # Anthropic's shape
        assert "--anthropic-upstream" in answer.json()["error"]["message"]
        page = local_http.get(f"{served.base_url}/metrics", timeout=10).text
        assert 'reason="loop"' in page
        log = (tmp_path / "logs" / "agent.log").read_text(encoding="utf-8")
        assert "came back to the proxy" in log
    finally:
        assert served.process is not None
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=30) is not None


@pytest.mark.slow
def test_two_proxies_pointed_at_each_other_refuse_with_the_hops_counted(tmp_path: Path) -> None:
    port_a, port_b = _free_port(), _free_port()
    a = _pointed_at(tmp_path / "a", port_a, port_b)
    b = _pointed_at(tmp_path / "b", port_b, port_a)
    try:
        answer = local_http.post(f"{a.base_url}/v1/chat/completions", json=CHAT, timeout=30)
        # a's answer is b's refusal passed back, or a's own: either way the loop names its hops
        assert answer.status_code == 508
        assert "(2 hop(s))" in answer.json()["error"]["message"]
    finally:
        a.kill()
        b.kill()


def test_the_hop_check_passes_a_short_chain_of_other_proxies_and_refuses_a_long_one() -> None:
    here = Hops("me")
    others = "1.1 microcompact-p1, 1.1 squid, 1.1 microcompact-p2"
    assert here.refusal({}, "openai") is None
    assert here.refusal({VIA_HEADER: others}, "openai") is None
    sent = here.forwarded({VIA_HEADER: others}, [("authorization", "k"), ("Via", others)])
    assert sent == [("authorization", "k"), (VIA_HEADER, f"{others}, 1.1 microcompact-me")]
    long_chain = ", ".join(f"1.1 microcompact-p{i}" for i in range(MAX_HOPS))
    refusal = here.refusal({VIA_HEADER: long_chain}, "gemini")
    assert refusal is not None and f"{MAX_HOPS} microcompact proxies" in refusal and "--gemini-upstream" in refusal
    assert "came back" in (here.refusal({VIA_HEADER: "1.1 microcompact-p1,1.0 microcompact-me"}, None) or "")


def test_each_process_has_its_own_entry() -> None:
    assert Hops().entry != Hops().entry
