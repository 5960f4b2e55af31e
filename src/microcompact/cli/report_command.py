"""``microcompact report``: telemetry logs turned into answers (the work is :mod:`microcompact.report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .base import check_input_file, check_path_text, err, out


def report_cmd(
    logfiles: Annotated[
        list[Path] | None, typer.Argument(help="Log files (default $MICROCOMPACT_HOME/logs/agent.log).")
    ] = None,
    per_session: Annotated[bool, typer.Option("--per-session", help="Add the per-session table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw occupancy per pass for each session (PNG).")] = None,
) -> None:
    """Turn telemetry logs into answers: headroom, activity, tokens, per session."""
    from ..report import run_report
    from ..telemetry import default_log_path
    from .output import check_apart, check_writable_target

    for path in logfiles or ():
        check_path_text("LOGFILE", path)
        check_input_file("LOGFILE", path)
    check_path_text("--plot", plot)
    if plot is not None:
        plot = check_writable_target("--plot", plot)  # a file (a symlink's target), nothing else
        check_apart("--plot", plot, [(f"the log file {p}", p) for p in logfiles or [default_log_path()]])
    code = run_report(logfiles, per_session, as_json, plot, out, err)
    if code:
        raise typer.Exit(code)
