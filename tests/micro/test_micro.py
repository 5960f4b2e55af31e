"""The micro-compaction engine on small hand-built transcripts: one behaviour per test."""

from __future__ import annotations

import json
import logging

import pytest

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.events import Absorb
from microcompact.messages import marker_body, marker_count, marker_kind, to_api
from microcompact.micro import micro_compact
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter
from support.micro_helpers import Recorder, call, turn


def config(**compression):
    base = {"micro_compact": True, "protect_first_n": 3, "micro_compact_max_exchange_tokens": 4000}
    base.update(compression)
    return parse_config({"compression": base, "model": {"context_length": 20_000}})  # tail budget 2,000


def counter():
    return TokenCounter(EstimateCounter())


def run_turns(session, turns):
    for t in turns:
        for m in t:
            if m["role"] == "assistant":
                session.before_request()
            session.append(m)
        session.finalize_turn()


def check(session, original):
    out = session.transcript
    assert user_message_errors(original, out) == []
    assert role_sequence_errors(out) == []
    assert marker_count(out, "micro") <= 1


def test_off_by_default_is_a_no_op():
    turns = [turn(i) for i in range(8)]
    flat = [m for t in turns for m in t]
    s = Session(parse_config({"model": {"context_length": 20_000}}), Recorder(), counter=counter())
    run_turns(s, turns)
    assert s.messages == flat


def test_passes_absorb_oldest_exchange_and_keep_one_marker(caplog):
    caplog.set_level(logging.INFO, logger="microcompact")
    turns = [turn(i) for i in range(8)]
    flat = [m for t in turns for m in t]
    summ = Recorder()
    s = Session(config(), summ, counter=counter())
    run_turns(s, turns)
    check(s, flat)
    out = s.transcript
    assert marker_count(out, "micro") == 1
    # the first exchanges were summarized, oldest first, each once
    first_ids = [tc["id"] for m in summ.calls[0] for tc in (m.get("tool_calls") or [])]
    assert first_ids == ["c0_1"]  # the head is user, assistant, tool; the rest of turn 0 comes first
    seen = [tc["id"] for c in summ.calls for m in c for tc in (m.get("tool_calls") or [])]
    assert len(seen) == len(set(seen))
    marker = next(m for m in out if marker_kind(m) == "micro")
    assert "c1_0" in marker_body(marker)
    assert any(r.message.startswith("Micro-compaction: ") and "->" in r.message for r in caplog.records)
    assert s.tokens < sum(counter().count_message(m) for m in flat)


def test_head_and_tail_untouched():
    turns = [turn(i) for i in range(8)]
    flat = [m for t in turns for m in t]
    s = Session(config(), Recorder(), counter=counter())
    run_turns(s, turns)
    assert s.messages[:3] == flat[:3]
    assert s.messages[-4:] == flat[-4:]


def test_telemetry_line_is_sorted_json_without_content(caplog):
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    turns = [turn(i) for i in range(6)]
    s = Session(config(), Recorder(), counter=counter(), session_id="sess-1")
    run_turns(s, turns)
    lines = [r.getMessage() for r in caplog.records if r.name == "microcompact.telemetry"]
    assert lines and all(line.startswith("micro compaction telemetry: {") for line in lines)
    record = json.loads(lines[0].split(": ", 1)[1])
    assert list(record) == sorted(record)
    for key in (
        "event",
        "session_id",
        "outcome",
        "messages_before",
        "messages_after",
        "tokens_before",
        "tokens_after",
        "tokens_delta",
        "exchange_tokens",
        "rolling_summary_tokens",
        "cursor",
        "passes_total",
        "tokens_saved_total",
        "duration_ms",
        "threshold_tokens",
        "context_limit",
        "occupancy_pct",
        "aux_model",
    ):
        assert key in record
    assert record["event"] == "micro_compaction" and record["session_id"] == "sess-1"
    assert record["tokens_delta"] == record["tokens_after"] - record["tokens_before"]
    assert record["occupancy_pct"] == round(100 * record["tokens_after"] / 10_000, 1)
    assert "word" not in " ".join(lines) and "request" not in " ".join(lines)


