"""aider chat histories: aider's own test history imported through the command line, and replayed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from microcompact.contract import role_sequence_errors
from microcompact.importers import import_report, to_epoch
from microcompact.messages import TranscriptError
from support.import_checks import DATA, assert_replays_keeping_the_contract, cli, import_with_cli, sniffers_of

SAMPLE = DATA / "aider" / "aider.chat.history.md"


def _lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()


def test_sample_imports_with_auto_detection(tmp_path: Path) -> None:
    assert sniffers_of(SAMPLE) == ["aider"]
    messages, report = import_with_cli(SAMPLE, tmp_path / "aider.jsonl")
    assert report[0] == f"{SAMPLE}: detected format aider (--from NAME overrides)"
    assert role_sequence_errors(messages) == []
    users = [m["content"] for m in messages if m["role"] == "user"]
    # The first input is aider's lint request, typed as many '#### ' lines: joined back as it was sent.
    lines = _lines()
    first_header = next(i for i, line in enumerate(lines) if line.startswith("# aider chat started at"))
    typed = [line.removeprefix("####").removeprefix(" ") for line in lines[:first_header] if line.startswith("####")]
    assert users[0] == "\n".join(t.removesuffix("  ") for t in typed)
    assert users[1:] == ["Use the Spinner instead of the inlined custom spinner", "hi", "hi"]


def test_replies_are_kept_whole_and_notices_counted() -> None:
    report = import_report(SAMPLE, "aider")
    lines = _lines()
    asked = lines.index("#### Use the Spinner instead of the inlined custom spinner  ")
    tokens = next(i for i in range(asked, len(lines)) if lines[i].startswith("> Tokens:"))
    reply = next(m for m in report.messages if m["role"] == "assistant")
    assert reply["content"] == "\n".join(lines[asked + 1 : tokens]).strip("\n")  # the SEARCH/REPLACE block too
    assert "<<<<<<< SEARCH" in reply["content"] and ">>>>>>> REPLACE" in reply["content"]
    notices = sum(1 for line in lines if line == ">" or line.startswith("> "))  # not ">>>>>>> REPLACE"
    assert report.notes["notice_lines_skipped"] == notices
    assert report.notes["sessions_joined"] == sum(1 for line in lines if line.startswith("# aider chat started at"))
    assert report.notes["command_skipped:/diff"] == report.notes["command_skipped:/ex"] == 1
    assert report.notes["mode_line_skipped"] == 1
    # A session's first message carries the session's start.
    spinner = next(m for m in report.messages if m["content"].startswith("Use the Spinner"))
    assert spinner["_ts"] == to_epoch("2024-08-05 19:33:32")
    assert report.repairs == Counter()


def test_sample_replays_keeping_the_contract(tmp_path: Path) -> None:
    imported = tmp_path / "aider.jsonl"
    import_with_cli(SAMPLE, imported)
    # Mostly user input (never absorbed) and two replies, each the last message of its turn: nothing to
    # compact at any window, so this checks the replay runs and keeps every message as it was.
    assert_replays_keeping_the_contract(imported, tmp_path, context_limit=1024, passes=False)


def test_commands_notices_and_blank_lines(tmp_path: Path) -> None:
    src = tmp_path / ".aider.chat.history.md"
    src.write_text(
        "\n# aider chat started at 2025-03-01 10:00:00\n\n"
        "> Aider v0.80.0  \n"
        "> Here are summaries of some files present in my git repository.\n"
        "Do not propose changes to these files, treat them as *read-only*.\n\n"
        "#### /add app.py  \n\n"
        "#### <blank>  \n\n"
        "#### /ask why does  \n"
        "#### it crash?  \n\n"
        "It divides by zero.\n\nSee line 3:\n\n```python\nx = 1 / 0\n```\n\n"
        "> Tokens: 1 sent, 2 received.  \n",
        encoding="utf-8",
    )
    assert sniffers_of(src) == ["aider"]
    report = import_report(src, "auto")
    assert report.messages == [
        {"role": "user", "content": "why does\nit crash?", "_ts": to_epoch("2025-03-01T10:00:00")},
        {"role": "assistant", "content": "It divides by zero.\n\nSee line 3:\n\n```python\nx = 1 / 0\n```"},
    ]
    assert report.notes == Counter(
        {
            "notice_lines_skipped": 4,  # the two-line notice, its unprefixed line, the token count
            "command_skipped:/add": 1,
            "command_prefix_removed:/ask": 1,
            "blank_input_skipped": 1,
            "sessions_joined": 1,
        }
    )


def test_markdown_that_is_not_a_history_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "notes.md"
    src.write_text("# Notes\n\nNothing from aider here.\n", encoding="utf-8")
    assert sniffers_of(src) == []
    with pytest.raises(TranscriptError, match=r"notes\.md: no aider chat history found"):
        import_report(src, "aider")
    code, _, stderr = cli("import", "--from", "aider", src, "--out", tmp_path / "out.jsonl")
    assert code == 2 and len(stderr.splitlines()) == 1


def test_a_history_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    src = tmp_path / "latin1.md"
    src.write_bytes("# aider chat started at 2025-03-01 10:00:00\n\n#### caf\xe9\n".encode("latin-1"))
    with pytest.raises(TranscriptError, match=r"latin1\.md: not UTF-8 text"):
        import_report(src, "aider")
