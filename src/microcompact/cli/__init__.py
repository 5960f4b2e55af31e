"""The ``microcompact`` command line: replay transcripts and look at what compaction did.

The package is assembled here, in the order ``--help`` lists the commands; each command lives in its own
module (``replay_command`` with ``compare_command`` for ``--compare``, ``sessions_command``,
``report_command``, ``import_command``, ``serve_command``), the shared consoles and options in ``base``,
the files written in ``output``, the printed tables in ``tables`` and the long runs they start in ``runs``.
"""

from __future__ import annotations

import errno
import os
import sys

import typer

from ..replay import replay
from ..replay.compare import compare
from .doctor_command import doctor_cmd
from .import_command import import_cmd
from .launch_command import register as register_launchers
from .mcp_command import mcp_cmd
from .replay_command import replay_cmd
from .report_command import report_cmd
from .serve_command import serve_cmd
from .sessions_command import sessions_app
from .tables import SPARK, compare_table, sparkline

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Keep long agent transcripts inside the context window without losing what the user said.",
)


@app.callback()
def _root() -> None:
    """microcompact: rolling micro-compaction for agent transcripts."""


app.command("replay")(replay_cmd)
app.add_typer(sessions_app, name="sessions")
app.command("report")(report_cmd)
app.command("import")(import_cmd)
app.command("serve")(serve_cmd)
app.command("doctor")(doctor_cmd)
app.command("mcp")(mcp_cmd)
register_launchers(app)  # claude, codex, gemini, aider: the agent through serve


# What writing stdout fails with when it is a full disk (or /dev/full), a closed pipe, a broken device.
_STDOUT_ERRORS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT})


def main() -> None:
    """The command; stdout that cannot take the output (a full disk, ``> /dev/full``) is one line on stderr
    and exit 2, a reader that left (``| head``) a quiet exit 1, never a traceback."""
    try:
        try:
            app()
        finally:
            sys.stdout.flush()  # what is still buffered fails here, not in the interpreter's exit
    except OSError as exc:
        # Every file a command writes (--out, --plot, the log, the store) turns these into its own one-line
        # error; one that reaches here came from stdout.
        if exc.errno not in _STDOUT_ERRORS:
            raise
        _stdout_failed(exc)


def _stdout_failed(exc: OSError) -> None:
    """Exit for an unwritable stdout, with stdout pointed at /dev/null so the interpreter's own last flush
    of the lost output cannot fail again (and print "Exception ignored")."""
    quiet = exc.errno == errno.EPIPE
    if not quiet:
        print(f"error: cannot write to stdout: {exc.strerror or exc}; the output is incomplete", file=sys.stderr)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise SystemExit(1 if quiet else 2)


__all__ = ["SPARK", "app", "compare", "compare_table", "main", "replay", "sparkline"]
