"""``microcompact report`` as a function: read, aggregate, then JSON, tables or a plot; returns the exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..outfile import NotAFile, replacing
from ..telemetry import default_log_path
from .aggregate import Report, report_of
from .cost import costs_json, read_costs, render_costs
from .plot import PLOT_INSTALL_HINT, matplotlib_available, plot_report
from .reading import read_telemetry
from .recall import read_recall, recall_json, render_recall
from .tables import render_report, report_json


def default_log() -> Path:
    """The log ``report`` reads when given none: the one the CLI and :func:`~microcompact.log_telemetry` write."""
    return default_log_path()


def run_report(
    logfiles: list[Path] | None,
    per_session: bool,
    as_json: bool,
    plot: Path | None,
    console: Console,
    err_console: Console,
) -> int:
    """``microcompact report``: 0 on success, 1 without micro telemetry, 2 when --plot cannot be done."""
    if plot is not None and not matplotlib_available():
        err_console.print(
            f"[red]error:[/red] {PLOT_INSTALL_HINT} (or pip install 'microcompact[plot]')", highlight=False
        )
        return 2
    paths = list(logfiles) if logfiles else [default_log()]
    report = report_of(read_telemetry(paths))
    for skipped in report.files.skipped:
        err_console.print(
            f"[yellow]warning:[/yellow] cannot read {escape(skipped.path)}: {escape(skipped.error)}; skipped",
            highlight=False,
            soft_wrap=True,
        )
    if not report.activity.passes:
        _no_micro_telemetry(report, err_console)
        return 1
    if plot is not None:
        try:
            with replacing(plot) as drawn:  # a file (a symlink's target), whole or not at all (outfile.py)
                plot_report(report, drawn)
        except (OSError, NotAFile) as exc:
            reason = escape(str(getattr(exc, "strerror", None) or exc))
            err_console.print(f"[red]error:[/red] cannot write plot {escape(str(plot))}: {reason}", highlight=False)
            return 2
    costs, recall = read_costs(paths), read_recall(paths)
    if as_json:
        text = report_json(report)
        extra: dict[str, Any] = {"cost": costs_json(costs, recall)} if costs else {}  # proxy sessions' bills
        if recall:  # and whether what their agents used next was still in front of them
            extra["recall"] = recall_json(recall)
        if extra:
            text = json.dumps({**json.loads(text), **extra}, indent=2)
        console.out(text, highlight=False)
    else:
        render_report(report, per_session, console)
        render_recall(recall, console)
        render_costs(costs, console, recall)
    if plot is not None:
        err_console.print(f"occupancy plot written to {plot}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _no_micro_telemetry(report: Report, err_console: Console) -> None:
    """Why there is nothing to report, and how a program or the config gets telemetry written."""
    read = report.files.read
    where = f"in {escape(', '.join(read))}" if read else "(no log file could be read)"
    batch = report.lines.batch
    also = f" ({batch} batch compaction line(s) were found)" if batch else ""
    err_console.print(
        f"[red]error:[/red] no micro-compaction telemetry found {where}{also}. "
        "Micro-compaction may be off: set `compression.micro_compact: true` in the config. "
        "A program using the library logs telemetry to a file only when asked: "
        "`microcompact.log_telemetry()` writes it where report looks by default "
        f"({escape(str(default_log_path()))}); `log_telemetry(PATH)` writes it to PATH.",
        highlight=False,
        soft_wrap=True,
    )
