"""The ``microcompact import`` command: detect or resolve the format, convert, write, report, exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..messages import TranscriptError
from ..outfile import NotAFile
from .common import write_jsonl
from .registry import detect_format, import_report, is_auto


def run_import(
    fmt: str, path: str | Path, out: str | Path | None, console: Any, record: int | None = None, repair: bool = False
) -> int:
    """The ``microcompact import`` command: convert, write, report; returns the exit code.

    Messages go to ``out``, or to stdout when ``out`` is None or ``-`` (then the report goes to stderr
    even if ``console`` prints to stdout). The report (counts, repairs, skipped material) goes to
    ``console`` (a rich Console, or None for plain stderr). 0 on success, 2 on bad input or options.
    A chat-completions (``openai``) file with recording defects (orphan tool results, calls with no result,
    duplicate call ids) is refused naming the first one's line, unless ``repair``: then each repair is
    reported with its line. (The other formats are conversions: their repairs are counted in the report.)
    ``fmt`` ``auto`` detects the format from the file's start and says which it picked (in the error line
    too, when the file then fails to import); a file no format recognizes is refused (exit 2) with the list
    of formats.
    """
    to_stdout = out is None or str(out) == "-"
    if to_stdout and console is not None and getattr(console, "file", None) is sys.stdout:
        console = None  # keep stdout clean for the JSONL
    detected = ""
    try:
        if is_auto(fmt):
            fmt = detect_format(path)
            detected = f"detected format {fmt} (--from NAME overrides)"
        report = import_report(path, fmt, record)
    except TranscriptError as exc:  # a misdetection is a likely cause, so the error says what was detected
        _say(console, f"{exc}; {detected}" if detected else str(exc), prefix="error")
        return 2
    if detected:
        _say(console, f"{path}: {detected}")
    if not report.messages:
        _say(console, f"{path}: no messages to import (an empty session)", prefix="error")
        return 2
    if report.defects and not repair:
        where, problem, _ = report.defects[0]
        more = f" (and {len(report.defects) - 1} more defect(s))" if len(report.defects) > 1 else ""
        _say(
            console,
            f"{where}: {problem}{more}; import --repair drops orphan tool results, adds a result for "
            "interrupted calls and renames duplicate tool-call ids, reporting each",
            prefix="error",
        )
        return 2
    for where, problem, action in report.defects:
        _say(console, f"repaired {where}: {problem}: {action}")
    if to_stdout:
        write_jsonl(report.messages, sys.stdout)
        sys.stdout.flush()
        dest = "stdout"
    else:
        try:
            write_jsonl(report.messages, out)  # type: ignore[arg-type]
        except (OSError, NotAFile) as exc:  # NotAFile: a device, FIFO or folder there (outfile.py)
            _say(
                console,
                f"cannot write {out}: {getattr(exc, 'strerror', None) or exc}; nothing was written",
                prefix="error",
            )
            return 2
        dest = str(out)
    for line in report.describe():
        _say(console, line)
    _say(console, f"wrote {len(report.messages)} messages to {dest}")
    return 0


def _say(console: Any, text: str, prefix: str | None = None) -> None:
    """One line for the user: on ``console`` (rich, markup escaped) or plain stderr."""
    if console is None:
        print(f"{prefix}: {text}" if prefix else text, file=sys.stderr)
        return
    from rich.markup import escape

    head = f"[red]{prefix}:[/red] " if prefix else ""
    console.print(head + escape(text), highlight=False, soft_wrap=True)
