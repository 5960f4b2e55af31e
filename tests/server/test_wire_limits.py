"""The limits on the wire (server/limits.py, server/connections.py), against a real ``serve`` subprocess on
127.0.0.1: stalled connections (slowloris) under a 1,024-file limit, a header deadline, a body that stalls
(408), a 100 MB body (413 in the provider's shape, memory bounded, nothing stored or forwarded), the
connection cap, upstream connect and idle timeouts (504), and clients that leave while the upstream hangs
(their upstream connections closed). Every loop is bounded in count and time."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.server.limits import parse_size, size_text
from microcompact.store import open_store
from support import local_http
from support.serve_process import ServeProcess
from support.wire import (
    Blackhole,
    HangingUpstream,
    closed_by_peer,
    peak_rss_kib,
    raw_request,
    read_response,
    request_head,
    wait_for,
)
from upstream import ScriptedUpstream

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}
GEMINI_PATH = "/v1beta/models/gemini-test:generateContent"
JSON = {"content-type": "application/json"}
# path, provider: what each provider's error JSON looks like is checked by ``shape``
ROUTES = [
    ("/v1/chat/completions", "openai"),
    ("/v1/messages", "anthropic"),
    ("/v1/responses", "openai"),
    (GEMINI_PATH, "gemini"),
]


def shape(provider: str, status: int, body: bytes) -> str:
    """The error message of ``body``, after checking it has ``provider``'s error shape."""
    data = json.loads(body)
    error = data["error"]
    if provider == "anthropic":
        assert data["type"] == "error" and isinstance(error["type"], str)
    elif provider == "gemini":
        assert error["code"] == status and isinstance(error["status"], str)
    else:
        assert set(error) >= {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"]
    return str(error["message"])


def no_tracebacks(served: ServeProcess) -> None:
    text = "".join(served.stderr)
    assert "Traceback" not in text and "Too many open files" not in text, text[-3000:]


# ---------------------------------------------------------------------- slowloris


@pytest.mark.slow
def test_stalled_connections_beyond_the_file_limit_leave_healthz_up(tmp_path: Path) -> None:
    served = ServeProcess(tmp_path / "home", "--db", str(tmp_path / "s.db"), file_limit=1024).start()
    stalled: list[socket.socket] = []
    try:
        line = next(line for line in served.stderr if line.startswith("limits:"))
        cap = int(re.search(r"(\d+) connections", line).group(1))  # type: ignore[union-attr]
        assert cap < 1024 // 2, line  # one upstream connection per client connection fits in the file limit
        head = b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"  # never finished
        for _ in range(1100):
            sock = socket.create_connection(("127.0.0.1", served.port), timeout=30)
            sock.sendall(head)
            stalled.append(sock)
        response = local_http.get(f"{served.base_url}/healthz", timeout=30)
        assert response.status_code == 200 and response.text == "ok\n"
        # the proxy keeps at most ``cap`` open: the oldest stalled ones were closed to make room
        assert wait_for(lambda: sum(closed_by_peer(s) for s in stalled) >= 1100 - cap, timeout=60)
        assert local_http.get(f"{served.base_url}/healthz", timeout=30).status_code == 200
        assert served.process is not None and served.process.poll() is None
        no_tracebacks(served)
    finally:
        for sock in stalled:
            sock.close()
        served.kill()


# ---------------------------------------------------------------------- deadlines and the cap


@pytest.fixture(scope="module")
def hanging() -> Iterator[HangingUpstream]:
    with HangingUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def tight(hanging: HangingUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """Short deadlines; OpenAI and Gemini go to an upstream that never answers, Anthropic to one that never
    accepts."""
    tmp = tmp_path_factory.mktemp("tight")
    blackhole = Blackhole()
    options = [
        "--db",
        str(tmp / "s.db"),
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
        "--upstream-idle-timeout",
        "1",
        "--upstream-connect-timeout",
        "1",
        "--openai-upstream",
        f"{hanging.base_url}/v1",
        "--gemini-upstream",
        hanging.base_url,
        "--anthropic-upstream",
        blackhole.base_url,
    ]
    served = ServeProcess(tmp / "home", *options).start()
    try:
        yield served
    finally:
        served.kill()
        blackhole.close()


def test_a_connection_without_headers_in_time_is_closed(tight: ServeProcess) -> None:
    silent = socket.create_connection(("127.0.0.1", tight.port), timeout=30)
    partial = socket.create_connection(("127.0.0.1", tight.port), timeout=30)
    try:
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        assert wait_for(lambda: closed_by_peer(silent) and closed_by_peer(partial), timeout=30)
    finally:
        silent.close()
        partial.close()
    assert local_http.get(f"{tight.base_url}/healthz", timeout=30).status_code == 200


@pytest.mark.parametrize(("path", "provider"), ROUTES)
def test_a_body_that_stalls_gets_a_408_in_the_providers_shape(tight: ServeProcess, path: str, provider: str) -> None:
    sock = socket.create_connection(("127.0.0.1", tight.port), timeout=30)
    try:
        sock.sendall(request_head("POST", path, tight.port, {**JSON, "Content-Length": "1000"}) + b'{"model": "m"')
        status, headers, body = read_response(sock)
    finally:
        sock.close()
    assert status == 408 and headers["connection"] == "close"
    assert "stalled" in shape(provider, 408, body) and "--body-timeout" in shape(provider, 408, body)
    assert headers["x-microcompact-mode"] == "passthrough; reason=body_timeout"


def test_an_upstream_that_sends_nothing_gets_a_504_naming_the_option(tight: ServeProcess) -> None:
    response = local_http.post(f"{tight.base_url}/v1/chat/completions", json=CHAT, timeout=60)
    assert response.status_code == 504
    message = shape("openai", 504, response.content)
    assert "sent nothing for 1 s" in message and "--upstream-idle-timeout" in message
    gemini = local_http.post(
        f"{tight.base_url}{GEMINI_PATH}", json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, timeout=60
    )
    assert gemini.status_code == 504 and gemini.json()["error"]["status"] == "DEADLINE_EXCEEDED"
    no_tracebacks(tight)


def test_an_upstream_that_never_accepts_gets_a_504_naming_the_option(tight: ServeProcess) -> None:
    response = local_http.post(f"{tight.base_url}/v1/messages", json=MESSAGES, timeout=60)
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "timeout_error"
    message = shape("anthropic", 504, response.content)
    assert "could not be reached within 1 s" in message and "--upstream-connect-timeout" in message


@pytest.mark.slow
def test_at_the_connection_cap_busy_connections_stay_a_new_one_gets_a_503_and_healthz_answers(
    hanging: HangingUpstream, tmp_path: Path
) -> None:
    options = ["--db", str(tmp_path / "s.db"), "--max-connections", "4", "--openai-upstream", f"{hanging.base_url}/v1"]
    served = ServeProcess(tmp_path / "home", *options, "--audit").start()
    before = hanging.accepted
    busy = [raw_request(served.port, "POST", "/v1/chat/completions", json.dumps(CHAT).encode(), JSON) for _ in range(4)]
    try:
        assert wait_for(lambda: hanging.accepted - before >= 4, timeout=60)  # all four wait on the upstream
        status, headers, body = _one_request(served.port, "GET", "/metrics")
        assert status == 503 and headers["connection"] == "close"
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_connections" and "all 4 connections" in error["message"]
        # a health check still answers: a cap full of slow clients is load, not failure (issue 28)
        status, headers, body = _one_request(served.port, "GET", "/healthz")
        assert (status, body, headers["connection"]) == (200, b"ok\n", "close")
        assert headers["x-microcompact-serve-mode"] == "audit", "the launchers read the mode over the cap too"
        assert not any(closed_by_peer(sock) for sock in busy)  # a request in flight is never dropped for it
    finally:
        for sock in busy:
            sock.close()
    # once they left, their places (and upstream connections) are free again
    assert wait_for(lambda: local_http.get(f"{served.base_url}/healthz", timeout=30).status_code == 200, timeout=60)
    assert local_http.get(f"{served.base_url}/healthz", timeout=30).headers["x-microcompact-serve-mode"] == "audit"
    served.kill()


def _one_request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(request_head(method, path, port))
        return read_response(sock)
    finally:
        sock.close()


def test_at_the_cap_a_new_connection_closes_a_stalled_one(tmp_path: Path) -> None:
    served = ServeProcess(tmp_path / "home", "--db", str(tmp_path / "s.db"), "--max-connections", "3").start()
    stalled = [socket.create_connection(("127.0.0.1", served.port), timeout=30) for _ in range(3)]
    try:
        for sock in stalled:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert local_http.get(f"{served.base_url}/healthz", timeout=30).status_code == 200
        assert wait_for(lambda: closed_by_peer(stalled[0]), timeout=30)  # the oldest went
    finally:
        for sock in stalled:
            sock.close()
        served.kill()


# ---------------------------------------------------------------------- clients that leave


def test_abandoned_clients_leave_no_upstream_connection_open(hanging: HangingUpstream, tmp_path: Path) -> None:
    options = ["--db", str(tmp_path / "s.db"), "--openai-upstream", f"{hanging.base_url}/v1"]
    options += ["--anthropic-upstream", hanging.base_url]
    served = ServeProcess(tmp_path / "home", *options).start()
    try:
        assert wait_for(lambda: hanging.open == 0, timeout=30)
        before = hanging.accepted
        clients = []
        for i in range(30):
            path, body = ("/v1/chat/completions", CHAT) if i % 2 else ("/v1/messages", MESSAGES)
            unique = json.loads(json.dumps(body))
            unique["messages"][0]["content"] = f"hello {i}"
            clients.append(raw_request(served.port, "POST", path, json.dumps(unique).encode(), JSON))
        assert wait_for(lambda: hanging.accepted - before == 30 and hanging.open == 30, timeout=120)
        for sock in clients:
            sock.close()
        assert wait_for(lambda: hanging.open == 0, timeout=60), f"{hanging.open} upstream connections still open"
        assert local_http.get(f"{served.base_url}/healthz", timeout=30).status_code == 200
        no_tracebacks(served)
    finally:
        served.kill()


# ---------------------------------------------------------------------- a 100 MB body


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as upstream:
        yield upstream


def serve_on(upstream: ScriptedUpstream, tmp: Path, *extra: str) -> ServeProcess:
    options = ["--db", str(tmp / "s.db"), "--openai-upstream", upstream.openai_base_url]
    options += ["--anthropic-upstream", upstream.base_url, "--gemini-upstream", upstream.base_url, *extra]
    return ServeProcess(tmp / "home", *options).start()


HUNDRED_MB = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def plain(scripted: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """Default limits."""
    served = serve_on(scripted, tmp_path_factory.mktemp("plain"))
    try:
        yield served
    finally:
        served.kill()


@pytest.mark.parametrize(("path", "provider"), ROUTES)
def test_a_declared_100_mb_body_gets_a_413_before_it_is_sent(
    scripted: ScriptedUpstream, plain: ServeProcess, path: str, provider: str
) -> None:
    before = len(scripted.requests)
    sock = socket.create_connection(("127.0.0.1", plain.port), timeout=30)
    try:
        sock.sendall(request_head("POST", path, plain.port, {**JSON, "Content-Length": str(HUNDRED_MB)}))
        status, headers, body = read_response(sock)  # no byte of the body was sent
    finally:
        sock.close()
    assert status == 413 and headers["connection"] == "close"
    message = shape(provider, 413, body)
    assert "over this proxy's limit of 64 MiB" in message and "--max-body-size" in message
    if provider == "anthropic":
        assert json.loads(body)["error"]["type"] == "request_too_large"
    assert len(scripted.requests) == before


# 3 MB of words: one 3 MB run of a single letter is the tokenizer's worst case (1.1 s of CPU to count),
# which is not what this test is about.
UNDER_THE_LIMIT = "zzzz zzz " * 333_334


def test_a_body_under_the_limit_still_goes_up(scripted: ScriptedUpstream, plain: ServeProcess) -> None:
    assert len(UNDER_THE_LIMIT) > 3_000_000
    big: dict[str, Any] = {**MESSAGES, "messages": [{"role": "user", "content": UNDER_THE_LIMIT}]}
    response = local_http.post(f"{plain.base_url}/v1/messages", json=big, timeout=60)
    assert response.status_code == 200, response.text[:300]
    assert scripted.requests[-1].body["messages"][0]["content"] == UNDER_THE_LIMIT


@pytest.mark.slow
def test_a_100_mb_body_is_refused_with_memory_bounded_and_nothing_stored(
    scripted: ScriptedUpstream, tmp_path: Path
) -> None:
    served = serve_on(scripted, tmp_path, "--max-body-size", "8MiB")
    before = len(scripted.requests)
    assert served.process is not None
    try:
        assert local_http.get(f"{served.base_url}/healthz", timeout=30).status_code == 200
        baseline = peak_rss_kib(served.process.pid)
        piece = b"x" * (1024 * 1024)
        text = b'{"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "'

        def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to refuse it by
            yield text
            for _ in range(100):
                yield piece

        response = local_http.post(f"{served.base_url}/v1/messages", content=chunks(), headers=JSON, timeout=120)
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "request_too_large"
        assert "more than 8 MiB sent" in shape("anthropic", 413, response.content)
        # and with a Content-Length, as SDKs send it: the client finishes sending and reads the 413
        whole = text + b"y" * HUNDRED_MB + b'"}]}'
        response = local_http.post(f"{served.base_url}/v1/messages", content=whole, headers=JSON, timeout=120)
        assert response.status_code == 413 and "Content-Length 104,857,6" in response.json()["error"]["message"]
        grown_mib = (peak_rss_kib(served.process.pid) - baseline) / 1024
        assert grown_mib < 48, f"the proxy's peak memory grew by {grown_mib:.0f} MiB for a refused 100 MB body"
        assert len(scripted.requests) == before
        assert served.stop() == 0
    finally:
        served.kill()
    store = open_store(str(tmp_path / "s.db"))
    try:
        assert store.list_sessions() == []
    finally:
        store.close()


# ---------------------------------------------------------------------- the options


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-body-size", "abc"], "--max-body-size: expected a size such as 64MiB"),
        (["--max-body-size", "100"], "--max-body-size: expected at least 1 KiB, got 100 bytes"),
        (["--header-timeout", "0"], "--header-timeout: expected a number of seconds above 0, got 0"),
        (["--body-timeout", "-1"], "--body-timeout: expected a number of seconds above 0, got -1"),
        (["--upstream-connect-timeout", "nan"], "--upstream-connect-timeout: expected a number of seconds"),
        (["--upstream-idle-timeout", "-5"], "--upstream-idle-timeout: expected seconds, 0 for none, got -5"),
        (["--max-connections", "0"], "--max-connections: expected at least 1, got 0"),
        (["--max-connections", "100000000"], "needs more open files than the limit of"),
    ],
)
def test_bad_limit_options_are_one_line_errors(tmp_path: Path, args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "s.db"), "--port", "0", *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_sizes_read_as_people_write_them() -> None:
    assert parse_size("64MiB") == parse_size("64M") == parse_size("64m") == 64 * 1024 * 1024
    assert parse_size("64MB") == 64_000_000 and parse_size("500KB") == 500_000 and parse_size("1024") == 1024
    assert parse_size("1.5GiB") == 3 * 512 * 1024 * 1024
    assert size_text(64 * 1024 * 1024) == "64 MiB" and size_text(1500) == "1500 bytes"
