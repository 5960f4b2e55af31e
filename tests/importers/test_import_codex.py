"""Codex CLI rollouts: the sample imported through the command line, checked against the raw lines, replayed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from microcompact.contract import role_sequence_errors
from microcompact.importers import NO_RESULT, import_report, to_epoch
from microcompact.messages import TranscriptError
from support.import_checks import DATA, assert_replays_keeping_the_contract, cli, import_with_cli, sniffers_of

SAMPLE = DATA / "codex" / "rollout-2025-10-02T09-14-03-0199a3c2-5b1e-7d40-9f0e-2c8d1a4b6e10.jsonl"


def _raw() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _items(kind: str) -> list[dict[str, Any]]:
    """The payloads of the sample's response items of ``kind``."""
    return [r["payload"] for r in _raw() if r["type"] == "response_item" and r["payload"]["type"] == kind]


def test_sample_imports_with_auto_detection(tmp_path: Path) -> None:
    assert sniffers_of(SAMPLE) == ["codex"]
    messages, report = import_with_cli(SAMPLE, tmp_path / "codex.jsonl")
    assert report[0] == f"{SAMPLE}: detected format codex (--from NAME overrides)"
    assert role_sequence_errors(messages) == []

    # User messages verbatim and in order: the user message items, then Codex's summary where it compacted.
    summary = next(r["payload"]["message"] for r in _raw() if r["type"] == "compacted")
    users = [m["content"] for m in messages if m["role"] == "user"]
    expected = [p["content"][0]["text"] for p in _items("message") if p["role"] == "user"]
    assert [u for u in users if u != summary] == expected
    compacted = next(m for m in messages if m.get("_mc") == {"compact_summary": True})
    assert compacted["content"] == summary

    # Every call is kept with its arguments as sent, and answered by its output (or marked unanswered).
    calls = {tc["id"]: tc["function"] for m in messages for tc in m.get("tool_calls", ())}
    raw_calls = {p["call_id"]: (p["name"], p["arguments"]) for p in _items("function_call")}
    raw_calls |= {p["call_id"]: (p["name"], p["input"]) for p in _items("custom_tool_call")}
    assert {k: (f["name"], f["arguments"]) for k, f in calls.items()} == raw_calls
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    outputs = {p["call_id"]: p["output"] for p in _items("function_call_output") + _items("custom_tool_call_output")}
    unanswered = set(raw_calls) - set(outputs)
    assert len(unanswered) == 1  # the call the user interrupted (turn_aborted)
    assert results == outputs | dict.fromkeys(unanswered, NO_RESULT)

    # One assistant message per model response: the parallel calls share one.
    assert Counter(len(m.get("tool_calls", ())) for m in messages if m["role"] == "assistant")[2] == 1
    stamped = [m for m in messages if m.get("_mc") != {"placeholder": True}]
    assert all(isinstance(m.get("_ts"), float) for m in stamped)
    assert stamped[0]["_ts"] == to_epoch(_raw()[1]["timestamp"])


def test_sample_report_counts_what_was_dropped_and_repaired() -> None:
    report = import_report(SAMPLE, "codex")
    raw = _raw()
    assert report.notes["reasoning_dropped"] == len(_items("reasoning"))
    assert report.notes["web_search_call_dropped"] == len(_items("web_search_call")) == 1
    assert report.notes["custom_tool_call_as_tool_call"] == len(_items("custom_tool_call"))
    assert report.notes["line_skipped:turn_context"] == sum(r["type"] == "turn_context" for r in raw)
    events = Counter(r["payload"]["type"] for r in raw if r["type"] == "event_msg")
    assert {k: report.notes[f"line_skipped:event_msg:{k}"] for k in events} == dict(events)
    assert report.repairs == Counter({"missing_tool_result_added": 1})
    assert report.compact_summary_indices == [
        i for i, m in enumerate(report.messages) if m.get("_mc") == {"compact_summary": True}
    ]


def test_sample_replays_keeping_the_contract(tmp_path: Path) -> None:
    imported = tmp_path / "codex.jsonl"
    import_with_cli(SAMPLE, imported)
    assert_replays_keeping_the_contract(imported, tmp_path, context_limit=1200)


def test_older_rollouts_hold_bare_items(tmp_path: Path) -> None:
    lines = [
        {"id": "s1", "timestamp": "2025-05-01T10:00:00Z", "instructions": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"record_type": "state"},
        {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": {"content": "a.txt", "success": True}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One file."}]},
    ]
    src = tmp_path / "rollout-old.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert sniffers_of(src) == ["codex"]
    report = import_report(src, "auto")
    assert [(m["role"], m.get("content")) for m in report.messages] == [
        ("user", "list files"),
        ("assistant", ""),
        ("tool", "a.txt"),
        ("assistant", "One file."),
    ]
    assert report.notes["line_skipped:session_meta"] == report.notes["line_skipped:state"] == 1


@pytest.mark.parametrize(
    "line,problem",
    [
        ("{not json", r"x\.jsonl:2: invalid JSON"),
        (
            '{"type": "event_msg", "payload": {"type": "token_count", "n": NaN}}',
            r"x\.jsonl:2: NaN is not a JSON number",
        ),
        ('{"timestamp": "2025-01-01T00:00:00Z"}', r"x\.jsonl:2: line has neither 'type' nor 'payload'"),
        (
            '{"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": "{}"}}',
            r"x\.jsonl:2: function_call item needs a call_id",
        ),
        (
            '{"type": "response_item", "payload": {"type": "message", "role": "robot", "content": []}}',
            r"x\.jsonl:2: message item with unknown role 'robot'",
        ),
        (
            '{"type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "x"}]}}',
            r"x\.jsonl:2: content\[0\] has unknown part type 'x'",
        ),
        ('{"type": "compacted", "payload": {}}', r"x\.jsonl:2: compacted line needs a string 'message'"),
    ],
)
def test_bad_lines_are_named_by_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    src = tmp_path / "x.jsonl"
    first = {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s"}}
    src.write_text(json.dumps(first) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(TranscriptError, match=problem):
        import_report(src, "codex")
    code, stdout, stderr = cli("import", src, "--out", tmp_path / "out.jsonl")
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1 and "detected format codex" in stderr
