"""Phase 2, summarize: one marker per run of work in place, users individual, batch_max_calls, previous
summaries updated, bounded input, nothing to compact, telemetry, a failing store commit.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import itertools
import json
import logging
import re
from typing import Any

import pytest

from microcompact.batch import (
    BatchCompactor,
)
from microcompact.messages import (
    content_text,
    is_marker,
    marker_body,
    marker_count,
    marker_kind,
    render_marker,
    render_micro_marker,
    to_api,
)
from microcompact.session import Session
from microcompact.summarizers import BATCH_SECTIONS, ExtractiveSummarizer
from microcompact.telemetry import parse_line
from microcompact.tokens import Ledger
from support.batch_helpers import (
    Checked,
    Echo,
    Scribe,
    bounds,
    build,
    config,
    counter,
    iteration,
    opening,
    strip,
    system,
    turn,
)
from support.strategies import units

# --------------------------------------------------------------------------- the summarize phase


def test_each_run_of_work_gets_its_marker_in_place_and_users_stay_individual() -> None:
    """Chronological order (issue 8.8): every kept user message is preceded by the summary of the work done
    before it and followed by the summary of the work it asked for; one call per run of work."""
    msgs = build(12, size=150)
    cfg = config()
    summ = Echo()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    middle = msgs[h:t]
    users = [m for m in middle if m["role"] == "user"]
    assert result.outcome == "compacted" and len(users) > 2
    runs = result.record["runs"]
    assert len(summ.batches) == result.record["summarizer_calls"] == runs == len(users) + (middle[0]["role"] != "user")
    assert all(previous == "" and focus is None for previous, _, focus in summ.batches)
    out = ledger.messages
    new_middle = out[h : len(out) - (len(msgs) - t)]
    assert [strip(m) for m in new_middle if m["role"] == "user"] == users  # individual, verbatim, in order
    assert all(a["role"] == "user" or b["role"] == "user" for a, b in itertools.pairwise(new_middle))
    # each marker names exactly the calls recorded between the user messages around it
    where = {tc["id"]: i for i, m in enumerate(msgs) for tc in m.get("tool_calls") or ()}
    user_at = [i for i in range(h, t) if msgs[i]["role"] == "user"]
    for k, m in enumerate(new_middle):
        if not is_marker(m):
            continue
        ids = marker_body(m).split(": ", 1)[1].split()
        assert ids, "every marker summarizes work"
        before_users = sum(1 for x in new_middle[:k] if not is_marker(x))
        low = user_at[before_users - 1] if before_users else h - 1
        high = user_at[before_users] if before_users < len(user_at) else t
        assert all(low < where[i] < high for i in ids), f"marker {k} summarizes work from elsewhere: {ids}"
    assert "_mc" not in json.dumps(to_api(out))
    assert result.record["absorbed"] == len(middle) - len(users)


def test_batch_max_calls_gives_the_oldest_runs_the_extractive_summary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    cfg = config(batch_max_calls=3)
    summ = Echo()
    ledger = Ledger(counter(), build(12, size=150))
    _h, _t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted" and len(summ.batches) == result.record["summarizer_calls"] == 3
    assert result.record["capped_runs"] == result.record["runs"] - 3 > 0
    markers = [m for m in ledger.messages if marker_kind(m) == "batch"]
    assert len(markers) == result.record["runs"]
    called = [m for m in markers if marker_body(m).startswith("### Completed actions\n- call ")]
    assert called == markers[-3:]  # the newest runs by the model, the oldest deterministically
    assert any("beyond batch_max_calls=3" in r.getMessage() for r in caplog.records)
    with pytest.raises(Exception, match="batch_max_calls"):
        config(batch_max_calls=0)


def test_previous_batch_and_micro_summaries_are_updated_not_repeated() -> None:
    cfg = config()
    summ = Scribe()
    msgs = build(10, size=150)
    # an earlier batch marker and a micro marker inside the middle, each after a turn's final answer
    assert msgs[6]["content"] == "done 0" and msgs[12]["content"] == "done 1"
    msgs[13:13] = [render_micro_marker("- the old rolling summary line")]
    msgs[7:7] = [render_marker("### Goal\n- the old batch goal", "batch")]
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted"
    # each marker is in time: it is the previous summary of the run it lies in (turn 0's, turn 1's), once
    previous = [p for p, _, _ in summ.batches]
    assert sum("the old batch goal" in p for p in previous) == 1
    assert sum("the old rolling summary line" in p for p in previous) == 1
    assert not any("the old batch goal" in p and "the old rolling summary line" in p for p in previous)
    assert all(not any(is_marker(m) for m in seen) for _, seen, _ in summ.batches)  # bodies go in as previous
    out = ledger.messages
    assert marker_count(out, "batch") == result.record["runs"] and marker_count(out, "micro") == 0


def test_batch_marker_uses_the_fixed_sections_with_the_extractive_summarizer() -> None:
    msgs = [*opening(), {"role": "user", "content": "make the build pass; never touch vendor/"}]
    msgs += iteration(
        "c1",
        'Traceback (most recent call last):\n  File "x"\nValueError: bad config\nexit code 1',
        command="python -m build",
        text="I'll run the build because CI is red.",
    )
    msgs += iteration("c2", "ok", name="Edit", path="src/build.py", text="Let me fix src/build.py.")
    msgs += [{"role": "assistant", "content": "Fixed."}]
    msgs += [m for n in range(3, 8) for m in turn(n, iterations=2, size=300)]
    cfg = config()
    s = Session(cfg, ExtractiveSummarizer(), counter=counter(), messages=msgs)
    result = s.compact()
    assert result.outcome == "compacted"
    body = marker_body(next(m for m in s.transcript if marker_kind(m) == "batch"))
    headings = [ln[4:] for ln in body.splitlines() if ln.startswith("### ")]
    prose = [h for h in headings if h in BATCH_SECTIONS]
    assert prose and prose == sorted(prose, key=BATCH_SECTIONS.index)  # in the fixed order
    # the ledger stands in for "Relevant files" and "Blocked (exact errors)", after the prose
    assert headings[len(prose) :] == ["Files", "Failing commands", "What tools showed"]
    assert "- `python -m build` → exit 1: ValueError: bad config" in body
    assert "- src/build.py — edited 1x" in body


def test_input_too_large_for_the_summarizer_is_cut_head_and_tail_with_a_note() -> None:
    """The runs share the summarizer's input limit: together the calls read about what one call would."""
    cfg = config(aux={"max_input_tokens": 1000})
    msgs = build(5, iterations=12, size=60)
    summ = Scribe()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted"
    calls = result.record["summarizer_calls"]
    assert calls == len(summ.batches) >= 3
    runs: list[list[dict[str, Any]]] = [[]]
    for m in msgs[h:t]:
        if m["role"] == "user":
            runs.append([])
        else:
            runs[-1].append(m)
    runs = [r for r in runs if r]
    for (_, seen, _), middle in zip(reversed(summ.batches), runs, strict=False):  # calls go newest run first
        notes = [m for m in seen if "omitted by microcompact: the summarizer's input limit" in content_text(m)]
        assert len(notes) == 1
        note_at = seen.index(notes[0])
        assert 0 < note_at < len(seen) - 1
        assert units(seen[:1]) == units(middle[:1]) and units(seen[-1:]) == units(middle[-1:])  # both ends kept
        assert re.search(r"\[\.\.\. \d+ messages \([\d,]+ tokens\) omitted", content_text(notes[0]))
    assert result.record["input_tokens"] <= 1.05 * 1000 + 50 * calls
    assert b.stats().largest_input_tokens < result.record["input_tokens"]


