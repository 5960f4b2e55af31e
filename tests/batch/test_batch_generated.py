"""Invariants checked around every batch compaction on hypothesis-generated transcripts (``strategies.py``):
chronological output, users verbatim, pairs whole, one rolling summary, failing summarizers, the fallback.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from microcompact.batch import (
    BatchCompactor,
)
from microcompact.config import Config, parse_config
from microcompact.contract import role_sequence_errors
from microcompact.messages import content_text, is_marker, marker_body
from microcompact.session import Session
from microcompact.tokens import Ledger
from support.batch_helpers import (
    CHANGED,
    COMMON,
    Checked,
    Echo,
    Failing,
    Scribe,
    bounds,
    config,
    counter,
    run_generated,
    strip,
    system,
)
from support.strategies import examples, transcripts, units

# --------------------------------------------------------------------------- generated transcripts (hypothesis)


@st.composite
def batch_configs(draw: st.DrawFn, micro: bool | None = None) -> Config:
    compression = {
        "tokenizer": "estimate",
        "protect_first_n": draw(st.sampled_from([2, 0, 1, 3, 5])),
        "min_tail_messages": draw(st.sampled_from([3, 1, 2, 6])),
        "target_ratio": draw(st.sampled_from([0.2, 0.05, 0.5])),
        "proactive_prune_min_reclaim_tokens": draw(st.sampled_from([4096, 0, 512])),
        "prune_min_tool_tokens": draw(st.sampled_from([200, 20, 1000])),
        "prune_max_argument_tokens": draw(st.sampled_from([1000, 50])),
        "batch_user_floor_ratio": draw(st.sampled_from([0.5, 0.5, 0.1])),
        "micro_compact": draw(st.booleans()) if micro is None else micro,
        "micro_compact_max_exchange_tokens": draw(st.sampled_from([256, 1000, 8000])),
        "micro_compact_defrag_threshold_tokens": draw(st.sampled_from([200, 2000])),
    }
    aux = {"max_input_tokens": draw(st.sampled_from([32_000, 1000, 3000]))}
    limit = draw(st.sampled_from([4096, 8192, 16384]))
    return parse_config(
        {"compression": compression, "model": {"context_length": limit}, "auxiliary": {"compression": aux}}
    )


@settings(max_examples=examples(50), **COMMON)
@given(data=st.data(), messages=transcripts(max_turns=8), cfg=batch_configs())
def test_batch_invariants_on_generated_transcripts(
    data: st.DataObject, messages: list[dict[str, Any]], cfg: Config
) -> None:
    """Every batch compaction (automatic or forced, micro on or off) keeps head, tail, users, pairs, roles;
    ends under the threshold or says why; in time order; one call per run of work, together covering the
    whole middle."""
    # on-demand compactions between complete iterations (never between a tool call and its results)
    points = [i for i in range(len(messages) + 1) if i == len(messages) or messages[i].get("role") != "tool"]
    compact_at = set(data.draw(st.lists(st.sampled_from(points), max_size=3), label="compact_at"))
    focus = data.draw(st.sampled_from([None, "the failing test"]), label="focus")
    summ = Scribe()
    s, checked = run_generated(messages, cfg, summ, compact_at, focus)
    note(f"batch outcomes: {checked.outcomes()}")
    summarized = [r for r in checked.results if r.outcome in ("compacted", "user_floor_exceeded")]
    assert len(summarized) == s.batch.compactions
    # one summarizer call per run of work (newest first), at most batch_max_calls per compaction
    calls = [r.record["summarizer_calls"] for r in summarized]
    assert len(summ.batches) == sum(calls), (len(summ.batches), checked.outcomes())
    middles = [m for m, r in zip(checked.middles, checked.results, strict=False) if r in summarized]
    batches = iter(summ.batches)
    for r, middle, n in zip(summarized, middles, calls, strict=False):
        assert n <= cfg.compression.batch_max_calls and r.record["runs"] >= 1
        got = [next(batches) for _ in range(n)][::-1]  # oldest run first
        seen = [m for _, part, _ in got for m in part]
        assert not any(is_marker(m) for m in seen)
        assert all(f == (focus if r.record["reason"] == "on_demand" else None) for _, _, f in got)
        # the calls together cover the whole middle: every non-user message, plus the folded (oldest) users
        folded = r.record.get("users_folded") or 0
        users = [i for i, m in enumerate(middle) if m.get("role") == "user"][:folded]
        expected = [m for i, m in enumerate(middle) if not is_marker(m) and (m.get("role") != "user" or i in users)]
        if r.record.get("capped_runs"):
            continue
        cut = [m for m in seen if "omitted by microcompact: the summarizer's input limit" in content_text(m)]
        if not cut:
            assert units(seen) == units(expected)
        else:  # each run's share of the input limit: what is read is in order and nothing else
            rest = iter(units(expected))
            assert all(u in rest for u in units([m for m in seen if m not in cut]))
    assert set(checked.outcomes()) <= CHANGED | {"nothing_to_compact", "low_yield"}


@settings(max_examples=examples(80), **COMMON)
@given(messages=transcripts(max_turns=10), cfg=batch_configs(micro=False), cap=st.sampled_from([8, 1, 2]))
def test_batch_output_is_chronological_with_users_verbatim_and_pairs_whole(
    messages: list[dict[str, Any]], cfg: Config, cap: int
) -> None:
    """Property (issue 8.8): after a forced batch, user messages are the originals, individual (one output
    message per original, none joined) and in order; tool calls and results stay paired; each marker stands
    between the same two kept user messages as the work it summarizes (``Echo`` names the calls it got)."""
    cfg = cfg.with_overrides(compression={"batch_max_calls": cap})
    ledger = Ledger(counter(), messages)
    h, t = bounds(cfg, ledger)
    summ = Echo()
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    out = ledger.messages
    if result.outcome not in CHANGED or result.outcome == "pruned":
        return
    folded = result.record.get("users_folded") or 0
    originals = [strip(m) for m in messages if m.get("role") == "user"]
    middle_users = [i for i in range(h, t) if messages[i].get("role") == "user"]
    dropped = [strip(messages[i]) for i in middle_users[:folded]]
    assert [strip(m) for m in out if m.get("role") == "user"] == [m for m in originals if m not in dropped] or (
        folded and len([m for m in out if m.get("role") == "user"]) == len(originals) - folded
    )
    if not role_sequence_errors(messages):
        assert role_sequence_errors(out) == []
    user_at = {i for i in middle_users[folded:]}
    kept_positions = [i for i in range(h, t) if i in user_at]
    where = {tc["id"]: i for i, m in enumerate(messages) for tc in m.get("tool_calls") or ()}
    n_tail = len(messages) - t
    new_middle = out[h : len(out) - n_tail]
    for k, m in enumerate(new_middle):
        if not (is_marker(m) and marker_body(m).startswith("### Completed actions\n- call ")):
            continue  # (a capped run: the deterministic summary)
        ids = [i for i in marker_body(m).partition(": ")[2].split() if i in where]
        before_users = sum(1 for x in new_middle[:k] if not is_marker(x))
        low = kept_positions[before_users - 1] if before_users else h - 1
        high = kept_positions[before_users] if before_users < len(kept_positions) else t
        assert all(low < where[i] < high for i in ids), f"marker {k} holds work from elsewhere: {ids}"
    assert result.record["summarizer_calls"] <= cap


@settings(max_examples=examples(40), **COMMON)
@given(messages=transcripts(max_turns=8), cfg=batch_configs(micro=True))
def test_micro_batch_micro_keeps_one_rolling_summary(messages: list[dict[str, Any]], cfg: Config) -> None:
    """Micro passes, then a batch, then micro again: at most one micro marker, after the batch markers, at every
    hook; no batch marker's text inside the micro marker, and micro never reads a marker."""
    summ = Scribe()
    _s, checked = run_generated(messages, cfg, summ, set(), None)
    note(f"batch outcomes: {checked.outcomes()}, merges: {len(summ.merges)}")
    for exchange in summ.merges:
        assert not any(is_marker(m) for m in exchange)
        assert "USER" not in units(exchange)


