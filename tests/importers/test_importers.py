"""Importers: real recorded sessions against their normalized versions, repairs, errors, round trip."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.contract import INTERRUPTED_RESULT, role_sequence_errors, tool_pairing_errors
from microcompact.importers import (
    FORMATS,
    NO_RESULT,
    REGISTRY,
    ImportReport,
    detect_format,
    import_report,
    import_transcript,
    run_import,
    to_epoch,
    write_jsonl,
)
from microcompact.importers.sniffing import HEAD_BYTES
from microcompact.keys import TS_KEY
from microcompact.messages import TranscriptError, user_texts
from microcompact.replay import load_transcript
from support.paths import TRANSCRIPTS

SHARED = TRANSCRIPTS
RAW = SHARED / "raw"
NORMALIZED = SHARED / "normalized"

# normalized name, format, raw file, whether every message should carry _ts
CASES = [
    ("cc_fa812bfe", "claude-code", "claude_code/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", True),
    ("cc_4d5611e5", "claude-code", "claude_code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl", True),
    ("cc_ae4a77f8", "claude-code", "claude_code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl", True),
    ("cc_subagent_a2898e3", "claude-code", "claude_code/4d5611e5-subagent-agent-a2898e3.jsonl", True),
    (
        "sweagent_marshmallow_fc",
        "swe-agent",
        "swe_agent/marshmallow-1867__function_calling_replace_from_source.traj",
        False,
    ),
    ("sweagent_ctf_i_got_id", "swe-agent", "swe_agent/ctf_web_i_got_id_demo.traj", False),
    ("sweagent_ctf_flash", "swe-agent", "swe_agent/ctf_forensics_flash.traj", False),
    ("swesmith_largest", "adp", "adp/swe-smith.sample_raw.json", False),
    ("sweplay_openhands_largest", "adp", "adp/swe-play-trajectories.sample_raw.json", False),
    ("nebius_sweagent_largest", "adp", "adp/nebius_SWE-agent-trajectories.sample_raw.json", False),
]

needs_shared = pytest.mark.skipif(
    not (RAW.is_dir() and NORMALIZED.is_dir()), reason=f"{SHARED} (real transcripts) is not available"
)

_cache: dict[str, ImportReport] = {}


def _imported(raw: str, fmt: str) -> ImportReport:
    if raw not in _cache:
        _cache[raw] = import_report(RAW / raw, fmt)
    return _cache[raw]


def _normalized(name: str) -> list[dict]:
    return [
        json.loads(line)
        for line in (NORMALIZED / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def _meta(name: str) -> dict:
    return json.loads((NORMALIZED / f"{name}.meta.json").read_text(encoding="utf-8"))


def _core(m: dict) -> tuple:
    return (m["role"], m.get("content") or "", json.dumps(m.get("tool_calls") or None), m.get("tool_call_id"))


# ------------------------------------------------------------------------------------------ real files


@needs_shared
@pytest.mark.parametrize("name,fmt,raw,has_ts", CASES, ids=[c[0] for c in CASES])
def test_real_file_matches_normalized(name: str, fmt: str, raw: str, has_ts: bool) -> None:
    report = _imported(raw, fmt)
    ours, theirs = report.messages, _normalized(name)
    meta = _meta(name)

    assert len(ours) == len(theirs) == meta["messages"]
    assert Counter(m["role"] for m in ours) == Counter(m["role"] for m in theirs) == Counter(meta["roles"])
    assert report.tool_call_count() == meta["tool_calls"]
    assert user_texts(ours) == user_texts(theirs)
    # stronger than asked: every message agrees on role, content, tool calls and tool_call_id
    assert [_core(m) for m in ours] == [_core(m) for m in theirs]

    assert tool_pairing_errors(ours) == []
    assert role_sequence_errors(ours) == []
    if has_ts:
        assert all(isinstance(m.get("_ts"), float) for m in ours)
        stamps = [m["_ts"] for m in ours]
        assert 1.7e9 < min(stamps) <= max(stamps) < 1.8e9
    if fmt == "claude-code":
        assert report.compact_summary_indices == meta["compact_summary_indices"]
        assert report.notes["tool_result_is_error"] == meta["notes"].get("tool_result_is_error", 0)
        assert sum(1 for m in ours if (m.get("_mc") or {}).get("is_error")) == report.notes["tool_result_is_error"]
        assert (
            report.repairs["assistant_block_after_tool_result_merged"]
            == meta["notes"]["assistant_block_after_tool_result_merged"]
        )
        assert report.notes["thinking_block_dropped"] == meta["notes"].get("thinking_blocks", 0)
    if fmt == "adp":
        assert report.record == int(next(k for k in meta["notes"] if k.startswith("item:")).split(":")[1])


@needs_shared
@pytest.mark.parametrize("name,fmt,raw,has_ts", CASES, ids=[c[0] for c in CASES])
def test_round_trip_through_replay_loader(name: str, fmt: str, raw: str, has_ts: bool, tmp_path: Path) -> None:
    messages = _imported(raw, fmt).messages
    out = tmp_path / f"{name}.jsonl"
    assert write_jsonl(messages, out) == len(messages)
    loaded = load_transcript(out)
    assert loaded == messages
    assert role_sequence_errors(loaded) == []
    again = import_transcript(out, "openai")  # an exported file re-imports unchanged
    assert again == messages


@needs_shared
def test_openai_passes_normalized_files_through() -> None:
    messages = import_transcript(NORMALIZED / "cc_ae4a77f8.jsonl", "openai")
    assert [_core(m) for m in messages] == [_core(m) for m in _normalized("cc_ae4a77f8")]
    assert all("tool_calls" not in m for m in messages if m["role"] != "assistant")  # nulls dropped


@needs_shared
def test_adp_record_choice() -> None:
    path = RAW / "adp/swe-smith.sample_raw.json"
    first = import_report(path, "adp", record=0)
    assert (first.record, first.records) == (0, 5)
    assert len(first.messages) == 31
    with pytest.raises(TranscriptError, match=r"record 7 out of range .*5 records"):
        import_report(path, "adp", record=7)
    with pytest.raises(TranscriptError, match="adp format only"):
        import_report(RAW / "swe_agent/ctf_forensics_flash.traj", "swe-agent", record=1)


@needs_shared
def test_claude_code_sidechain_lines_skipped_in_main_log(tmp_path: Path) -> None:
    src = RAW / "claude_code/4d5611e5-subagent-agent-a2898e3.jsonl"
    sub = import_transcript(src, "claude-code")
    assert len(sub) == 46  # a subagent log is all sidechain and kept whole
    main = [
        {
            "type": "user",
            "isSidechain": False,
            "timestamp": "2026-02-12T10:00:00Z",
            "message": {"role": "user", "content": "main task"},
        }
    ]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(json.dumps(r) for r in main) + "\n" + src.read_text(encoding="utf-8"), encoding="utf-8")
    report = import_report(mixed, "claude-code")
    assert [m["content"] for m in report.messages] == ["main task"]
    assert report.notes["line_skipped:sidechain"] == 74


# ------------------------------------------------------------------------------------------ synthetic


def _cc_line(kind: str, content, *, ts: str, msg_id: str | None = None, **extra) -> str:
    message = {"role": kind, "content": content}
    if msg_id:
        message["id"] = msg_id
    return json.dumps({"type": kind, "timestamp": ts, "message": message, **extra})


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_claude_code_merge_reorder_and_repairs(tmp_path: Path) -> None:
    lines = [
        json.dumps({"type": "file-history-snapshot", "snapshot": {}}),
        _cc_line("user", "do it", ts="2026-01-01T00:00:00Z"),
        _cc_line(
            "assistant",
            [{"type": "thinking", "thinking": "hmm", "signature": "x"}],
            ts="2026-01-01T00:00:01Z",
            msg_id="m1",
        ),
        _cc_line("assistant", [{"type": "text", "text": "Looking."}], ts="2026-01-01T00:00:02Z", msg_id="m1"),
        _cc_line(
            "assistant",
            [{"type": "tool_use", "id": "a", "name": "Read", "input": {"p": 1}}],
            ts="2026-01-01T00:00:03Z",
            msg_id="m1",
        ),
        json.dumps({"type": "progress", "data": {}}),
        _cc_line("user", [{"type": "tool_result", "tool_use_id": "a", "content": "A"}], ts="2026-01-01T00:00:04Z"),
        # a later block of m1 written after the first result (parallel tool calls)
        _cc_line(
            "assistant",
            [{"type": "tool_use", "id": "b", "name": "Bash", "input": {"c": "ls"}}],
            ts="2026-01-01T00:00:05Z",
            msg_id="m1",
        ),
        _cc_line(
            "assistant",
            [{"type": "tool_use", "id": "c", "name": "Bash", "input": {}}],
            ts="2026-01-01T00:00:05Z",
            msg_id="m1",
        ),
        _cc_line(
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "b",
                    "is_error": True,
                    "content": [{"type": "text", "text": "err1"}, {"type": "text", "text": "err2"}],
                }
            ],
            ts="2026-01-01T00:00:06Z",
        ),
        # the user speaks while call "c" never gets a result; a result for an unknown call
        _cc_line("user", "stop", ts="2026-01-01T00:00:07Z"),
        _cc_line("user", [{"type": "tool_result", "tool_use_id": "zzz", "content": "lost"}], ts="2026-01-01T00:00:08Z"),
        json.dumps({"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}),
        _cc_line("user", "Summary of before", ts="2026-01-01T00:00:09Z", isCompactSummary=True),
        _cc_line("assistant", [{"type": "text", "text": "ok"}], ts="2026-01-01T00:00:10Z", msg_id="m2"),
    ]
    report = import_report(_write(tmp_path, "s.jsonl", lines), "claude-code")
    msgs = report.messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "tool", "user", "user", "assistant"]
    a = msgs[1]
    assert a["content"] == "Looking."
    assert [tc["id"] for tc in a["tool_calls"]] == ["a", "b", "c"]
    assert json.loads(a["tool_calls"][0]["function"]["arguments"]) == {"p": 1}
    assert a["_ts"] == to_epoch("2026-01-01T00:00:01Z")  # the first line of the message
    assert msgs[3] == {
        "role": "tool",
        "tool_call_id": "b",
        "content": "err1\nerr2",
        "_mc": {"is_error": True},
        "_ts": to_epoch("2026-01-01T00:00:06Z"),
    }
    assert msgs[4]["content"] == NO_RESULT and msgs[4]["tool_call_id"] == "c"
    assert msgs[6]["_mc"] == {"compact_summary": True}
    assert report.compact_summary_indices == [6]
    assert report.repairs == Counter(
        {"assistant_block_after_tool_result_merged": 2, "missing_tool_result_added": 1, "orphan_tool_result_dropped": 1}
    )
    assert report.notes["thinking_block_dropped"] == 1
    assert report.notes["line_skipped:progress"] == 1
    assert report.notes["line_skipped:system:compact_boundary"] == 1
    assert role_sequence_errors(msgs) == []


def test_swe_agent_function_calling_and_timestamps(tmp_path: Path) -> None:
    traj = {
        "history": [
            {"role": "system", "content": "sys", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": "demo", "is_demo": True, "agent": "main"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "task", "cache_control": {"type": "ephemeral"}}],
                "timestamp": "2025-01-01T00:00:00+00:00",
            },
            {
                "role": "assistant",
                "content": "t",
                "thought": "t",
                "action": "ls",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"c": "ls"}}}
                ],
            },
            {"role": "tool", "content": "out", "tool_call_ids": ["c1"], "message_type": "observation"},
            {"role": "tool", "content": "stray", "tool_call_ids": ["c9"]},
        ]
    }
    p = tmp_path / "x.traj"
    p.write_text(json.dumps(traj), encoding="utf-8")
    report = import_report(p, "swe_agent")  # underscore spelling accepted
    msgs = report.messages
    assert [m["role"] for m in msgs] == ["system", "user", "user", "assistant", "tool"]
    assert msgs[2] == {"role": "user", "content": [{"type": "text", "text": "task"}], "_ts": 1735689600.0}
    assert msgs[3]["tool_calls"][0]["function"]["arguments"] == '{"c": "ls"}'
    assert set(msgs[3]) == {"role", "content", "tool_calls"}
    assert msgs[4] == {"role": "tool", "content": "out", "tool_call_id": "c1"}
    assert report.repairs == Counter({"tool_call_arguments_serialized": 1, "orphan_tool_result_dropped": 1})


def test_late_system_message_becomes_user(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "o.jsonl",
        [
            json.dumps(m)
            for m in (
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "system", "content": "late"},
                {"role": "assistant", "content": "a", "_ts": "2025-01-01T00:00:00Z"},
            )
        ],
    )
    report = import_report(p, "openai")
    assert [m["role"] for m in report.messages] == ["system", "user", "user", "assistant"]
    assert report.messages[3]["_ts"] == 1735689600.0
    assert report.repairs == Counter({"late_system_message_as_user": 1})


def test_openai_json_object_with_messages(tmp_path: Path) -> None:
    p = tmp_path / "o.json"
    p.write_text(
        json.dumps(
            {
                "model": "x",
                "messages": [
                    {"role": "user", "content": "hi", "timestamp": 1735689600000},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                    },
                ],
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    report = import_report(p, "openai")
    msgs = report.messages
    assert msgs[0] == {"role": "user", "content": "hi", "_ts": 1735689600.0}
    # The API repairs (run_import refuses unless asked): like replay --repair, reported with the place.
    assert msgs[2] == {"role": "tool", "tool_call_id": "t", "content": INTERRUPTED_RESULT}
    assert report.defects == [
        (
            f"{p}: element 1",
            "tool call 't' has no result (an interrupted call?)",
            f"added the tool result {INTERRUPTED_RESULT!r}",
        )
    ]


# ------------------------------------------------------------------------------------------ errors


def test_unknown_format_lists_known_ones(tmp_path: Path) -> None:
    p = _write(tmp_path, "x.jsonl", ['{"role": "user", "content": "x"}'])
    with pytest.raises(TranscriptError) as exc:
        import_transcript(p, "cursor")
    assert "unknown format 'cursor'" in str(exc.value)
    for name in FORMATS:
        assert name in str(exc.value)
    assert set(FORMATS) >= {"claude-code", "swe-agent", "adp", "openai"}


@pytest.mark.parametrize("fmt", ["claude-code", "openai"])
def test_truncated_line_in_the_middle_names_the_line(tmp_path: Path, fmt: str) -> None:
    good = (
        _cc_line("user", "hi", ts="2026-01-01T00:00:00Z")
        if fmt == "claude-code"
        else json.dumps({"role": "user", "content": "hi"})
    )
    p = _write(tmp_path, "t.jsonl", [good, good, good[: len(good) // 2], good])
    with pytest.raises(TranscriptError, match=r"t\.jsonl:3: invalid JSON"):
        import_transcript(p, fmt)


def test_missing_role_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, "r.jsonl", ['{"role": "user", "content": "x"}', '{"content": "no role"}'])
    with pytest.raises(TranscriptError, match=r"r\.jsonl:2: message has no 'role'"):
        import_transcript(p, "openai")
    arr = tmp_path / "r.json"
    arr.write_text(json.dumps([{"role": "user", "content": "x"}, {"content": "y"}]), encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"r\.json: element 1: message has no 'role'"):
        import_transcript(arr, "openai")
    traj = tmp_path / "r.traj"
    traj.write_text(json.dumps({"history": [{"role": "system", "content": "s"}, {"content": "y"}]}), encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"r\.traj: history\[1\]: message has no 'role'"):
        import_transcript(traj, "swe-agent")
    adp = tmp_path / "r_adp.json"
    adp.write_text(
        json.dumps(
            [
                {"messages": [{"role": "user", "content": "x"}]},
                {"trajectory": [{"role": "system", "system_prompt": "s"}, {"text": "t"}]},
            ]
        ),
        encoding="utf-8",
    )
    with pytest.raises(TranscriptError, match=r"record 1: message 1: message has no 'role'"):
        import_transcript(adp, "adp", record=1)


def test_swe_agent_and_adp_read_content_alike(tmp_path: Path) -> None:
    """Both read chat content the same way: null is "", parts lose provider extras, a number is named."""
    messages = [
        {"role": "system", "content": None},
        {"role": "user", "content": ["hi", {"type": "text", "text": "there", "cache_control": {"type": "x"}}]},
        {"role": "assistant", "content": 7},
    ]
    traj = tmp_path / "c.traj"
    traj.write_text(json.dumps({"history": messages}), encoding="utf-8")
    adp = tmp_path / "c_adp.json"
    adp.write_text(json.dumps([{"messages": messages}]), encoding="utf-8")
    for path, fmt, where in ((traj, "swe-agent", r"history\[2\]"), (adp, "adp", "message 2")):
        with pytest.raises(TranscriptError, match=rf"{where}: content must be a string, null or a list of parts"):
            import_transcript(path, fmt)
    traj.write_text(json.dumps({"history": messages[:2]}), encoding="utf-8")
    adp.write_text(json.dumps([{"messages": messages[:2]}]), encoding="utf-8")
    expected_parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]
    for path, fmt in ((traj, "swe-agent"), (adp, "adp")):
        got = import_transcript(path, fmt)
        assert [m["content"] for m in got] == ["", expected_parts], fmt


def test_swe_agent_and_adp_build_messages_alike(tmp_path: Path) -> None:
    """Both keep an assistant's tool calls (normalized), a tool message's call id and a timestamp, and drop
    their own keys; a tool message naming no call is refused by each, with its own wording."""
    call = {"id": "c1", "function": {"name": "bash", "arguments": {"cmd": "ls"}}, "extra": 1}
    messages = [
        {"role": "user", "content": "go", "timestamp": 1_700_000_000, "mask": True},
        {"role": "assistant", "content": "", "tool_calls": [call], "agent": "main"},
        {"role": "tool", "content": "a.py", "tool_call_id": "c1"},
    ]
    traj = tmp_path / "m.traj"
    traj.write_text(json.dumps({"history": messages}), encoding="utf-8")
    adp = tmp_path / "m_adp.json"
    adp.write_text(json.dumps([{"messages": messages}]), encoding="utf-8")
    normalized = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    for path, fmt in ((traj, "swe-agent"), (adp, "adp")):
        got = import_transcript(path, fmt)
        assert got[0] == {"role": "user", "content": "go", TS_KEY: 1_700_000_000}, fmt
        assert got[1]["tool_calls"] == [normalized], fmt
        assert got[2] == {"role": "tool", "content": "a.py", "tool_call_id": "c1"}, fmt
    orphan = [*messages[:2], {"role": "tool", "content": "a.py"}]
    traj.write_text(json.dumps({"history": orphan}), encoding="utf-8")
    adp.write_text(json.dumps([{"messages": orphan}]), encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"history\[2\]: tool message without tool_call_id\(s\)"):
        import_transcript(traj, "swe-agent")
    with pytest.raises(TranscriptError, match=r"message 2: tool message without tool_call_id$"):
        import_transcript(adp, "adp")


def test_other_malformed_inputs(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match=r"cannot read .*no such file"):
        import_transcript(tmp_path / "missing.jsonl", "openai")
    p = _write(tmp_path, "cc.jsonl", [json.dumps({"type": "assistant", "timestamp": "x"})])
    with pytest.raises(TranscriptError, match=r"cc\.jsonl:1: assistant line without a 'message'"):
        import_transcript(p, "claude-code")
    p = _write(tmp_path, "cc2.jsonl", [json.dumps({"role": "user", "content": "x"})])
    with pytest.raises(TranscriptError, match=r"cc2\.jsonl:1: record has no 'type'"):
        import_transcript(p, "claude-code")
    p = _write(tmp_path, "bad.traj", ['{"trajectory": []}'])
    with pytest.raises(TranscriptError, match="no 'history' key"):
        import_transcript(p, "swe-agent")
    p = _write(tmp_path, "tool.jsonl", ['{"role": "tool", "content": "x"}'])
    with pytest.raises(TranscriptError, match=r"tool\.jsonl:1: a tool message needs a tool_call_id"):
        import_transcript(p, "openai")


# ------------------------------------------------------------------------------------------ CLI entry


def test_run_import_writes_and_reports(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        "in.jsonl",
        [
            json.dumps(m)
            for m in (
                {"role": "user", "content": "u [bold]x[/bold]"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            )
        ],
    )
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    out = tmp_path / "out.jsonl"
    assert run_import("openai", src, out, console) == 2  # a recording defect: refused, naming the line
    text = buf.getvalue()
    assert f"{src}:2: tool call 't' has no result" in text and "import --repair" in text and not out.exists()
    buf.truncate(0)
    assert run_import("openai", src, out, console, repair=True) == 0
    assert len(load_transcript(out)) == 3
    text = buf.getvalue()
    assert f"repaired {src}:2: tool call 't' has no result" in text
    assert "recording_defect_repaired 1" in text and "wrote 3 messages" in text

    buf.truncate(0)
    assert run_import("nope", src, out, console) == 2
    assert "unknown format" in buf.getvalue()
    bad = _write(tmp_path, "bad.jsonl", ['{"role": "user", "content": "x"}', "{oops"])
    buf.truncate(0)
    assert run_import("openai", bad, out, console) == 2
    assert "bad.jsonl:2" in buf.getvalue()


def test_run_import_to_stdout_keeps_stdout_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path, "in.jsonl", ['{"role": "user", "content": "hello"}'])
    assert run_import("openai", src, None, None) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == [{"role": "user", "content": "hello"}]
    assert "wrote 1 messages to stdout" in captured.err


def test_claude_code_user_text_moved_after_late_block_results(tmp_path: Path) -> None:
    lines = [
        _cc_line("user", "go", ts="2026-01-01T00:00:00Z"),
        _cc_line(
            "assistant",
            [{"type": "tool_use", "id": "a", "name": "T", "input": {}}],
            ts="2026-01-01T00:00:01Z",
            msg_id="m1",
        ),
        _cc_line("user", [{"type": "tool_result", "tool_use_id": "a", "content": "A"}], ts="2026-01-01T00:00:02Z"),
        _cc_line("user", "also this", ts="2026-01-01T00:00:03Z"),
        _cc_line(
            "assistant",
            [{"type": "tool_use", "id": "b", "name": "T", "input": {}}],
            ts="2026-01-01T00:00:04Z",
            msg_id="m1",
        ),
        _cc_line("user", [{"type": "tool_result", "tool_use_id": "b", "content": "B"}], ts="2026-01-01T00:00:05Z"),
    ]
    report = import_report(_write(tmp_path, "m.jsonl", lines), "claude-code")
    assert [(m["role"], m.get("tool_call_id") or m.get("content")) for m in report.messages] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "a"),
        ("tool", "b"),
        ("user", "also this"),
    ]
    assert report.repairs == Counter(
        {"assistant_block_after_tool_result_merged": 1, "user_msg_moved_after_tool_results": 1}
    )
    assert role_sequence_errors(report.messages) == []


# ------------------------------------------------------------------------------------------ strict JSON at input


@pytest.mark.parametrize("fmt", ["claude-code", "openai"])
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_jsonl_formats_refuse_non_finite_numbers_with_the_line(tmp_path: Path, fmt: str, literal: str) -> None:
    p = _write(
        tmp_path,
        "n.jsonl",
        ['{"role": "user", "content": "hi"}', f'{{"role": "assistant", "content": "x", "n": {literal}}}'],
    )
    with pytest.raises(TranscriptError, match=rf"n\.jsonl:2: {literal} is not a JSON number"):
        import_transcript(p, fmt)


@pytest.mark.parametrize("fmt", ["swe-agent", "adp", "openhands", "openai"])
def test_document_formats_refuse_non_finite_numbers_with_the_line(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / "d.json"
    p.write_text(
        '{"history": [\n  {"role": "user", "content": "hi"},\n  {"role": "assistant", "x": NaN}\n]}', encoding="utf-8"
    )
    with pytest.raises(TranscriptError, match=r"NaN is not a JSON number \(line 3\)"):
        import_transcript(p, fmt)


@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openhands", "swe-agent", "adp", "goose", "openai"])
def test_every_format_refuses_deep_nesting_and_lone_surrogates(tmp_path: Path, fmt: str) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000, encoding="utf-8")
    with pytest.raises(TranscriptError, match="nested too deeply"):
        import_transcript(deep, fmt)
    sur = _write(tmp_path, "s.jsonl", ['{"role": "user", "content": "a \\udfff b"}'])
    with pytest.raises(TranscriptError, match="lone UTF-16 surrogate"):
        import_transcript(sur, fmt)


def test_openai_function_as_a_string_is_named(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "f.jsonl",
        ['{"role": "user", "content": "hi"}', '{"role": "assistant", "tool_calls": [{"id": "a", "function": "ls"}]}'],
    )
    with pytest.raises(TranscriptError, match=r"f\.jsonl:2: tool_calls\[0\] needs function\.name"):
        import_transcript(p, "openai")


# ------------------------------------------------------------------------------------------ registry, --from auto

# The shared raw samples by folder: each folder holds one format (see the shared MANIFEST.md).
RAW_FOLDER_FORMAT = {"claude_code": "claude-code", "swe_agent": "swe-agent", "adp": "adp"}


def _raw_samples() -> list[tuple[Path, str]]:
    """Every recorded session under raw/ (licences and READMEs aside), with the format of its folder."""
    if not RAW.is_dir():
        return []
    return [
        (p, RAW_FOLDER_FORMAT[p.relative_to(RAW).parts[0]])
        for p in sorted(RAW.rglob("*"))
        if p.is_file() and p.suffix in (".jsonl", ".traj", ".json")
    ]


def _cli_import(*args: object) -> tuple[int, str, str]:
    """``microcompact import ARGS`` in-process: exit code, stdout, stderr."""
    result = CliRunner().invoke(app, ["import", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_registry_names_describes_and_sniffs_every_format() -> None:
    assert list(REGISTRY) == list(FORMATS)
    for name, fmt in REGISTRY.items():
        assert fmt.name == name and FORMATS[name] is fmt.importer
        assert fmt.description.strip() and "\n" not in fmt.description
        assert fmt.sniff("") is False  # an empty file is nobody's


@needs_shared
def test_every_raw_sample_is_detected_as_its_format_by_one_sniffer_only() -> None:
    samples = _raw_samples()
    assert {fmt for _, fmt in samples} == set(RAW_FOLDER_FORMAT.values())
    for path, fmt in samples:
        head = path.read_bytes()[:HEAD_BYTES].decode("utf-8", errors="replace")
        assert [f.name for f in REGISTRY.values() if f.sniff(head)] == [fmt], path
        assert detect_format(path) == fmt


@needs_shared
def test_normalized_files_are_detected_as_openai() -> None:
    files = sorted(NORMALIZED.glob("*.jsonl"))
    assert files
    assert {detect_format(p) for p in files} == {"openai"}


@needs_shared
@pytest.mark.parametrize("path,fmt", _raw_samples(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_from_auto_writes_what_the_explicit_format_writes(path: Path, fmt: str, tmp_path: Path) -> None:
    explicit, auto = tmp_path / "explicit.jsonl", tmp_path / "auto.jsonl"
    code, _, err_explicit = _cli_import("--from", fmt, path, "--out", explicit)
    assert code == 0, err_explicit
    code, _, err_auto = _cli_import(path, "--out", auto)  # --from defaults to auto
    assert code == 0, err_auto
    assert auto.read_bytes() == explicit.read_bytes()
    assert err_auto.splitlines()[0] == f"{path}: detected format {fmt} (--from NAME overrides)"
    assert err_auto.splitlines()[1:] == [line.replace(str(explicit), str(auto)) for line in err_explicit.splitlines()]


@pytest.mark.parametrize(
    "text", ["hello, this is not a transcript\n", "", '{"foo": 1, "bar": [1, 2]}\n', "[1, 2, 3]\n"]
)
def test_from_auto_on_an_unknown_file_is_one_line_and_exit_2(tmp_path: Path, text: str) -> None:
    src = tmp_path / "mystery.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code, stdout, stderr = _cli_import("--from", "auto", src, "--out", out)
    assert code == 2 and stdout == "" and not out.exists()
    assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr
    assert str(src) in stderr and all(name in stderr for name in FORMATS)


def test_from_auto_on_a_missing_file_names_it(tmp_path: Path) -> None:
    code, _, stderr = _cli_import(tmp_path / "nope.jsonl")
    assert code == 2 and stderr.strip() == f"error: cannot read {tmp_path / 'nope.jsonl'}: no such file"


def test_detection_reads_past_a_first_line_longer_than_the_head(tmp_path: Path) -> None:
    # A Claude Code log whose first line (a pasted file) is longer than what detection reads.
    first = {
        "parentUuid": None,
        "isSidechain": False,
        "sessionId": "s",
        "type": "user",
        "message": {"role": "user", "content": "x" * (2 * HEAD_BYTES)},
        "uuid": "u1",
        "timestamp": 1.7e9,
    }
    reply = {
        "parentUuid": "u1",
        "sessionId": "s",
        "type": "assistant",
        "uuid": "u2",
        "timestamp": 1.7e9 + 1,
        "message": {"role": "assistant", "id": "m1", "content": [{"type": "text", "text": "ok"}]},
    }
    src = _write(tmp_path, "long.jsonl", [json.dumps(first), json.dumps(reply)])
    assert detect_format(src) == "claude-code"
    assert [m["role"] for m in import_transcript(src, "auto")] == ["user", "assistant"]


def test_openai_shapes_are_detected(tmp_path: Path) -> None:
    msgs = [{"content": "hi", "role": "user"}, {"role": "assistant", "content": "hello"}]
    jsonl = _write(tmp_path, "m.jsonl", [json.dumps(m) for m in msgs])
    array = _write(tmp_path, "m.json", [json.dumps(msgs, indent=2)])
    body = _write(tmp_path, "body.json", [json.dumps({"model": "x", "messages": msgs}, indent=2)])
    for src in (jsonl, array, body):
        assert detect_format(src) == "openai", src
        assert import_transcript(src, "auto") == msgs


def test_from_auto_with_record_applies_to_adp_only(tmp_path: Path) -> None:
    records = [{"messages": [{"role": "user", "content": f"record {i}"}]} for i in range(2)]
    adp_file = _write(tmp_path, "adp.json", [json.dumps(records)])
    assert import_transcript(adp_file, "auto", record=1) == [{"role": "user", "content": "record 1"}]
    openai_file = _write(tmp_path, "m.jsonl", ['{"role": "user", "content": "x"}'])
    code, _, stderr = _cli_import(openai_file, "--record", "0")
    assert code == 2 and "--record applies to the adp format only, not openai" in stderr


def test_from_auto_to_stdout_keeps_stdout_jsonl_only(tmp_path: Path) -> None:
    src = _write(tmp_path, "in.jsonl", ['{"role": "user", "content": "hello"}'])
    code, stdout, stderr = _cli_import(src)
    assert code == 0
    assert [json.loads(line) for line in stdout.splitlines()] == [{"role": "user", "content": "hello"}]
    assert f"{src}: detected format openai" in stderr and "wrote 1 messages to stdout" in stderr


def test_from_auto_names_the_detected_format_in_the_one_error_line(tmp_path: Path) -> None:
    # Detected as claude-code from its first line, but a later line is broken: one line says both.
    good = {"type": "user", "sessionId": "s", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    src = _write(tmp_path, "cc.jsonl", [json.dumps(good), "{broken"])
    code, stdout, stderr = _cli_import(src, "--out", tmp_path / "out.jsonl")
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1
    assert stderr.startswith(f"error: {src}:2: invalid JSON") and "detected format claude-code" in stderr