def test_nothing_to_compact_is_reported_and_changes_nothing() -> None:
    cfg = config()
    msgs = [system(), {"role": "user", "content": "x " * 30_000}, {"role": "assistant", "content": "ok"}]
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, Scribe(), counter())
    Checked(b, cfg)
    assert b.compact(ledger).outcome == "nothing_to_compact"


def test_telemetry_one_sorted_content_free_line_per_attempt(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    cfg = config()
    s = Session(cfg, Scribe(), counter=counter(), session_id="sess-b")
    s.extend(build(14, size=200))
    results = [s.compact(), s.compact()]
    lines = [r.getMessage() for r in caplog.records if r.name == "microcompact.telemetry"]
    batch_lines = [ln for ln in lines if ln.startswith("batch compaction telemetry: {")]
    assert len(batch_lines) == 2
    for line, result in zip(batch_lines, results, strict=False):
        kind, record = parse_line(line)
        assert kind == "batch" and record == json.loads(json.dumps(result.record))
        assert list(record) == sorted(record)
        for key in (
            "outcome",
            "tokens_before",
            "tokens_after",
            "messages_before",
            "messages_after",
            "duration_ms",
            "summarizer",
            "reason",
        ):
            assert key in record, key
        assert record["session_id"] == "sess-b" and record["summarizer"] == "scribe"
        assert record["tokens_delta"] == record["tokens_after"] - record["tokens_before"]
    assert "word" not in " ".join(lines) and "request 3" not in " ".join(lines)


def test_store_commit_failure_leaves_the_transcript_as_it_was() -> None:
    events: list[Any] = []

    def commit(event: Any, messages: list[dict]) -> None:
        events.append(event)
        raise OSError("disk full")

    cfg = config()
    s = Session(cfg, Scribe(), counter=counter(), commit=commit, messages=build(14, size=200))
    before = s.transcript
    result = s.compact()
    assert result.outcome == "store_failed" and s.transcript == before and len(events) == 1
