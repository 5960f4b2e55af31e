"""The provider's cache through ``serve``: the scripted upstream's cache rules (TTL, minimum length,
lookback, OpenAI's automatic prefix caching, the window's refusal), the breakpoint placed after a fold at
the end of the stable part (never more than 4), and what the proxy tells the user (headers, /metrics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.messages import MARKER_PREFIX
from microcompact.server.breakpoints import breakpoint_count, cache_stable_prefix, marker_position
from support import local_http
from support.proxy_server import ProxyServer
from upstream import Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.usage import PrefixCache, PromptCache

EPHEMERAL = {"type": "ephemeral"}


def block(text_: str, marked: bool = False, kind: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "text", "text": text_}
    if marked:
        out["cache_control"] = kind or EPHEMERAL
    return out


def body_of(*messages: dict[str, Any], system_marked: bool = True) -> dict[str, Any]:
    return {"system": [block("system prompt " * 400, system_marked)], "messages": list(messages)}


# ------------------------------------------------------------------ the scripted upstream's cache rules


def test_the_cache_expires_after_its_ttl_and_a_hit_refreshes_it():
    now = [0.0]
    cache = PromptCache(ttl_seconds=300, min_tokens=0, clock=lambda: now[0])
    first = body_of({"role": "user", "content": [block("hello " * 50, True)]})
    written = cache.usage(first)
    assert written.cache_read_input_tokens == 0 and written.cache_creation_input_tokens > 0
    now[0] = 250
    assert cache.usage(first).cache_read_input_tokens == written.cache_creation_input_tokens
    now[0] = 500  # 250 s after the hit: still alive (the hit refreshed it)
    assert cache.usage(first).cache_read_input_tokens > 0
    now[0] = 801
    assert cache.usage(first).cache_read_input_tokens == 0


def test_a_prefix_under_the_minimum_is_never_cached():
    cache = PromptCache(min_tokens=1024)
    small = {"messages": [{"role": "user", "content": [block("short", True)]}]}
    assert cache.usage(small).cache_creation_input_tokens == 0
    assert cache.usage(small).cache_read_input_tokens == 0


def test_a_breakpoint_looks_back_twenty_blocks_and_no_further():
    base = [block(f"b{i} " * 20) for i in range(5)]

    def request(extra: list[dict[str, Any]]) -> dict[str, Any]:
        blocks = [*base, *extra]
        blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        return body_of({"role": "user", "content": blocks}, system_marked=False)

    for extra, expected_hit in ((19, True), (20, True), (21, False)):
        cache = PromptCache()
        first = cache.usage(request([]))
        again = cache.usage(request([block(f"n{i} ") for i in range(extra)]))
        assert (again.cache_read_input_tokens == first.cache_creation_input_tokens) is expected_hit, extra


def test_openai_prefix_caching_reads_the_longest_shared_prefix_in_steps():
    cache = PrefixCache(ttl_seconds=300, clock=lambda: 0.0)
    messages = [{"role": "system", "content": "s " * 3000}, {"role": "user", "content": "u " * 100}]
    assert cache.cached_tokens({"messages": messages}) == 0
    grown = {"messages": [*messages, {"role": "assistant", "content": "a"}]}
    cached = cache.cached_tokens(grown)
    assert cached >= 1024 and cached % 128 == 0
    assert PrefixCache().cached_tokens({"messages": [{"role": "user", "content": "tiny"}]}) == 0


def test_a_prompt_over_the_window_is_refused_as_the_api_refuses_it():
    with ScriptedUpstream(context_window=2_000) as upstream:
        big = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x " * 10_000}]}
        answer = local_http.post(f"{upstream.base_url}/v1/messages", json=big)
        assert answer.status_code == 400
        assert "prompt is too long: " in answer.json()["error"]["message"]
        assert "tokens > 2000 maximum" in answer.json()["error"]["message"]
        small = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        assert local_http.post(f"{upstream.base_url}/v1/messages", json=small).status_code == 200


# ------------------------------------------------------------------ the breakpoint after a fold


def marker_message() -> dict[str, Any]:
    return {"role": "assistant", "content": [block(f"{MARKER_PREFIX}\n\nsummary")]}


def test_a_breakpoint_goes_on_the_marker_and_the_clients_stay():
    messages = [
        {"role": "user", "content": [block("task")]},
        marker_message(),
        {"role": "user", "content": [block("newest", True)]},
    ]
    out = cache_stable_prefix(body_of(), messages)
    assert out[1]["content"][0]["cache_control"] == EPHEMERAL
    assert out[2] == messages[2] and out[0] is messages[0]
    assert breakpoint_count(body_of(), out) == 3
    assert cache_stable_prefix(body_of(), out) is out  # marked already: nothing to do


def test_the_clients_cache_kind_is_kept():
    hour = {"type": "ephemeral", "ttl": "1h"}
    messages = [marker_message(), {"role": "user", "content": [block("newest", True, hour)]}]
    assert cache_stable_prefix(body_of(), messages)[0]["content"][0]["cache_control"] == hour


def test_no_marker_no_change_and_a_string_marker_becomes_a_marked_block():
    plain = [{"role": "user", "content": "hi"}]
    assert cache_stable_prefix(body_of(), plain) is plain
    out = cache_stable_prefix(body_of(), [{"role": "assistant", "content": f"{MARKER_PREFIX} x"}])
    # The fixed opening carries the breakpoint, the summary follows in its own block (the same text in all).
    assert out[0]["content"] == [
        {"type": "text", "text": MARKER_PREFIX, "cache_control": EPHEMERAL},
        {"type": "text", "text": " x"},
    ]


@given(st.lists(st.booleans(), min_size=1, max_size=8), st.integers(0, 3), st.integers(0, 7))
def test_never_more_than_four_and_the_newest_client_breakpoint_stays(marks, fixed, marker_at):
    messages: list[dict[str, Any]] = [
        {"role": "user" if i % 2 else "assistant", "content": [block(f"m{i}", marked)]}
        for i, marked in enumerate(marks)
    ]
    at = marker_at % len(messages)
    messages[at] = {"role": "assistant", "content": [block(f"{MARKER_PREFIX} s", False), *messages[at]["content"]]}
    body = {"system": [block("s", True) for _ in range(fixed)], "messages": messages}
    before = breakpoint_count(body, messages)
    out = cache_stable_prefix(body, messages)
    after = breakpoint_count(body, out)
    assert after <= max(4, before)  # a client that sent too many is _limit_breakpoints' business, not made worse
    assert after <= before + 1
    newest = max((i for i, m in enumerate(messages) for b in m["content"] if b.get("cache_control")), default=None)
    if newest is not None:
        assert any(b.get("cache_control") for b in out[newest]["content"])
    where = marker_position(out)
    assert where is not None


# ------------------------------------------------------------------ through serve


def step(n: int) -> Reply:
    return Reply((Text(f"Step {n}."), ToolCall("Bash", {"command": f"seq {n}"})))


TOOLS = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object", "properties": {}}}]


def run_loop(proxy: ProxyServer, upstream: ScriptedUpstream, steps: int) -> list[httpx.Response]:
    """An agent loop like Claude Code's: system and newest message carry breakpoints, big tool outputs."""
    upstream.enqueue(*[step(n) for n in range(steps)], text("done"))
    messages: list[dict[str, Any]] = [{"role": "user", "content": [block("Run the steps.")]}]
    answers = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for n in range(steps + 1):
            last = messages[-1]
            marked = {**last, "content": [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]}
            body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": TOOLS, **body_of(*messages[:-1], marked)}
            answer = client.post("/v1/messages", json=body, headers={"x-session-id": "cache-loop"})
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            reply = answer.json()
            messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            if not calls:
                break
            output = "\n".join(f"{n} line {i} " + "x" * 60 for i in range(120))
            messages.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0]["id"], "content": output}]}
            )
            proxy.settle()  # the follow-up (usage recorded, turn ended) runs before the next request
    return answers


