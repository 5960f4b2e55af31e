"""No request waits for the summarizer (issue 26): not for its passes (they run on the worker, a fold is
adopted only once it is done), and not for its setup either. A model summarizer's SDK import and client
took most of a second, paid by the first request of ``serve`` (the one request the cost bench's slow row saw
held over 0.5 s), and its client's TLS setup by the first request of every conversation: serve makes them at
startup, one client per endpoint for every session."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from microcompact.config import Config
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.store import open_store
from microcompact.summarizers import summarizer_for
from support.chat_server import ChatServer
from support.serve_process import ServeProcess
from upstream import ScriptedUpstream

KEY_ENV = "MICROCOMPACT_TEST_SLOW_SUMMARIZER_KEY"
OVERHEAD = re.compile(r'^microcompact_proxy_overhead_seconds_bucket\{le="([^"]+)"\} (\d+)$', re.MULTILINE)


def model_summarizer(base_url: str) -> dict[str, Any]:
    return {"provider": "openai", "model": "slow-model", "base_url": base_url, "api_key_env": KEY_ENV}


def chat(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": history}


class CountedClients:
    """``openai.OpenAI`` made to count the clients made while it is patched in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import openai  # here, not at collection (support.lazy_sdk): the patch goes on the module itself

        self.made = 0
        real = openai.OpenAI

        def made(*args: Any, **kwargs: Any) -> Any:
            self.made += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(openai, "OpenAI", made)


def test_serve_makes_the_summarizer_before_the_first_request(
    chat_server: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine side of serve makes the model summarizer's client when it starts; the first requests of
    two conversations make none (before: one each, the first also importing the SDK)."""
    monkeypatch.setenv(KEY_ENV, "sk-warm-test")
    clients = CountedClients(monkeypatch)
    config = Config().with_overrides(source="test", **{"auxiliary.compression": model_summarizer(chat_server.base_url)})
    store = open_store(str(tmp_path / "s.db"))
    router = SessionRouter(config, store=store)
    try:
        compaction = Compaction(router, Metrics())
        made_at_startup = clients.made
        provider = OpenAIFormat()
        for conversation in ("first", "second"):
            history = [{"role": "user", "content": f"Open the {conversation} conversation."}]
            prepared = compaction.prepare(provider, chat(history), f"key-{conversation}", history)
            assert prepared.session is not None and prepared.degraded is None
        assert made_at_startup == 1 and clients.made == 1
        # The client made at startup is the one the sessions' summarizers call.
        assert prepared.session.summarizer.merge("", [{"role": "user", "content": "x " * 50}])
        assert len(chat_server.requests) == 1
    finally:
        router.close()
        store.close()


def test_summarizers_of_one_endpoint_share_its_client(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """One client per endpoint, key and timeout: another key or another endpoint gets its own."""
    monkeypatch.setenv(KEY_ENV, "sk-one")
    clients = CountedClients(monkeypatch)

    def made_for(base_url: str, timeout: float = 30.0) -> None:
        aux = {**model_summarizer(base_url), "timeout": timeout}
        summarizer_for(Config().with_overrides(source="test", **{"auxiliary.compression": aux}))

    made_for(chat_server.base_url)
    made_for(chat_server.base_url)
    assert clients.made == 1
    made_for(chat_server.base_url, timeout=31.0)
    made_for("http://127.0.0.1:9/v1")
    monkeypatch.setenv(KEY_ENV, "sk-two")
    made_for(chat_server.base_url)
    assert clients.made == 4


def test_a_summarizer_serve_cannot_make_is_left_to_the_sessions(caplog: pytest.LogCaptureFixture) -> None:
    """Warming up never stops serve from starting: a config without the model's name is reported, and
    each session reports it as before."""
    config = Config().with_overrides(source="test", **{"auxiliary.compression": {"provider": "openai"}})
    router = SessionRouter(config)
    router.warm()
    assert "summarizer was not prepared ahead" in caplog.text and "auxiliary.compression.model" in caplog.text


def _held(metrics: str, bound: float) -> int:
    """Requests serve held longer than ``bound`` seconds before forwarding them (its /metrics histogram)."""
    buckets = {le: int(n) for le, n in OVERHEAD.findall(metrics)}
    return buckets["+Inf"] - buckets[f"{bound:g}"]


@pytest.mark.slow
def test_no_request_waits_on_a_slow_model_summarizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real serve with background passes and a model summarizer of 2 s a call, a tool loop of ~1.5K
    tokens a step that folds at a 32K window: serve's own /metrics hold no request over 0.5 s, the first
    one included (the proxy's work on a request takes milliseconds; 0.5 s is what a wait on the summarizer,
    or on its setup, takes). The folds did call the model. (A loop that fills the window faster than a 2 s
    fold can keep up with reaches the batch threshold, where serve's batch still asks the model inline.)"""
    monkeypatch.setenv(KEY_ENV, "sk-slow")
    home = tmp_path / "home"
    home.mkdir()
    aux = "\n".join(f"    {k}: {v}" for k, v in model_summarizer("URL").items())
    with ChatServer(latency=2.0) as summarizer, ScriptedUpstream(latency=0.2) as upstream:
        config = home / "config.yaml"
        config.write_text(
            "compression:\n  micro_compact_background: true\nauxiliary:\n  compression:\n"
            + aux.replace("URL", summarizer.base_url)
            + "\n"
        )
        served = ServeProcess(
            home, "--config", str(config), "--db", str(home / "s.db"), "--log", str(home / "proxy.log"),
            "--openai-upstream", upstream.openai_base_url, "--context-limit", "32000",
        ).start()  # fmt: skip
        try:
            history: list[dict[str, Any]] = [{"role": "user", "content": "Read the files one by one."}]
            with httpx.Client(base_url=served.base_url, timeout=60) as client:
                for k in range(24):
                    answer = client.post("/v1/chat/completions", json=chat(history))
                    assert answer.status_code == 200, answer.text
                    call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
                    output = " ".join(f"line {k}-{i}" for i in range(300))
                    history.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
                    time.sleep(0.2)  # the agent runs its tool
                metrics = client.get("/metrics").text
        finally:
            served.stop(timeout=60)
        assert summarizer.requests, "no fold called the model summarizer: the loop did not exercise it"
    assert _held(metrics, 0.5) == 0, re.findall(r"^microcompact_proxy_overhead.*$", metrics, re.MULTILINE)
