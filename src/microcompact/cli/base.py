"""What every command shares: the two consoles, the one-line error exit, the shared options, the log file."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ..telemetry import default_log_path, file_logging

# Tables are wide; when stdout is not a terminal (CI logs, files) do not squeeze them into 80 columns.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML config file.")]
ContextLimitOption = Annotated[int | None, typer.Option("--context-limit", help="Model context window, tokens.")]
LogOption = Annotated[Path | None, typer.Option("--log", help="Log file (default $MICROCOMPACT_HOME/logs/agent.log).")]
DEFAULT_OPENAI_UPSTREAM = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_UPSTREAM = "https://api.anthropic.com"
DEFAULT_GEMINI_UPSTREAM = "https://generativelanguage.googleapis.com"
OpenAIUpstreamOption = Annotated[
    str, typer.Option("--openai-upstream", help="OpenAI-compatible base URL requests go to (with its /v1).")
]
AnthropicUpstreamOption = Annotated[
    str, typer.Option("--anthropic-upstream", help="Anthropic base URL requests go to (the host, no /v1).")
]
GeminiUpstreamOption = Annotated[
    str, typer.Option("--gemini-upstream", help="Gemini API base URL requests go to (Gemini CLI, google-genai).")
]
DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLite file or postgresql:// DSN (default $MICROCOMPACT_HOME/sessions.db).")
]


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input ends a command with one line on stderr naming what is wrong, and exit code ``code``."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


# C0 and C1 controls (newline, tab, NUL, escape), line and paragraph separators, bidirectional overrides: in a
# name or a path they are a paste mistake or a trick (an id that prints as another), never what was meant.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_NAME_CHARS = 256


def shown(value: str, limit: int = 60) -> str:
    """``value`` as an error quotes it: its repr (controls escaped), at most ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_name(what: str, value: str) -> None:
    """Fail unless ``value`` (a session id) is 1 to MAX_NAME_CHARS characters, without control characters and
    without spaces around it: an empty ``--session ''`` must not fall back to the derived id, and an id with a
    newline would not print as itself in ``sessions list``."""
    if not value.strip():
        fail(f"{what} must not be empty")
    if _CONTROL.search(value):
        fail(f"{what} {shown(value)} holds a control character (a newline, tab or NUL); use printable text")
    if value != value.strip():
        fail(f"{what} {shown(value)} has spaces around it; give it without them")
    if len(value) > MAX_NAME_CHARS:
        fail(f"{what} is {len(value)} characters long; at most {MAX_NAME_CHARS} are allowed")


def check_path_text(what: str, path: Path | str | None) -> None:
    """Fail when a path option holds a control character: a file name with a newline is a paste mistake."""
    if path is not None and _CONTROL.search(str(path)):
        fail(f"{what} {shown(str(path))}: a path with a control character (a newline, tab or NUL) is refused")


# Inputs whose reading never ends (/dev/zero, /dev/urandom, a terminal) or cannot start: not transcripts.
_NOT_INPUT = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_input_file(what: str, path: Path) -> None:
    """Fail when ``path`` is a device or a socket: reading /dev/zero filled memory until a traceback. A pipe
    (``<(...)``, a FIFO) is read as it comes; a missing or unreadable file is the reader's error."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    for test, kind in _NOT_INPUT:
        if test(mode):
            fail(f"{what} {path}: is {kind}, not a file; give a file (or a pipe)")


def _fifo_reader(path: Path) -> int | None:
    """A write end of ``path`` when it is a FIFO (held while the log opens, so a reader that is there does
    not see its last writer leave); fails when nothing reads it (opening it would block for ever)."""
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return None
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            fail(f"--log {path}: is a FIFO (named pipe) that nothing reads; start its reader first, or give a file")
        return None


def say(line: str) -> None:
    """A line of progress or notice on stderr, printed as it is (no markup, no highlighting)."""
    err.print(escape(line), highlight=False, soft_wrap=True)


@contextlib.contextmanager
def logging_to(log_file: Path | None) -> Iterator[None]:
    """The command's logs, telemetry included, go to ``log_file`` (default :func:`default_log_path`, where
    ``report`` looks) while the block runs; a file that cannot be opened is a one-line error before it."""
    path = log_file or default_log_path()
    held = _fifo_reader(path)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_logging(path))
        except OSError as exc:
            fail(f"cannot open log file {path}: {exc.strerror or exc}")
        finally:
            if held is not None:
                os.close(held)
        yield
