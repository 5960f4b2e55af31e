"""Occupancy per pass, one line per session, drawn with the optional ``matplotlib``."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

from .aggregate import Report

PLOT_INSTALL_HINT = "--plot needs matplotlib, an optional extra: pip install matplotlib"


def matplotlib_available() -> bool:
    try:
        importlib.import_module("matplotlib.figure")
    except ImportError:
        return False
    return True


def plot_report(report: Report, path: Path) -> None:
    """Occupancy % per pass, one line per session, a dashed line at 100% (the threshold), as a PNG.

    Uses ``matplotlib.figure.Figure`` directly, so no pyplot state or backend is touched. Raises
    ImportError without matplotlib and OSError when the file cannot be written.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 5), dpi=100)
    ax = fig.add_subplot()
    drawn = 0
    for s in report.per_session:
        series = s.occupancy_series
        if not any(v is not None for v in series):
            continue
        xs = list(range(1, len(series) + 1))
        ys = [math.nan if v is None else v for v in series]
        ax.plot(
            xs,
            ys,
            linewidth=1.2,
            marker="." if len(series) <= 50 else None,
            label=f"session {s.session_id}" if drawn < 12 else None,
        )
        drawn += 1
    ax.axhline(100.0, linestyle="--", color="black", linewidth=1, label="threshold (100%)")
    if not drawn:
        ax.text(
            0.5,
            0.5,
            "occupancy unknown (no context limit in the telemetry)",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )
    ax.set_xlabel("pass index within session")
    ax.set_ylabel("occupancy, % of the batch threshold")
    ax.set_title("micro-compaction: occupancy per pass")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
