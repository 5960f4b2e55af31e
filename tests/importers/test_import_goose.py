"""goose session files: the sample imported through the command line, checked against its raw lines, replayed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from microcompact.contract import role_sequence_errors
from microcompact.importers import import_report
from microcompact.messages import TranscriptError
from support.import_checks import DATA, assert_replays_keeping_the_contract, cli, import_with_cli, sniffers_of

SAMPLE = DATA / "goose" / "20250515_094958.jsonl"


def _raw() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _items(kind: str) -> list[dict[str, Any]]:
    return [item for rec in _raw()[1:] for item in rec["content"] if item["type"] == kind]


def test_sample_imports_with_auto_detection(tmp_path: Path) -> None:
    assert sniffers_of(SAMPLE) == ["goose"]
    messages, report = import_with_cli(SAMPLE, tmp_path / "goose.jsonl")
    assert report[0] == f"{SAMPLE}: detected format goose (--from NAME overrides)"
    assert role_sequence_errors(messages) == []
    typed = [
        rec["content"][0]["text"] for rec in _raw()[1:] if rec["role"] == "user" and rec["content"][0]["type"] == "text"
    ]
    assert [m["content"] for m in messages if m["role"] == "user"] == typed
    calls = {tc["id"]: tc["function"] for m in messages for tc in m.get("tool_calls", ())}
    assert {k: (f["name"], json.loads(f["arguments"])) for k, f in calls.items()} == {
        r["id"]: (r["toolCall"]["value"]["name"], r["toolCall"]["value"]["arguments"]) for r in _items("toolRequest")
    }
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [r["id"] for r in _items("toolResponse")]
    assert {m["_ts"] for m in messages} <= {float(rec["created"]) for rec in _raw()[1:]}


def test_failed_calls_user_only_content_and_thinking() -> None:
    report = import_report(SAMPLE, "goose")
    by_id = {m["tool_call_id"]: m for m in report.messages if m["role"] == "tool"}
    for response in _items("toolResponse"):
        result, got = response["toolResult"], by_id[response["id"]]
        if result["status"] == "error":
            assert got["content"] == f"Error: {result['error']}" and got["_mc"] == {"is_error": True}
        else:  # only what the model was shown: content for the user alone (a rendered view) is dropped
            shown = [v["text"] for v in result["value"] if "assistant" in v["annotations"]["audience"]]
            assert got["content"] == "\n".join(shown)
    assert report.notes["user_only_tool_content_dropped"] == 1
    assert report.notes["thinking_dropped"] == len(_items("thinking")) == 1
    assert report.notes["session_metadata_line"] == 1
    assert report.repairs == Counter()
    # A message with text and a call stays one assistant message, text first.
    first = next(m for m in report.messages if m["role"] == "assistant")
    assert first["content"] == "I'll look at the current argument parsing first." and len(first["tool_calls"]) == 1


def test_sample_replays_keeping_the_contract(tmp_path: Path) -> None:
    imported = tmp_path / "goose.jsonl"
    import_with_cli(SAMPLE, imported)
    assert_replays_keeping_the_contract(imported, tmp_path, context_limit=1024)


def _line(role: str, content: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"id": "m", "role": role, "created": 1747301400, "content": content, **extra})


def test_compaction_summary_newer_results_and_invalid_requests(tmp_path: Path) -> None:
    lines = [
        _line("user", [{"type": "text", "text": "fix it"}]),
        _line(
            "assistant",
            [
                {"type": "toolRequest", "id": "bad", "toolCall": {"status": "error", "error": "could not parse"}},
                {"type": "toolRequest", "id": "ok", "toolCall": {"status": "success", "value": {"name": "shell"}}},
            ],
        ),
        _line(
            "user",
            [
                {"type": "toolResponse", "id": "bad", "toolResult": {"status": "error", "error": "bad call"}},
                {
                    "type": "toolResponse",
                    "id": "ok",
                    "toolResult": {"status": "success", "value": {"content": [{"type": "text", "text": "done"}]}},
                },
                {"type": "text", "text": "and now?"},
            ],
        ),
        _line(
            "user",
            [{"type": "text", "text": "Summary so far: fixed it."}],
            metadata={"userVisible": False, "agentVisible": True},
        ),
        _line("assistant", [{"type": "contextLengthExceeded", "msg": "too long"}]),
    ]
    src = tmp_path / "session.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")  # no metadata line: a message comes first
    assert sniffers_of(src) == ["goose", "openai"]  # openai, the catch-all, is asked last
    report = import_report(src, "auto")
    assert [(m["role"], m.get("tool_call_id") or m["content"]) for m in report.messages] == [
        ("user", "fix it"),
        ("assistant", ""),
        ("tool", "ok"),
        ("user", "and now?"),
        ("user", "Summary so far: fixed it."),
    ]
    assert report.compact_summary_indices == [4]
    assert report.notes["invalid_tool_request_dropped"] == report.notes["contextLengthExceeded_skipped"] == 1
    assert report.repairs == Counter({"orphan_tool_result_dropped": 1})  # the answer to the dropped request


@pytest.mark.parametrize(
    "content,role,problem",
    [
        ([{"type": "text", "text": "x"}], "robot", r"s\.jsonl:2: unknown role 'robot'"),
        ([{"type": "text", "text": "x", "n": float("inf")}], "user", r"s\.jsonl:2: Infinity is not a JSON number"),
        ([{"type": "toolResponse", "id": "a", "toolResult": {}}], "user", r"s\.jsonl:2: content\[0\]: toolResult"),
        ([{"type": "toolRequest", "id": "a"}], "assistant", r"s\.jsonl:2: content\[0\]: toolRequest needs a toolCall"),
        ([{"type": "toolRequest", "id": "a"}], "user", r"s\.jsonl:2: content\[0\]: 'toolRequest' item is not valid"),
        ([{"text": "no type"}], "user", r"s\.jsonl:2: content\[0\]: None item is not valid"),
    ],
)
def test_bad_messages_are_named_by_file_and_line(tmp_path: Path, content: Any, role: str, problem: str) -> None:
    src = tmp_path / "s.jsonl"
    src.write_text(json.dumps({"working_dir": "/w", "description": "d"}) + "\n" + _line(role, content) + "\n")
    with pytest.raises(TranscriptError, match=problem):
        import_report(src, "goose")
    code, stdout, stderr = cli("import", src, "--out", tmp_path / "out.jsonl")
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1 and "detected format goose" in stderr


def test_message_content_for_the_user_only_is_not_imported(tmp_path: Path) -> None:
    shown = {"type": "text", "text": "Summary: all tests pass."}
    hidden = {"type": "text", "text": "(rendered table for the user)", "annotations": {"audience": ["user"]}}
    src = tmp_path / "s.jsonl"
    src.write_text(
        _line("user", [{"type": "text", "text": "status?"}]) + "\n" + _line("assistant", [shown, hidden]) + "\n"
    )
    report = import_report(src, "goose")
    assert report.messages[-1]["content"] == shown["text"]
    assert report.notes["user_only_content_dropped"] == 1
