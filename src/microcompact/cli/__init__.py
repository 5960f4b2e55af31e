"""The ``microcompact`` command line: replay transcripts and look at what compaction did.

The package is assembled here, in the order ``--help`` lists the commands; each command lives in its own
module (``replay_command`` with ``compare_command`` for ``--compare``, ``sessions_command``,
``report_command``, ``import_command``, ``serve_command``), the shared consoles and options in ``base``,
the files written in ``output`` and the printed tables in ``tables``.
"""

from __future__ import annotations

import typer

# The long runs, by these names: the commands look them up here per call, so a test can stand in for them.
from ..compare import compare
from ..replay import replay
from .import_command import import_cmd
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


def main() -> None:
    app()


__all__ = ["SPARK", "app", "compare", "compare_table", "main", "replay", "sparkline"]
