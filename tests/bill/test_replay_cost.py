"""The prompt-cache cost model against hand-computed cases, the compare runner, cache-aware scheduling."""

from __future__ import annotations

import json

import pytest

from microcompact.bill.replay_cost import PRESETS, CacheModel, Pricing, load_pricing
from microcompact.config import ConfigError, parse_config
from microcompact.replay import load_transcript, request_times
from microcompact.replay.compare import POLICIES, compare
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter

PRICES = Pricing(name="t", input=10.0, cached_read=1.0, cache_write=12.5, output=50.0, ttl_seconds=300)


def msgs(n):
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def test_anthropic_style_reads_prefix_and_writes_suffix():
    a, b, c, _d = msgs(4)
    model = CacheModel(PRICES)
    model.request([a, b], [100, 200], now=0, output_tokens=10)  # cold: all 300 written
    model.request([a, b, c], [100, 200, 50], now=30, output_tokens=20)  # 300 read, 50 written
    t = model.tally
    assert (t.cached_read_tokens, t.cache_write_tokens, t.uncached_tokens, t.output_tokens) == (300, 350, 0, 30)
    # cost: 300*1 + 350*12.5 + 30*50 = 300 + 4375 + 1500 = 6175 per million
    assert t.cost(PRICES)["main"] == pytest.approx(0.006175)


def test_rewrite_at_position_k_invalidates_from_k():
    a, b, c, d = msgs(4)
    model = CacheModel(PRICES)
    model.request([a, b, c], [100, 200, 300], now=0, output_tokens=0)
    marker = {"role": "assistant", "content": "summary"}
    model.request([a, marker, c, d], [100, 40, 300, 10], now=10, output_tokens=0)  # b rewritten: only a is read
    t = model.tally
    assert t.cached_read_tokens == 100
    assert t.cache_write_tokens == 600 + 350


def test_cache_expiry_during_an_idle_gap():
    a, b, c = msgs(3)
    model = CacheModel(PRICES)
    model.request([a, b], [100, 100], now=0, output_tokens=0)
    model.request([a, b, c], [100, 100, 100], now=301, output_tokens=0)  # 301 s > 300 s TTL: expired
    model.request([a, b, c], [100, 100, 100], now=400, output_tokens=0)  # warm again: 300 read
    t = model.tally
    assert t.cache_expiries == 1
    assert t.cached_read_tokens == 300
    assert t.cache_write_tokens == 200 + 300


def test_openai_style_has_no_write_premium():
    a, b, c = msgs(3)
    p = PRESETS["gpt-4o"]  # cached reads at half price (the "openai" preset is now cached reads at 0.1x)
    model = CacheModel(p)
    model.request([a, b], [1000, 1000], now=0, output_tokens=100)
    model.request([a, b, c], [1000, 1000, 500], now=5, output_tokens=100)
    t = model.tally
    assert (t.cached_read_tokens, t.cache_write_tokens, t.uncached_tokens) == (2000, 0, 2500)
    # 2000*1.25 + 2500*2.50 + 200*10 = 2500 + 6250 + 2000 = 10750 per million
    assert t.cost(p)["main"] == pytest.approx(0.01075)


def test_summarizer_calls_priced_separately():
    p = PRICES.model_copy(update={"summarizer_input": 0.5, "summarizer_output": 1.0})
    model = CacheModel(p)
    model.summarizer_call(10_000, 1_000)
    assert model.tally.cost(p) == {"main": 0.0, "summarizer": pytest.approx(0.006), "total": pytest.approx(0.006)}


def test_load_pricing_presets_and_files(tmp_path):
    assert load_pricing("anthropic").cache_write == pytest.approx(1.25 * load_pricing("anthropic").input)
    assert load_pricing("anthropic").cached_read == pytest.approx(0.1 * load_pricing("anthropic").input)
    f = tmp_path / "p.yaml"
    f.write_text("input: 1\ncached_read: 0.1\ncache_write: 1.25\noutput: 5\nttl_seconds: 3600\n")
    assert load_pricing(str(f)).ttl_seconds == 3600
    f.write_text("input: 1\ncached_read: -1\ncache_write: 1\noutput: 1\n")
    with pytest.raises(ConfigError, match="cached_read"):
        load_pricing(str(f))
    with pytest.raises(ConfigError, match="neither a preset"):
        load_pricing("nope")


def test_request_times_use_timestamps_or_the_stated_assumption():
    plain = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    assert request_times(plain, 30) == ([0.0, 30.0, 60.0], False)
    stamped = [dict(m, _ts=1000.0 + 100 * i) for i, m in enumerate(plain)]
    assert request_times(stamped, 30) == ([1000.0, 1100.0, 1200.0], True)


def turn(n, size=2000):
    out = [{"role": "user", "content": f"do {n}"}]
    for k in range(2):
        cid = f"c{n}_{k}"
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": cid, "content": "x " * size})
    out.append({"role": "assistant", "content": f"done {n}"})
    return out


