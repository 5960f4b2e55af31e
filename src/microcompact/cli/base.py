"""What every command shares: the two consoles, the one-line error exit, the shared options, the log file."""

from __future__ import annotations

import contextlib
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
DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLite file or postgresql:// DSN (default $MICROCOMPACT_HOME/sessions.db).")
]


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input ends a command with one line on stderr naming what is wrong, and exit code ``code``."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def say(line: str) -> None:
    """A line of progress or notice on stderr, printed as it is (no markup, no highlighting)."""
    err.print(escape(line), highlight=False, soft_wrap=True)


@contextlib.contextmanager
def logging_to(log_file: Path | None) -> Iterator[None]:
    """The command's logs, telemetry included, go to ``log_file`` (default :func:`default_log_path`, where
    ``report`` looks) while the block runs; a file that cannot be opened is a one-line error before it."""
    path = log_file or default_log_path()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_logging(path))
        except OSError as exc:
            fail(f"cannot open log file {path}: {exc.strerror or exc}")
        yield
