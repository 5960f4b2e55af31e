"""aider's chat history (``.aider.chat.history.md``): Markdown, appended to across sessions.

aider writes each session under a ``# aider chat started at YYYY-MM-DD HH:MM:SS`` header. What the user
typed is written line by line as ``#### text`` with a Markdown line break (two spaces) at the end of each
line; its own notices (token counts, "Applied edit", lint output, confirmations) as ``> text`` lines; the
model's reply as plain text after a blank line. A multi-line notice only has ``> `` on its first line: the
plain lines right after a ``>`` line belong to it. There are no tool calls: aider edits files from the
reply's text.

The format has one ambiguity aider's own reader shares: a reply line that itself starts with ``#### ``
or ``> `` (a Markdown heading or quote) reads as user input or a notice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..messages import Message, TranscriptError
from .common import TS_KEY, ImportFormat, ImportReport, finish, read_text, to_epoch

_HEADER = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\s*$")
_USER = re.compile(r"^####(?: |$)")
_NOTICE = re.compile(r"^>(?: |$)")
_MODELINE = re.compile(r"^-\*-.*-\*-\s*$")  # an editor mode line at the very top
_SNIFF_HEADER = re.compile(r"^# aider chat started at \d{4}-\d\d-\d\d", re.MULTILINE)

# Commands whose text goes to the model as the user's message (the rest only act on aider's state).
_MESSAGE_COMMANDS = frozenset({"/ask", "/code", "/architect", "/context"})


@dataclass
class _Block:
    """Consecutive lines of one kind: ``user`` input, the model's ``reply``, or a ``notice``."""

    kind: str
    lines: list[str] = field(default_factory=list)


@dataclass
class _History:
    """The messages read so far and the block being read."""

    report: ImportReport
    messages: list[Message] = field(default_factory=list)
    block: _Block | None = None
    session_ts: float | None = None  # the current session's start, given to its first message
    sessions: int = 0

    def close(self) -> None:
        """Turn the block being read into a message (user input, reply) or a count (notice)."""
        block, self.block = self.block, None
        if block is None:
            return
        if block.kind == "notice":
            self.report.notes["notice_lines_skipped"] += len(block.lines)
        elif block.kind == "user":
            self._add_user("\n".join(block.lines))
        else:
            text = "\n".join(block.lines).strip("\n")
            if text.strip():
                self._add({"role": "assistant", "content": text})

    def _add_user(self, text: str) -> None:
        """User input as the model got it: commands that only act on aider are counted, not sent."""
        if text == "<blank>":  # aider's mark for an empty input
            self.report.notes["blank_input_skipped"] += 1
            return
        if text.startswith("/"):
            command, _, rest = text.partition(" ")
            if command not in _MESSAGE_COMMANDS or not rest.strip():
                self.report.notes[f"command_skipped:{command}"] += 1
                return
            self.report.notes[f"command_prefix_removed:{command}"] += 1
            text = rest
        self._add({"role": "user", "content": text})

    def _add(self, m: Message) -> None:
        if self.session_ts is not None:
            m[TS_KEY] = self.session_ts
            self.session_ts = None
        self.messages.append(m)

    def reading(self, kind: str) -> bool:
        """True while a block of ``kind`` is being read."""
        return self.block is not None and self.block.kind == kind

    def extend(self, kind: str, line: str) -> None:
        """Add ``line`` to the block of ``kind``, closing a block of another kind first."""
        if self.block is None or self.block.kind != kind:
            self.close()
            self.block = _Block(kind)
        self.block.lines.append(line)


def _user_line(line: str) -> str:
    """A ``#### `` line as typed: the prefix and the Markdown line break aider added are removed."""
    text = line[5:] if len(line) > 4 else ""
    return text[:-2] if text.endswith("  ") else text


def _read_line(history: _History, lineno: int, line: str, path: Path) -> None:
    """One line of the history, by its prefix (see the module docstring for the layout)."""
    header = _HEADER.match(line)
    if header:
        history.close()
        ts = to_epoch(header.group(1))
        if ts is None:
            raise TranscriptError(f"{path}:{lineno}: session header with an unreadable time {header.group(1)!r}")
        history.session_ts, history.sessions = ts, history.sessions + 1
    elif _USER.match(line):
        history.extend("user", _user_line(line))
    elif _NOTICE.match(line):
        history.extend("notice", line)
    elif lineno == 1 and _MODELINE.match(line):
        history.report.notes["mode_line_skipped"] += 1
    elif line.strip() and history.reading("notice"):
        history.extend("notice", line)  # the plain lines of a multi-line notice
    elif line.strip() or history.reading("reply"):  # blank lines inside a reply are part of it
        history.extend("reply", line)
    else:
        history.close()


def import_aider(path: Path, **_: Any) -> ImportReport:
    """An aider chat history (``.aider.chat.history.md``), every session in it, in order.

    ``#### `` input becomes user messages verbatim (line breaks kept, aider's trailing Markdown line
    breaks removed); input that is an aider command (``/add``, ``/diff``...) is counted, not sent, except
    ``/ask``, ``/code``, ``/architect`` and ``/context``, whose text is the user's message. Plain text is
    the model's reply (an assistant message); ``>`` notices are counted as skipped. The first message of a
    session gets the session header's time as ``_ts`` (aider writes local time; it is read as UTC).
    """
    report = ImportReport("aider", str(path))
    history = _History(report)
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        _read_line(history, lineno, line, path)
    history.close()
    if history.sessions:
        report.notes["sessions_joined"] = history.sessions
    if not history.sessions and not any(m["role"] == "user" for m in history.messages):
        raise TranscriptError(
            f"{path}: no aider chat history found (no '# aider chat started at' header and no '#### ' input line)"
        )
    return finish(report, history.messages)


def looks_like_aider(head: str) -> bool:
    """aider's session header at the start of a line, or ``#### `` input as the first line."""
    return bool(_SNIFF_HEADER.search(head)) or head.lstrip("\ufeff \t\r\n").startswith("#### ")


FORMAT = ImportFormat(
    name="aider",
    description="an aider chat history (.aider.chat.history.md, every session in it)",
    importer=import_aider,
    sniff=looks_like_aider,
)