def test_cache_aware_defers_while_warm_and_catches_up_when_cold():
    now = [0.0]
    cfg = parse_config(
        {
            "compression": {
                "micro_compact": True,
                "micro_compact_cache_ttl_seconds": 300,
                "micro_compact_max_occupancy_pct": 95,
            },
            "model": {"context_length": 100_000},
        }
    )
    s = Session(cfg, counter=TokenCounter(EstimateCounter()), clock=lambda: now[0])
    absorbed_at = []
    for n in range(12):
        for m in turn(n):
            if m["role"] == "assistant":
                now[0] += 5  # requests seconds apart: cache warm
                absorbed_at += [n for r in s.before_request() if r.outcome == "absorbed"]
            s.append(m)
        assert not [r for r in s.finalize_turn() if r.outcome == "absorbed"]  # due passes are deferred
        if n == 8:
            now[0] += 600  # the user went away: the cache is cold at the next request
    assert absorbed_at and set(absorbed_at) == {9}  # all deferred passes ran together, once
    assert s.micro.policy.deferred == 3  # turns 9-11 wait for the next cold cache (or high occupancy)


def test_cache_aware_breaks_early_when_occupancy_is_high():
    now = [0.0]
    cfg = parse_config(
        {
            "compression": {
                "micro_compact": True,
                "micro_compact_cache_ttl_seconds": 300,
                "micro_compact_max_occupancy_pct": 30,
            },
            "model": {"context_length": 100_000},
        }
    )
    s = Session(cfg, counter=TokenCounter(EstimateCounter()), clock=lambda: now[0])
    outcomes = []
    for n in range(12):
        for m in turn(n):
            if m["role"] == "assistant":
                now[0] += 5
                outcomes += [r.outcome for r in s.before_request()]
            s.append(m)
        outcomes += [r.outcome for r in s.finalize_turn()]
    assert "absorbed" in outcomes


@pytest.mark.skipif(
    not __import__("pathlib").Path("src/microcompact/data/demo_transcript.jsonl").exists(),
    reason="bundled demo transcript missing",
)
@pytest.mark.slow
def test_compare_runs_every_policy_on_the_demo():
    messages = load_transcript("src/microcompact/data/demo_transcript.jsonl")[:200]
    result = compare(messages, parse_config({"model": {"context_length": 100_000}}), PRESETS["anthropic"])
    names = [r["policy"] for r in result["policies"]]
    assert names == list(POLICIES)
    rows = {r["policy"]: r for r in result["policies"]}
    assert rows["batch-only"]["summarizer_calls"] == 0 or rows["batch-only"]["batch_compactions"] > 0
    assert rows["micro-every-turn"]["micro_passes"] > 0
    assert rows["micro-every-turn"]["peak_occupancy"] < rows["batch-only"]["peak_occupancy"]
    for r in rows.values():
        assert r["cost"]["total"] > 0 and r["requests"] == sum(1 for m in messages if m["role"] == "assistant")
        assert r["cached_read_tokens"] + r["cache_write_tokens"] + r["uncached_tokens"] > 0
    assert result["timing"] == "timestamps recorded in the transcript"
    plain = [{k: v for k, v in m.items() if k != "_ts"} for m in messages[:60]]
    assert (
        "assumed: 30 s"
        in compare(
            plain, parse_config({"model": {"context_length": 100_000}}), PRESETS["anthropic"], policies=("batch-only",)
        )["timing"]
    )


@pytest.mark.skipif(
    not __import__("pathlib").Path("src/microcompact/data/demo_transcript.jsonl").exists(),
    reason="bundled demo transcript missing",
)
def test_compare_shows_recall_beside_cost_for_each_policy():
    """Recall is measured on each policy's own prompts: a policy that compacts loses what no prompt of an
    uncompacted replay could, and the figures agree with the measure run on the same targets."""
    from microcompact.recall import reply_targets

    messages = load_transcript("src/microcompact/data/demo_transcript.jsonl")[:200]
    result = compare(
        messages,
        parse_config({"model": {"context_length": 100_000}}),
        PRESETS["anthropic"],
        policies=("batch-only", "micro-every-turn"),
    )
    targets = reply_targets(messages)
    assert sum(len(t) for t in targets.values()) > 0
    for row in result["policies"]:
        assert row["recall_targets"] == sum(len(t) for t in targets.values())
        assert row["recall"] is not None and 0 <= row["recall"] <= 100
        assert 0 <= row["requests_losing"] <= row["requests"]
        assert (row["recall"] == 100.0) == (row["requests_losing"] == 0)
    every_turn = {r["policy"]: r for r in result["policies"]}["micro-every-turn"]
    assert every_turn["micro_passes"] > 0 and every_turn["recall"] < 100