@settings(max_examples=examples(30), **COMMON)
@given(messages=transcripts(max_turns=8), cfg=batch_configs(micro=False))
def test_failing_summarizer_never_changes_the_transcript_unless_at_risk(
    messages: list[dict[str, Any]], cfg: Config
) -> None:
    """With the model down, only pruning and (near the limit) the extractive fallback change anything."""
    summ = Failing()
    _s, checked = run_generated(messages, cfg, summ, set(), None, unique_lines=False)  # extractive fallback
    for r in checked.results:
        # The fallback always produces a valid, shorter summary (issue 8.8: it used to fail with "summary is
        # longer than everything it summarizes", or an empty summary, as outcome "error").
        assert r.outcome in {
            "pruned",
            "fallback",
            "user_floor_exceeded",
            "summarize_failed",
            "cooldown",
            "nothing_to_compact",
            "low_yield",
            "truncated",
        }, r.record
        if r.outcome == "user_floor_exceeded":  # a fold under the fallback says both
            assert r.record["fallback"] is True and r.record["users_folded"] >= 1
        if r.outcome in ("fallback", "user_floor_exceeded"):
            assert r.record["summarizer"] == "extractive"
            assert r.record["tokens_before"] >= (cfg.threshold_tokens() + cfg.model.context_length) / 2


