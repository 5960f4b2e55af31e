"""Transcripts are checked where they are read: strict JSON, well-formed messages, paired tool calls.

Every defect names the file and its 1-based line; the known recording defects can be repaired on request,
each repair reported with its line. The shared real transcripts are all valid as recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from microcompact import jsoninput
from microcompact.contract import INTERRUPTED_RESULT, check_tool_pairing, role_sequence_errors
from microcompact.messages import TranscriptError, message_shape_errors
from microcompact.replay import load_transcript, read_transcript
from support.paths import NORMALIZED, manifest_sessions


def call(cid: str, name: str = "Bash") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asks(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "calling", "tool_calls": [call(i) for i in ids]}


def result(cid: str, text: str = "out") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


USER = {"role": "user", "content": "do it"}
DONE = {"role": "assistant", "content": "done"}


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- pairing: detection and repair


def test_a_valid_transcript_has_no_defect_and_comes_back_unchanged() -> None:
    msgs = [USER, asks("a", "b"), result("b"), result("a"), DONE]
    fixed, defects = check_tool_pairing(msgs)
    assert defects == [] and fixed == msgs


def test_interrupted_call_gets_a_synthetic_result_after_the_real_ones() -> None:
    msgs = [USER, asks("a", "b"), result("a"), USER, DONE]
    fixed, defects = check_tool_pairing(msgs)
    assert [(i, "'b'" in p) for i, p, _ in defects] == [(1, True)]
    assert fixed[:4] == [USER, asks("a", "b"), result("a"), result("b", INTERRUPTED_RESULT)]
    assert role_sequence_errors(fixed) == []


def test_call_interrupted_at_the_end_of_the_file_is_found() -> None:
    fixed, defects = check_tool_pairing([USER, asks("z")])
    assert [i for i, _, _ in defects] == [1]
    assert fixed[-1] == result("z", INTERRUPTED_RESULT)


def test_orphan_and_second_results_are_dropped_with_their_index() -> None:
    msgs = [USER, result("ghost"), asks("a"), result("a"), result("a", "again"), DONE]
    fixed, defects = check_tool_pairing(msgs)
    assert [i for i, _, _ in defects] == [1, 4]
    assert "no open call" in defects[0][1] and "second result" in defects[1][1]
    assert fixed == [USER, asks("a"), result("a"), DONE]


def test_duplicate_id_in_one_message_is_renamed_with_its_result() -> None:
    msgs = [USER, asks("a", "a"), result("a", "first"), result("a", "second"), DONE]
    fixed, defects = check_tool_pairing(msgs)
    assert [(i, "duplicate" in p) for i, p, _ in defects] == [(1, True)]
    assert [tc["id"] for tc in fixed[1]["tool_calls"]] == ["a", "a~2"]
    assert fixed[2:4] == [result("a", "first"), result("a~2", "second")]
    assert role_sequence_errors(fixed) == []


def test_an_id_reused_by_a_later_message_is_valid() -> None:
    # SWE-agent demonstrations do this; results pair with the message right before them.
    msgs = [USER, asks("a"), result("a"), asks("a"), result("a"), DONE]
    assert check_tool_pairing(msgs) == (msgs, [])


@pytest.mark.parametrize(
    "message, problem",
    [
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": "ls"}]},
            "tool_calls[0].function must be an object, got str",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]},
            "tool_calls[0].function needs a non-empty string 'name'",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}],
            },
            "tool_calls[0].function.arguments must be a string",
        ),
        ({"role": "user", "content": ["hi"]}, "content[0] must be an object, got str"),
        ({"role": "user", "content": [{"text": "hi"}]}, "content[0] needs a string 'type'"),
        (
            {"role": "user", "content": [{"type": "text", "text": 7}]},
            "content[0] is a text part without a string 'text'",
        ),
    ],
)
def test_malformed_structure_is_named(message: dict[str, Any], problem: str) -> None:
    errors = message_shape_errors(message)
    assert errors and errors[0].startswith(problem)


def test_well_formed_parts_pass() -> None:
    ok = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}
    assert message_shape_errors(ok) == [] and message_shape_errors(asks("a")) == []


# --------------------------------------------------------------------------- reading files


def test_defect_names_the_line_and_says_repair_exists(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "t.jsonl", [USER, "", asks("a"), USER, DONE, result("zz")])
    with pytest.raises(TranscriptError) as err:
        load_transcript(p)
    text = str(err.value)
    assert text.startswith(f"{p}:3: tool call 'a' has no result") and "(and 1 more defect(s))" in text
    assert "--repair" in text and "\n" not in text


def test_repair_reports_each_change_with_its_line(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "t.jsonl", [USER, "", asks("a"), USER, DONE, result("zz")])
    messages, repairs = read_transcript(p, repair=True)
    assert repairs == [
        f"repaired {p}:3: tool call 'a' has no result (an interrupted call?): added the tool result "
        f"{INTERRUPTED_RESULT!r}",
        f"repaired {p}:6: orphan tool result: a result with no open call for tool call 'zz': dropped it",
    ]
    assert role_sequence_errors(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_file_is_an_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(TranscriptError, match="no messages in the file"):
        read_transcript(p, repair=True)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_with_the_line(tmp_path: Path, literal: str) -> None:
    p = write_lines(tmp_path / "t.jsonl", [USER, f'{{"role": "assistant", "content": "x", "_ts": {literal}}}'])
    with pytest.raises(TranscriptError, match=rf"t\.jsonl:2: {literal} is not a JSON number"):
        load_transcript(p)


def test_non_finite_number_in_a_json_array_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(
        '[\n{"role": "user", "content": "NaN \\" Infinity"},\n{"role": "assistant", "content": "x", "_ts": NaN}\n]\n',
        encoding="utf-8",
    )
    with pytest.raises(TranscriptError, match=r"NaN is not a JSON number \(line 3\)"):
        load_transcript(p)


def test_the_word_nan_in_text_is_fine(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "t.jsonl", [{"role": "user", "content": "NaN Infinity -Infinity"}])
    assert load_transcript(p)[0]["content"] == "NaN Infinity -Infinity"


def test_lone_surrogate_is_refused_at_input_with_the_line(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "t.jsonl", [USER, '{"role": "assistant", "content": "bad \\ud800 text"}'])
    with pytest.raises(TranscriptError, match=r"t\.jsonl:2: a string holds a lone UTF-16 surrogate \(\\ud800\)"):
        load_transcript(p)


def test_a_surrogate_pair_is_text(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "t.jsonl", ['{"role": "user", "content": "smile \\ud83d\\ude00"}'])
    assert load_transcript(p)[0]["content"] == "smile \U0001f600"


@pytest.mark.parametrize("depth", [jsoninput.MAX_DEPTH + 1, 900, 100_000])
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    p = write_lines(tmp_path / "t.jsonl", [USER, f'{{"role": "user", "content": "x", "_extra": {deep}}}'])
    with pytest.raises(TranscriptError, match=r"t\.jsonl:2: JSON nested too deeply"):
        load_transcript(p)
    unclosed = tmp_path / "u.jsonl"
    unclosed.write_text("[" * depth, encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"nested too deeply|invalid JSON"):
        load_transcript(unclosed)


def test_nesting_up_to_the_bound_is_accepted(tmp_path: Path) -> None:
    inner = "[" * (jsoninput.MAX_DEPTH - 1) + "]" * (jsoninput.MAX_DEPTH - 1)
    p = write_lines(tmp_path / "t.jsonl", [f'{{"role": "user", "content": "x", "_extra": {inner}}}'])
    assert load_transcript(p)


def test_every_shared_transcript_is_valid_as_recorded() -> None:
    files = sorted(NORMALIZED.glob("*.jsonl"))
    if not files:
        pytest.skip("shared transcripts not present")
    listed = manifest_sessions()
    assert sorted(f.stem for f in files) == sorted(listed)
    for f in files:
        messages, repairs = read_transcript(f)
        assert len(messages) == listed[f.stem] and repairs == [], f.name
        assert check_tool_pairing(messages)[1] == [], f.name
