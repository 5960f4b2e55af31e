"""A conversation's header totals count every request the store holds (issue 28): a restarted proxy, and
several proxies on one store (a SQLite file, or PostgreSQL), give the same totals as the page, request
after request, whichever process answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from support import local_http
from support.proxy_server import ProxyServer
from support.wire import wait_for
from upstream import ScriptedUpstream

WINDOW = 16_000
TOTALS = ("requests", "folds", "tokens_saved", "cache_read_tokens", "cache_write_tokens")
HEADERS = {name: f"x-microcompact-{name.replace('_tokens', '').replace('_', '-')}" for name in TOTALS}


def _step(client: httpx.Client, history: list[dict[str, Any]], k: int) -> httpx.Response:
    """One request of a Chat Completions tool loop (~6 KB tool outputs: it folds at a 16K window)."""
    answer = client.post(
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": history},
        headers={"authorization": "Bearer sk-stored"},
    )
    assert answer.status_code == 200, answer.text
    call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": f'{{"p": "f{k}"}}'}}
    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
    output = f"needle{k} " + " ".join(f"line {k}-{i}" for i in range(700))
    history.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
    return answer


def _page(proxy: ProxyServer, sid: str) -> dict[str, Any]:
    found: dict[str, Any] = local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": sid}).json()
    return found


def _stored(proxy: ProxyServer, sid: str, requests: int) -> None:
    """Wait until the store holds the conversation's first ``requests`` requests."""
    assert wait_for(lambda: _page(proxy, sid).get("requests") == requests, timeout=30), requests


def _agree(headers: httpx.Headers, page: dict[str, Any]) -> None:
    """The headers' totals are the page's (a response read whole: through itself)."""
    assert headers["x-microcompact-totals-through"] == "this-request"
    for name, header in HEADERS.items():
        assert int(headers[header]) == page[name], (name, headers[header], page[name])
    assert float(headers["x-microcompact-cost"]) == pytest.approx(page["spent"], abs=2e-6)
    assert float(headers["x-microcompact-cost-uncompacted"]) == pytest.approx(page["uncompacted"], abs=2e-6)


@pytest.mark.slow
def test_two_proxies_on_one_store_and_a_restart_count_every_request(store_location: str, tmp_path: Path) -> None:
    salt = tmp_path / "salt"  # the same conversation key in every proxy
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the files one by one."}]
    sid, k = "", 0
    with ScriptedUpstream(openai_cache=True, min_cacheable=0) as upstream:
        options: dict[str, Any] = {"context_limit": WINDOW, "salt_file": salt, "shared": True}
        with (
            ProxyServer(upstream.base_url, store_location, **options) as one,
            ProxyServer(upstream.base_url, store_location, **options) as two,
            httpx.Client(base_url=one.base_url, timeout=60) as first,
            httpx.Client(base_url=two.base_url, timeout=60) as second,
        ):
            for k in range(8):  # alternating: each proxy answers every other request
                proxy, client = (one, first) if k % 2 == 0 else (two, second)
                answer = _step(client, history, k)
                sid = answer.headers["x-microcompact-session"]
                assert answer.headers["x-microcompact-requests"] == str(k + 1)
                _stored(proxy, sid, k + 1)
                _agree(answer.headers, _page(proxy, sid))
            page = _page(one, sid)
            assert page["folds"] >= 1 and page["tokens_saved"] > 0, "the loop never folded"
            metrics = [local_http.get(f"{p.base_url}/metrics").text for p in (one, two)]
        # Each process's /metrics counts what it answered: together, the conversation's requests.
        answered = [int(_metric(text, "microcompact_answered_requests_total")) for text in metrics]
        assert answered == [4, 4]
        assert sum(_metric(text, "microcompact_tokens_saved_total") for text in metrics) == page["tokens_saved"]
        with (
            ProxyServer(upstream.base_url, store_location, **options) as restarted,
            httpx.Client(base_url=restarted.base_url, timeout=60) as client,
        ):
            for k in range(8, 11):
                answer = _step(client, history, k)
                assert answer.headers["x-microcompact-requests"] == str(k + 1)  # seeded from the store
                _stored(restarted, sid, k + 1)
                _agree(answer.headers, _page(restarted, sid))


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)