def test_after_a_fold_the_stable_part_is_read_and_the_user_is_told(tmp_path: Path):
    with (
        ScriptedUpstream(min_cacheable=0) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=40_000) as proxy,
    ):
        answers = run_loop(proxy, upstream, 40)
        metrics = local_http.get(f"{proxy.base_url}/metrics").text
    sent = [r for r in upstream.generation_requests() if r.body]
    folded = [i for i, r in enumerate(sent) if any(MARKER_PREFIX in json.dumps(m) for m in r.body["messages"])]
    assert folded, "the loop never folded"
    for record in sent:
        assert breakpoint_count(record.body, record.body["messages"]) <= 4
    first = sent[folded[0]]
    where = marker_position(first.body["messages"])
    assert where is not None
    i, j = where
    assert first.body["messages"][i]["content"][j].get("cache_control"), "the marker carries a breakpoint"
    later = [sent[k] for k in folded[1:] if sent[k].usage]
    assert any(r.usage["cache_read_input_tokens"] > 0 for r in later)
    reads = [r.usage["cache_read_input_tokens"] for r in sent if r.usage]
    writes = [r.usage["cache_creation_input_tokens"] for r in sent if r.usage]
    last = answers[-1].headers
    assert int(last["x-microcompact-cache-read"]) <= sum(reads) and int(last["x-microcompact-cache-read"]) > 0
    assert int(last["x-microcompact-cache-write"]) <= sum(writes)
    assert int(last["x-microcompact-folds"]) >= 1
    assert float(last["x-microcompact-cost"]) > 0 and float(last["x-microcompact-cost-uncompacted"]) > 0
    assert f"microcompact_cache_read_tokens_total {sum(reads)}" in metrics
    assert f"microcompact_cache_write_tokens_total {sum(writes)}" in metrics
    assert 'microcompact_cost_dollars_total{kind="spent"}' in metrics and "microcompact_folds_total" in metrics


@pytest.mark.slow
def test_report_gives_spent_and_saved_per_proxy_session(tmp_path: Path):
    import logging

    from microcompact.report.cost import read_costs
    from microcompact.telemetry import log_telemetry
    from support.serve_process import run_cli

    log = tmp_path / "proxy.log"
    handler = log_telemetry(log)
    try:
        with (
            ScriptedUpstream(min_cacheable=0) as upstream,
            ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=40_000) as proxy,
        ):
            answers = run_loop(proxy, upstream, 30)
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    (cost,) = read_costs([log])
    sent = [r for r in upstream.generation_requests() if r.usage]
    assert cost.requests == len(sent) == len(answers)
    assert cost.cache_read_tokens == sum(r.usage["cache_read_input_tokens"] for r in sent)
    assert cost.cache_write_tokens == sum(r.usage["cache_creation_input_tokens"] for r in sent)
    assert cost.spent > 0 and cost.uncompacted > cost.spent * 0.5 and cost.tokens_saved > 0
    shown = run_cli(tmp_path / "home", "report", str(log))
    assert shown.returncode == 0, shown.stderr
    assert "Cost against not compacting" in shown.stdout and f"{cost.spent:.4f}" in shown.stdout
    as_json = json.loads(run_cli(tmp_path / "home", "report", "--json", str(log)).stdout)
    assert as_json["cost"][0]["requests"] == cost.requests