def test_occupancy_null_when_context_limit_unknown(caplog):
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    cfg = parse_config({"compression": {"micro_compact": True, "target_ratio": 0.01}})
    s = Session(cfg, Recorder(), counter=counter())
    run_turns(s, [turn(i) for i in range(6)])
    records = [
        json.loads(r.getMessage().split(": ", 1)[1]) for r in caplog.records if r.name == "microcompact.telemetry"
    ]
    assert records and all(r["occupancy_pct"] is None and r["context_limit"] is None for r in records)


def test_failures_leave_transcript_and_skip_after_three(caplog):
    caplog.set_level(logging.INFO, logger="microcompact")
    turns = [turn(i) for i in range(10)]
    summ = Recorder(fail_on={"c1_0"})
    s = Session(config(), summ, counter=counter())
    outcomes = []
    for t in turns:
        for m in t:
            s.append(m)
        before = s.transcript
        results = s.finalize_turn()
        outcomes += [r.outcome for r in results]
        if results and results[0].outcome == "summarize_failed":
            assert s.transcript == before
    assert outcomes[:4] == ["absorbed", "summarize_failed", "summarize_failed", "exchange_skipped"]
    assert "absorbed" in outcomes[4:]
    assert any(
        "skipping exchange at cursor" in r.message and "3 consecutive failures" in r.message for r in caplog.records
    )
    # the skipped exchange stays verbatim
    assert any(tc["id"] == "c1_0" for m in s.transcript for tc in (m.get("tool_calls") or []))


def test_summarizer_returning_empty_or_huge_output_is_rejected():
    class Bad(Recorder):
        def __init__(self, out):
            super().__init__()
            self.out = out

        def merge(self, summary, exchange):
            return self.out

    for out in ["", "   ", "x " * 50_000, None]:
        s = Session(config(), Bad(out), counter=counter())
        run_turns(s, [turn(i) for i in range(4)])
        assert marker_count(s.transcript, "micro") == 0


def test_resume_recovers_cursor_and_summary_from_marker():
    turns = [turn(i) for i in range(10)]
    flat = [m for t in turns for m in t]
    s1 = Session(config(), Recorder(), counter=counter())
    run_turns(s1, turns[:6])
    # Exported as `sessions export`/`replay --out` write it: bookkeeping dropped, marker metadata (_mc) kept.
    # (Without _mc a marker is plain text and resumes as an ordinary message: tests/test_markers_api.py.)
    exported = [{k: v for k, v in m.items() if k not in ("_tokens", "_pos", "_row")} for m in s1.transcript]
    summ2 = Recorder()
    s2 = Session(config(), summ2, counter=counter(), messages=exported)
    run_turns(s2, turns[6:])
    seen_before = {tc["id"] for c in Recorder().calls for m in c for tc in (m.get("tool_calls") or [])}
    ids2 = [tc["id"] for c in summ2.calls for m in c for tc in (m.get("tool_calls") or [])]
    absorbed_in_s1 = {
        tc["id"]
        for m in flat[: sum(len(t) for t in turns[:6])]
        for tc in (m.get("tool_calls") or [])
        if not any(tc["id"] == x["id"] for y in s1.transcript for x in (y.get("tool_calls") or []))
    }
    assert absorbed_in_s1 and not absorbed_in_s1 & set(ids2) and not seen_before
    assert marker_body(next(m for m in s2.transcript if marker_kind(m) == "micro")).startswith(
        marker_body(next(m for m in s1.transcript if marker_kind(m) == "micro"))
    )
    check(s2, flat)
    # resumed run ends exactly like an uninterrupted one
    s3 = Session(config(), Recorder(), counter=counter())
    run_turns(s3, turns)
    assert s2.messages == s3.messages


