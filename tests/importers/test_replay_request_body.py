"""``replay`` reads what ``import --from openai`` reads: JSONL, a JSON array, or an object with ``messages``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from microcompact.importers import import_transcript
from microcompact.replay import load_transcript
from support.import_checks import cli

CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "What does a.py do?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "def main():\n    print('hi')\n" * 40},
    {"role": "assistant", "content": "It prints hi."},
    {"role": "user", "content": "Thanks."},
]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Logs go under the test's own folder."""
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "mchome"))
    return tmp_path / "mchome"


def _replay(src: Path, *args: object) -> tuple[int, dict[str, Any] | None, str]:
    code, stdout, stderr = cli("replay", src, "--context-limit", 2048, "--json", *args)
    return code, (json.loads(stdout) if code == 0 else None), stderr


def _figures(summary: dict[str, Any] | None) -> dict[str, Any]:
    """The replay's figures, without what depends on the file name or the clock."""
    assert summary is not None
    return {k: v for k, v in summary.items() if k not in ("session_id", "summarizer_ms_total")}


@pytest.mark.parametrize("indent", [2, None], ids=["pretty", "one-line"])
def test_a_request_body_replays_like_the_same_messages_as_jsonl(tmp_path: Path, indent: int | None) -> None:
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"model": "gpt-x", "tools": [], "messages": MESSAGES}, indent=indent), encoding="utf-8")
    jsonl = tmp_path / "messages.jsonl"
    jsonl.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES), encoding="utf-8")

    code, from_body, stderr = _replay(body, "--out", tmp_path / "body.out.jsonl")
    assert code == 0, stderr
    code, from_jsonl, stderr = _replay(jsonl, "--out", tmp_path / "jsonl.out.jsonl")
    assert code == 0, stderr
    assert _figures(from_body) == _figures(from_jsonl) and _figures(from_body)["messages_in"] == len(MESSAGES)
    assert (tmp_path / "body.out.jsonl").read_bytes() == (tmp_path / "jsonl.out.jsonl").read_bytes()
    # What replay reads is what import --from openai writes for the same file.
    assert load_transcript(body) == import_transcript(body, "openai") == load_transcript(jsonl)


def test_defects_in_a_request_body_are_named_by_element(tmp_path: Path) -> None:
    body = tmp_path / "request.json"
    broken = [MESSAGES[1], MESSAGES[2], MESSAGES[4]]  # the call's result is missing
    body.write_text(json.dumps({"messages": broken}, indent=2), encoding="utf-8")
    code, _, stderr = _replay(body)
    assert code == 2 and len(stderr.splitlines()) == 1
    assert f"{body}: element 1: tool call 'c1' has no result" in stderr and "replay --repair" in stderr
    code, summary, stderr = _replay(body, "--repair")
    assert code == 0 and f"repaired {body}: element 1" in stderr
    assert _figures(summary)["messages_in"] == 4


@pytest.mark.parametrize(
    "content,problem",
    [
        (
            {"model": "x", "input": []},
            "a JSON object needs a 'messages' list (a chat-completions request body); it has: input, model",
        ),
        ({"messages": {"role": "user"}}, "a JSON object needs a 'messages' list"),
        ([MESSAGES[1], "hello"], "element 1: expected a JSON object, got str"),
        ({"messages": [MESSAGES[1], {"content": "no role"}]}, "element 1: message has no 'role' (keys: content)"),
        ({"messages": []}, "no messages in the file"),
    ],
)
def test_bad_shapes_get_one_line_naming_what_and_where(tmp_path: Path, content: Any, problem: str) -> None:
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(content, indent=2), encoding="utf-8")
    code, _, stderr = _replay(src)
    assert code == 2 and len(stderr.splitlines()) == 1 and "Traceback" not in stderr
    assert stderr.startswith(f"error: {src}") and problem in stderr


def test_a_recorded_session_points_to_import(tmp_path: Path) -> None:
    # A Claude Code log is JSONL of records, not of messages: replay says so and names the command that converts it.
    record = {"type": "user", "sessionId": "s", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    src = tmp_path / "session.jsonl"
    src.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    code, _, stderr = _replay(src)
    assert code == 2 and len(stderr.splitlines()) == 1
    assert f"{src}:1: message has no 'role' (keys: message, sessionId, type, uuid)" in stderr
    assert "microcompact import" in stderr
