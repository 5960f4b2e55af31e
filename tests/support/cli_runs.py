"""``microcompact ARGS`` run two ways, with one result type (``subprocess.CompletedProcess``).

``in_process`` runs the command in this process through typer's CliRunner, in a given folder and home:
no interpreter start and no imports, so a test of what a command writes or refuses costs milliseconds.
``in_subprocess`` runs it as a user types it, a real process (what only a process boundary shows: exit
codes through ``main``, file descriptors, a traceback on stderr). Tests that check a contract of the
command take the runner from the ``cli_runner`` fixture, parametrized with ``RUNNERS``: in-process in the
fast suite, the real process in the slow one, so the contract is in both.
"""

from __future__ import annotations

import os
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from support.serve_process import CLI, cli_env

# A runner: (working folder, $MICROCOMPACT_HOME, args...) -> the finished command.
CliRun = Callable[..., "subprocess.CompletedProcess[str]"]


def in_process(cwd: Path, home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command through CliRunner, from ``cwd`` with ``home``; an exception is a traceback on stderr and
    exit 1, as the real process would show it."""
    before = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, list(args), env={"MICROCOMPACT_HOME": str(home), "COLUMNS": "240"})
    finally:
        os.chdir(before)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess([*CLI, *args], result.exit_code, result.stdout, stderr)


def in_subprocess(cwd: Path, home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command as a user types it: a real process of this checkout."""
    return subprocess.run(
        [*CLI, *args],
        env=cli_env(home),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


RUNNERS = [
    pytest.param(in_process, id="in-process"),
    pytest.param(in_subprocess, id="process", marks=pytest.mark.slow),
]


def from_here(runner: CliRun) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``runner`` bound to the current folder: ``microcompact ARGS`` with a home (the tests' ``run_cli``)."""

    def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return runner(Path.cwd(), home, *args)

    return run
