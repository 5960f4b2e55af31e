"""Two ``serve`` apps on one store (shared routers), a Claude Code session's requests alternating between
them: the upstream receives exactly the requests one app alone sends, and the store holds the same rows.

Both apps run in this process on their own store connection and port (to the store they are two writers,
as two processes are: ``test_router_processes.py`` covers real processes); the scripted upstream serves
the session's recorded assistant messages. Passes run inline so that the comparison is exact (with
background passes a single process is itself timing-dependent).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
import uvicorn

from microcompact.config import Config
from microcompact.replay import load_transcript
from microcompact.router import SessionRouter
from microcompact.server import Proxy, ProxySettings
from microcompact.server.run import proxy_config
from microcompact.server.session_key import default_salt_path
from support.paths import NORMALIZED
from support.session_ids import named
from support.stored_session import normalized_export
from upstream import ScriptedUpstream
from upstream.replay import TranscriptReplay, anthropic_history
from upstream.serving import ThreadServer, tcp_listener


class App:
    """The proxy app on a shared router, served by uvicorn on 127.0.0.1 in a thread."""

    def __init__(self, upstream: str, store: Any, config: Config) -> None:
        self.router = SessionRouter(config, store=store, shared=True)
        settings = ProxySettings(openai_upstream=f"{upstream}/v1", anthropic_upstream=upstream)
        self.proxy = Proxy(self.router, settings)
        self.socket = tcp_listener()
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = ThreadServer(
            uvicorn.Config(self.proxy.app(), log_level="warning", access_log=False, lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.005)

    def settle(self) -> None:
        """Wait for the answered requests' follow-ups (calibration, the turn's end)."""
        deadline = time.monotonic() + 10
        while self.proxy._follow_ups and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self) -> None:
        self.server.stop()
        self.thread.join(10)
        self.socket.close()
        self.router.close()


def upstream_messages(upstream: ScriptedUpstream) -> list[Any]:
    return [r.body["messages"] for r in upstream.requests if r.path == "/v1/messages"]


def run(apps: list[App], recorded: list[dict[str, Any]], key: str) -> None:
    """Claude Code's side of the recorded session, request n going to ``apps[n % len(apps)]``."""
    with httpx.Client(timeout=60) as client:
        n = 0
        for i, m in enumerate(recorded):
            if m["role"] != "assistant" or i == 0:
                continue
            system, messages = anthropic_history(recorded[:i])
            app = apps[n % len(apps)]
            response = client.post(
                f"{app.url}/v1/messages",
                json={"model": "claude-replay", "max_tokens": 1024, "system": system, "messages": messages},
                headers={"anthropic-version": "2023-06-01", "x-api-key": "k", "x-microcompact-session": key},
            )
            assert response.status_code == 200, response.text[:300]
            assert "x-microcompact-degraded" not in response.headers
            app.settle()
            n += 1


@pytest.mark.slow  # about 10 s on each backend
def test_two_proxies_taking_turns_send_what_one_proxy_sends(store_factory):
    recorded = load_transcript(NORMALIZED / "cc_subagent_a2898e3.jsonl")
    config = proxy_config(None, 32_000).with_overrides(source="test", compression={"micro_compact_background": False})
    sent = {}
    for label, count in (("one", 1), ("two", 2)):
        with ScriptedUpstream(TranscriptReplay(recorded)) as upstream:
            apps = [App(upstream.base_url, store_factory.open(), config) for _ in range(count)]
            try:
                run(apps, recorded, label)
            finally:
                for app in apps:
                    app.close()
            sent[label] = upstream_messages(upstream)
    assert len(sent["two"]) == len(sent["one"]) > 10
    assert sent["two"] == sent["one"], "every upstream request is the one a single proxy sends"
    assert sent["one"][-1] != anthropic_history(recorded[:-1])[1], "the proxies compacted"
    store = store_factory.open()
    salt = default_salt_path()  # the apps name no salt file: $MICROCOMPACT_HOME's, a temporary one under pytest
    two, one = named("two", salt, "k"), named("one", salt, "k")
    exported = normalized_export(store, one)
    assert exported and normalized_export(store, two) == exported, "the conversation under its key, the same rows"
