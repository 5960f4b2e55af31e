"""``microcompact doctor`` (issue 28): each mistake a new user made gets its own one-line finding, against
real HTTP servers on 127.0.0.1: a provider stand-in that checks keys the way the providers do, and serve's
app for the loop; the command in-process, and as a real process in the slow suite."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from microcompact.config import Config
from microcompact.server.upstream_check import Status, run_checks
from support.cli_runs import RUNNERS, CliRun
from support.proxy_server import ProxyServer

GOOD = "good-key"
# path -> the header that must carry GOOD (value as sent)
KEYED = {
    "/v1/models": (("authorization", f"Bearer {GOOD}"), ("x-api-key", GOOD)),
    "/v1beta/models": (("x-goog-api-key", GOOD),),
}


class _Provider(BaseHTTPRequestHandler):
    """OpenAI's /v1/models, Anthropic's /v1/models and Gemini's /v1beta/models, each 401 without the key;
    everything else 404, as the providers answer a wrong base URL."""

    def do_GET(self) -> None:
        accepted = KEYED.get(self.path)
        if accepted is None:
            self._send(404, {"error": {"message": "not found"}})
        elif any(self.headers.get(name) == value for name, value in accepted):
            self._send(200, {"data": [{"id": "m"}]})
        else:
            self._send(401, {"error": {"message": "invalid key"}})

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


ALL_KEYS = {"OPENAI_API_KEY": GOOD, "ANTHROPIC_API_KEY": GOOD, "GEMINI_API_KEY": GOOD}


def _findings(provider: str, env: dict[str, str], **urls: str) -> dict[str, tuple[Status, str]]:
    found = run_checks(
        Config(),
        urls.get("openai", f"{provider}/v1"),
        urls.get("anthropic", provider),
        urls.get("gemini", provider),
        port=urls.get("port") and int(urls["port"]),
        env=env,
        timeout=10,
    )
    return {f.check: (f.status, f.detail) for f in found}


def test_right_urls_and_keys_pass_every_check(provider: str) -> None:
    found = _findings(provider, ALL_KEYS)
    assert {name: status for name, (status, _) in found.items()} == {
        "summarizer": Status.OK,
        "OpenAI": Status.OK,
        "Anthropic": Status.OK,
        "Gemini": Status.OK,
    }


def test_an_openai_upstream_without_v1_names_the_fix(provider: str) -> None:
    status, detail = _findings(provider, ALL_KEYS, openai=provider)["OpenAI"]
    assert status is Status.FAILED and detail == f"--openai-upstream lacks /v1: use {provider}/v1"


def test_an_anthropic_upstream_with_v1_names_the_fix(provider: str) -> None:
    status, detail = _findings(provider, ALL_KEYS, anthropic=f"{provider}/v1")["Anthropic"]
    assert status is Status.FAILED and "ends in /v1" in detail and f"use {provider}" in detail


def test_a_refused_key_and_a_missing_one_are_told_apart(provider: str) -> None:
    found = _findings(provider, {"OPENAI_API_KEY": "wrong", "GOOGLE_API_KEY": GOOD})
    assert found["OpenAI"] == (Status.FAILED, f"--openai-upstream {provider}/v1: the key was refused (401)")
    assert found["Anthropic"] == (
        Status.SKIPPED,
        f"--anthropic-upstream {provider} answers; no ANTHROPIC_API_KEY in the environment to check",
    )
    assert found["Gemini"][0] is Status.OK  # GOOGLE_API_KEY serves too


def test_an_unreachable_upstream_is_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    status, detail = _findings("unused", ALL_KEYS, openai=f"http://127.0.0.1:{closed}/v1")["OpenAI"]
    assert status is Status.FAILED and "unreachable (ConnectError)" in detail


def test_an_upstream_at_serves_own_port_is_a_loop(provider: str) -> None:
    status, detail = _findings(provider, ALL_KEYS, anthropic="http://127.0.0.1:8765", port="8765")["Anthropic"]
    assert status is Status.FAILED and "this proxy's own address" in detail


def test_an_upstream_that_is_a_microcompact_proxy_is_a_loop(provider: str, tmp_path: Path) -> None:
    with ProxyServer(provider, tmp_path / "s.db") as served:  # serve's app on 127.0.0.1, in this process
        status, detail = _findings(provider, ALL_KEYS, openai=f"{served.base_url}/v1")["OpenAI"]
    assert status is Status.FAILED and "answers as a microcompact proxy" in detail


def test_a_summarizer_without_its_key_is_flagged() -> None:
    remote = Config.model_validate(
        {"auxiliary": {"compression": {"provider": "openai", "base_url": "https://api.example.com/v1"}}}
    )
    local = Config.model_validate(
        {"auxiliary": {"compression": {"provider": "vllm", "base_url": "http://127.0.0.1:8000/v1"}}}
    )
    [finding] = [f for f in run_checks(remote, "", "", "", port=None, env={}) if f.check == "summarizer"]
    assert finding.status is Status.FAILED and "OPENAI_API_KEY, which is not set" in finding.detail
    [finding] = [f for f in run_checks(local, "", "", "", port=None, env={}) if f.check == "summarizer"]
    assert finding.status is Status.SKIPPED


@pytest.mark.parametrize("run", RUNNERS)
def test_the_command_prints_a_table_and_exits_1_on_a_failure(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: CliRun
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)  # the command (a subprocess too) reads the environment
    home = tmp_path / "home"

    def run_cli(home: Path, *args: str) -> Any:
        return run(tmp_path, home, *args)

    ok = run_cli(home, "doctor", "--openai-upstream", f"{provider}/v1", "--anthropic-upstream", provider,
                 "--gemini-upstream", provider)  # fmt: skip
    assert ok.returncode == 0 and "skipped" in ok.stdout, ok.stdout + ok.stderr  # no keys: URLs checked only
    bad = run_cli(home, "doctor", "--openai-upstream", provider, "--anthropic-upstream", provider,
                  "--gemini-upstream", provider)  # fmt: skip
    assert bad.returncode == 1 and "lacks /v1" in bad.stdout and "Traceback" not in bad.stderr
    config = tmp_path / "bad.yaml"
    config.write_text("compression: {threshold: 7}\n", encoding="utf-8")
    refused = run_cli(home, "doctor", "--config", str(config))
    assert refused.returncode == 2 and refused.stderr.startswith("error:") and "threshold" in refused.stderr
