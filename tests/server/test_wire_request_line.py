"""A request path or header the proxy cannot forward as the client meant it, against a real ``serve`` over raw
sockets (an HTTP client library would clean the path first): a 400 in the provider's shape that says why,
nothing forwarded, never a 500 (a ``%00`` in the path and a header byte outside ASCII were internal errors;
a ``..`` segment, spelled ``%2F..%2F``, reached a path of the provider that no route names)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from microcompact.server.wire_checks import path_problem
from support.serve_process import ServeProcess
from support.wire import raw_request, read_response
from upstream import ScriptedUpstream

OPENAI = {"authorization": "Bearer sk-line", "content-type": "application/json"}
ANTHROPIC = {"x-api-key": "sk-ant-line", "anthropic-version": "2023-06-01", "content-type": "application/json"}
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
MESSAGES = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(validate=False) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def served(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("request-line")
    options = ["--db", str(tmp / "s.db"), "--openai-upstream", upstream.openai_base_url]
    process = ServeProcess(tmp / "home", *options, "--anthropic-upstream", upstream.base_url).start()
    try:
        yield process
    finally:
        process.kill()


def ask(
    served: ServeProcess, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    sock = raw_request(served.port, method, path, body, headers)
    try:
        return read_response(sock)
    finally:
        sock.close()


PATHS = [
    ("nul", "/v1/models/a%00b", "holds a control character ('\\x00')"),
    ("crlf", "/v1/models/a%0d%0aX-Forged", "holds a control character ('\\r')"),
    ("dot-dot", "/v1/embeddings/../../v1/chat/completions", "'..' segment"),
    ("encoded-dot-dot", "/v1/embeddings/%2e%2e/%2e%2e/admin", "'..' segment"),
    ("encoded-slash-dot-dot", "/v1/embeddings%2F..%2F..%2Fv1%2Fchat%2Fcompletions", "'..' segment"),
    ("dot", "/v1/./models", "'.' or '..' segment"),
    ("encoded-question-mark", "/v1/models/x%3Fkey=abc", "an encoded '?' (%3F)"),
    ("encoded-hash", "/v1/files/x%23y", "an encoded '#' (%23)"),
]


@pytest.mark.parametrize(("path", "says"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_a_path_that_cannot_be_forwarded_is_a_400_saying_why(
    served: ServeProcess, upstream: ScriptedUpstream, path: str, says: str
) -> None:
    before = len(upstream.requests)
    status, headers, body = ask(served, "GET", path, OPENAI)
    assert status == 400, body[:300]
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and says in error["message"], error["message"]
    assert "this proxy forwards no such path" in error["message"]
    assert headers["x-microcompact-mode"] == "passthrough; reason=invalid_request"
    assert "x-forged" not in headers
    assert len(upstream.requests) == before, "nothing goes up"
    stderr = "".join(served.stderr)
    assert "Traceback" not in stderr and "InvalidURL" not in stderr and "X-Forged" not in stderr


def test_an_anthropic_path_gets_the_anthropic_shape(served: ServeProcess, upstream: ScriptedUpstream) -> None:
    before = len(upstream.requests)
    status, _, body = ask(served, "POST", "/v1/messages/batches/%00", ANTHROPIC, MESSAGES)
    payload = json.loads(body)
    assert status == 400 and payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert len(upstream.requests) == before


HEADERS = [
    ("chat", "/v1/chat/completions", {**OPENAI, "x-client-note": "caf\xe9"}, CHAT, "x-client-note"),
    ("chat-credential", "/v1/chat/completions", {**OPENAI, "authorization": "Bearer k\xe9y"}, CHAT, "authorization"),
    ("messages", "/v1/messages", {**ANTHROPIC, "anthropic-version": "\xe9"}, MESSAGES, "anthropic-version"),
    ("forwarded", "/v1/embeddings", {**OPENAI, "session-id": "\xff\xfe"}, b'{"input": "a"}', "session-id"),
]


@pytest.mark.parametrize(("path", "headers", "body", "name"), [h[1:] for h in HEADERS], ids=[h[0] for h in HEADERS])
def test_a_header_outside_ascii_is_a_400_naming_it_never_its_value(
    served: ServeProcess, upstream: ScriptedUpstream, path: str, headers: dict[str, str], body: bytes, name: str
) -> None:
    before = len(upstream.requests)
    status, _, answer = ask(served, "POST", path, headers, body)
    assert status == 400, answer[:300]
    message = json.loads(answer)["error"]["message"]
    assert f"the request header {name} holds a byte outside ASCII" in message, message
    assert headers[name].encode("latin-1") not in answer and "k\xe9y" not in message
    assert len(upstream.requests) == before, "nothing goes up"
    assert "Traceback" not in "".join(served.stderr)


def test_the_proxys_own_headers_may_hold_any_byte(served: ServeProcess, upstream: ScriptedUpstream) -> None:
    before = len(upstream.requests)
    status, headers, _ = ask(
        served, "POST", "/v1/chat/completions", {**OPENAI, "x-microcompact-session": "s\xe9ss"}, CHAT
    )
    assert status == 200 and headers["x-microcompact-mode"] == "compacted"
    assert len(upstream.requests) == before + 1


def test_a_connection_carries_on_after_a_refused_path(served: ServeProcess) -> None:
    sock = raw_request(served.port, "GET", "/v1/models/a%00b", b"", OPENAI)
    try:
        assert read_response(sock)[0] == 400
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n\r\n".encode())
        status, _, body = read_response(sock)
        assert status == 200 and body == b"ok\n"
    finally:
        sock.close()


def test_ordinary_paths_pass() -> None:
    for path in ("/v1/models", "/v1/files/file-abc.jsonl/content", "/v1beta/models/gemini-2.5-pro:generateContent"):
        assert path_problem(path) is None, path
    assert path_problem("/v1/models/..hidden") is None  # a name starting with dots is no dot segment