def test_cadence_every_n_turns_and_clamp():
    summ = Recorder()
    s = Session(config(micro_compact_every_n_turns=3), summ, counter=counter())
    results = []
    for t in [turn(i) for i in range(15)]:
        s.extend(t)
        results.append(bool(s.finalize_turn()))
    assert not any(r for i, r in enumerate(results) if (i + 1) % 3)
    assert results[8::3] == [True, True, True]
    assert config(micro_compact_every_n_turns=0).compression.micro_compact_every_n_turns == 1


def test_incomplete_turn_runs_no_pass_but_counts():
    s = Session(config(micro_compact_every_n_turns=2), Recorder(), counter=counter())
    for i in range(8):
        s.extend(turn(i))
    assert s.finalize_turn(completed=False) == []
    assert s.finalize_turn() != []


def test_defrag_converges_with_an_echoing_model(caplog):
    caplog.set_level(logging.INFO, logger="microcompact")

    class Wordy(Recorder):
        def merge(self, summary, exchange):
            super().merge(summary, exchange)
            return (summary + "\n- " + "detail " * 120).strip()

    summ = Wordy(echo_condense=True)
    s = Session(config(micro_compact_defrag_threshold_tokens=300), summ, counter=counter())
    outcomes = []
    for t in [turn(i) for i in range(30)]:
        for m in t:
            s.append(m)
        outcomes += [r.outcome for r in s.finalize_turn()]
    assert outcomes.count("defrag") >= 2
    assert s.micro.state.text_tokens <= 300 + 200
    # the echo is rejected every time, so defrag does not fire on every pass
    assert outcomes.count("defrag") < outcomes.count("absorbed")
    assert any("deterministic" in r.message for r in caplog.records if "defrag" in r.message)


def test_commit_failure_rolls_back_in_memory():
    events = []

    def commit(event, messages):
        events.append(event)
        if len(events) == 2:
            raise OSError("disk full")

    s = Session(config(), Recorder(), counter=counter(), commit=commit)
    outcomes = []
    for t in [turn(i) for i in range(10)]:
        for m in t:
            s.append(m)
        before = s.transcript
        results = s.finalize_turn()
        outcomes += [r.outcome for r in results]
        if results and results[0].outcome == "store_failed":
            assert s.transcript == before
    assert "store_failed" in outcomes and outcomes.count("absorbed") >= 2
    assert isinstance(events[0], Absorb)


def test_long_turn_is_absorbed_in_pieces_before_requests():
    # one user message, then a 60-iteration turn of ~450-token results: far beyond max_exchange_tokens
    msgs = turn(0, iterations=1) + turn(1, iterations=60, size=450)
    s = Session(config(micro_compact_max_exchange_tokens=2000), Recorder(), counter=counter())
    peak = 0
    results = []
    for m in msgs:
        if m["role"] == "assistant":
            results += s.before_request()
            peak = max(peak, s.tokens)
        s.append(m)
    pieces = [r for r in results if r.outcome == "absorbed"]
    assert len(pieces) >= 5
    assert all(r.record["exchange_tokens"] <= 2000 for r in pieces)
    assert peak < 2_000 + 2 * 2000 + 1500  # tail + at most one piece pending + head/marker
    out = s.transcript
    assert role_sequence_errors(out) == [] and user_message_errors(msgs, out) == []
    # inside the turn the marker sits right before an assistant message; strict providers get them merged
    i = next(i for i, m in enumerate(out) if marker_kind(m) == "micro")
    assert out[i + 1]["role"] == "assistant"
    assert role_sequence_errors(to_api(out, strict_alternation=True), strict_alternation=True) == []


def test_reclaim_gate_defers_and_merges_exchanges():
    gate = 600
    summ = Recorder()
    s = Session(config(micro_compact_min_reclaim_tokens=gate), summ, counter=counter())
    outcomes = []
    for t in [turn(i, iterations=1, size=150) for i in range(14)]:
        for m in t:
            s.append(m)
        outcomes += [(r.outcome, r.record["tokens_delta"]) for r in s.finalize_turn()]
    absorbed = [d for o, d in outcomes if o == "absorbed"]
    assert ("no_reclaim", 0) in outcomes
    assert absorbed[1:] and all(-d >= gate for d in absorbed[1:])  # the first pass is exempt
    assert any(len([m for m in c if m.get("tool_calls")]) > 1 for c in summ.calls)  # several exchanges at once