def test_fallback_near_the_limit_always_compacts_even_without_extractable_facts() -> None:
    cfg = config(4096, protect_first_n=1, min_tail_messages=2)  # threshold 2,048; at risk from 3,072
    msgs = [system(), {"role": "user", "content": "hi"}]
    for i in range(64):
        msgs += [{"role": "assistant", "content": "ok fine " * 20}, {"role": "user", "content": f"u{i} more"}]
    ledger = Ledger(counter(), msgs)
    assert ledger.total >= 3_072
    b = BatchCompactor(cfg, Failing(), counter())
    result = b.compact(ledger)
    # 64 tiny runs between user messages would need 64 marker frames: the floor folds the oldest users, so the
    # outcome says so, and the fallback wrote the summary
    assert result.outcome == "user_floor_exceeded" and result.record["fallback"] is True, result.record


@settings(max_examples=examples(200), **COMMON)
@given(previous=st.text(max_size=400), texts=st.lists(st.text(max_size=60), min_size=1, max_size=6))
def test_batch_fallback_always_produces_a_valid_summary_no_longer_than_its_input(
    previous: str, texts: list[str]
) -> None:
    """Whatever the middle holds (tiny, empty, nothing extractable), the deterministic summary is usable."""
    b = BatchCompactor(config(), Failing(), counter())
    material = [{"role": "assistant", "content": t} for t in texts]
    bounded = b.calls.bound_input(material)
    from microcompact.summarizers import render_exchange

    input_tokens = counter().count_text(render_exchange(bounded)) + counter().count_text(previous)
    text = b.calls.fallback_text(previous, bounded, None, input_tokens)
    assert text.strip() and counter().count_text(text) <= max(input_tokens, 200)


def test_default_extractive_summarizer_compacts_plain_chat() -> None:
    msgs = [system(), {"role": "user", "content": "hi"}]
    for i in range(200):
        msgs += [{"role": "assistant", "content": "ok fine " * 20}, {"role": "user", "content": f"u{i} more"}]
    s = Session(config(), counter=counter(), messages=msgs)  # the default summarizer: extractive
    assert s.should_compress()
    result = s.before_request()[0]
    # one marker per tiny run between user messages costs more than the runs: the floor folds the oldest users
    assert result.outcome == "user_floor_exceeded" and result.record["users_folded"] >= 1
    assert s.tokens < s.config.threshold_tokens()