def test_micro_compact_history_processor_shape():
    turns = [turn(i) for i in range(6)]
    flat = [m for t in turns for m in t]
    snapshot = json.dumps(flat)
    out = micro_compact(flat, Recorder(), config=config(), counter=counter())
    assert json.dumps(flat) == snapshot  # caller's dicts untouched
    assert marker_count(out, "micro") == 1 and user_message_errors(flat, out) == []
    again = micro_compact(out, Recorder(), config=config(), counter=counter())
    assert len(again) < len(out)


@pytest.mark.parametrize(
    "content", [None, [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]]
)
def test_none_and_list_content(content):
    turns = [turn(i) for i in range(6)]
    for t in turns:
        t[0]["content"] = content if content is not None else t[0]["content"]
        t[1]["content"] = content
    flat = [m for t in turns for m in t]
    s = Session(config(), Recorder(), counter=counter())
    run_turns(s, turns)
    check(s, flat)


def test_long_turn_with_a_missing_tool_result_is_still_absorbed():
    msgs = turn(0, iterations=1) + turn(1, iterations=40, size=450)
    broken = next(i for i, m in enumerate(msgs) if m["role"] == "tool" and m["tool_call_id"] == "c1_3")
    del msgs[broken]  # an interrupted tool in a recording: its call never got a result
    s = Session(config(micro_compact_max_exchange_tokens=2000), Recorder(), counter=counter())
    results = []
    for m in msgs:
        if m["role"] == "assistant":
            results += s.before_request()
        s.append(m)
    assert sum(r.outcome == "absorbed" for r in results) >= 4
    assert role_sequence_errors(s.transcript) == []  # absorbing the unpaired call repaired the pairing


def test_history_processor_returns_no_token_cache_and_uses_the_configured_tokenizer():
    flat = [m for t in [turn(i) for i in range(6)] for m in t]
    out = micro_compact(flat, Recorder(), config=config(tokenizer="estimate"))
    assert not any("_tokens" in m for m in out)
    assert marker_count(out, "micro") == 1


def test_a_huge_early_tool_output_is_not_pinned_by_the_head():
    """Issue 8.7: ``protect_first_n: 3`` kept a large early tool output in the head forever. The head now
    protects its non-user messages only up to a budget (10% of the threshold: 1,000 tokens here)."""
    opening = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": "reading", "tool_calls": [call("big")]},
        {"role": "tool", "tool_call_id": "big", "content": "line of the huge file\n" * 1500},
    ]
    s = Session(config(), Recorder(), counter=counter())
    run_turns(s, [opening] + [turn(n) for n in range(6)])
    s.finalize_turn()
    original = opening + [m for n in range(6) for m in turn(n)]
    assert not any(m.get("tool_call_id") == "big" for m in s.transcript), "the huge early output is still there"
    assert [m["content"] for m in s.transcript[:2]] == ["You are a coding agent.", "read it"]
    check(s, original)


def test_span_selection_works_inside_the_window_it_is_handed():
    """A pass computes one Window and hands it down: span selection never reaches past that tail."""
    from microcompact.micro import MicroCompactor
    from microcompact.tokens import Ledger
    from microcompact.window import Window, WindowBudget

    cfg = config()
    turns = [turn(i) for i in range(6)]
    ledger = Ledger(counter(), [m for t in turns for m in t])
    engine = MicroCompactor(cfg, Recorder(), ledger.counter)
    engine.sync(ledger)
    full = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(cfg))
    span, _ = engine.select_span(ledger, "turn", full)
    assert span is not None and span.end <= full.tail
    # The same transcript with the tail starting just after the head: nothing in between to absorb.
    narrow = Window(full.head, full.head, full.head_budget, full.tail_budget, full.piece_budget)
    assert engine.select_span(ledger, "turn", narrow) == (None, "nothing in the middle")
    assert engine.select_span(ledger, "turn") == (span, "")  # without a window: computed, the same one
