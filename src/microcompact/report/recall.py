"""What the agent still had in front of it: the proxy's recall lines summed per session, and what folds kept
because it was in use.

**Recall** comes from ``proxy recall telemetry: {json}`` lines (:mod:`microcompact.recall.watch`): ``serve``
writes one for each reply that used identifiers first seen in a tool result, with how many it used
(``targets``) and how many the prompt it answered still held (``present``), counts only. A session's recall
is its present over its targets (pooled: a reply using ten weighs ten); ``losing`` counts the replies
whose prompt had lost at least one. Library sessions write no such line (``replay --compare`` measures
recall per policy there), and the logs tell nothing about a reply that used no tool identifier.

**Kept in use** sums ``kept_in_use_iterations`` and ``kept_in_use_tokens`` of the pass lines: the tool
iterations a fold left in place, verbatim, because the agent was still using them. Only a schedule that
folds by use (``compression.micro_compact_fold_by_use``) writes them: ``logged`` counts the passes that did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..events import MICRO_COMMITTED
from ..recall.watch import recall_record
from .reading import Number, TelemetryRecord, log_lines


def recall_pct(present: int, targets: int) -> float | None:
    return round(100.0 * present / targets, 1) if targets else None


@dataclass
class SessionRecall:
    """One session's recall lines summed."""

    session_id: str
    replies: int = 0  # replies that used an identifier a tool result showed first (one line each)
    targets: int = 0
    present: int = 0
    losing: int = 0  # replies whose prompt had lost at least one of them

    @property
    def recall_pct(self) -> float | None:
        return recall_pct(self.present, self.targets)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "replies": self.replies,
            "targets": self.targets,
            "present": self.present,
            "recall_pct": self.recall_pct,
            "losing": self.losing,
        }


def read_recall(paths: Iterable[Path]) -> list[SessionRecall]:
    """The recall lines of ``paths``, summed per session (in order of first appearance); bad lines skipped."""
    sessions: dict[str, SessionRecall] = {}
    for path in paths:
        for line in log_lines(path):
            record = recall_record(line)
            if record is None:
                continue
            s = sessions.setdefault(record.session_id, SessionRecall(record.session_id))
            s.replies += 1
            s.targets += record.targets
            s.present += record.present
            s.losing += int(record.present < record.targets)
    return list(sessions.values())


def recall_json(sessions: list[SessionRecall]) -> dict[str, Any]:
    """``--json``'s ``recall``: the totals over every session, then each session."""
    targets, present = sum(s.targets for s in sessions), sum(s.present for s in sessions)
    return {
        "replies": sum(s.replies for s in sessions),
        "targets": targets,
        "present": present,
        "recall_pct": recall_pct(present, targets),
        "losing": sum(s.losing for s in sessions),
        "per_session": [s.as_dict() for s in sessions],
    }


def recall_text(s: SessionRecall | None, counts: bool = True) -> str:
    """``97.1% (340/350)`` (``97.1%`` without ``counts``: a cell of the wide cost table), or ``—`` for a
    session with no recall line."""
    if s is None or s.recall_pct is None:
        return "—"
    return f"{s.recall_pct:.1f}% ({s.present:,}/{s.targets:,})" if counts else f"{s.recall_pct:.1f}%"


def render_recall(sessions: list[SessionRecall], console: Console) -> None:
    """The totals, in one table (nothing when no recall line was read); per session it stands in the cost
    table, beside what the session spent."""
    if not sessions:
        return
    total = recall_json(sessions)
    table = Table(title="Recall (proxy sessions)", show_header=False, title_justify="left", title_style="bold")
    table.add_column("what", style="bold")
    table.add_column("value")
    pct = total["recall_pct"]
    table.add_row(
        "recall",
        Text(
            f"{pct:.1f}% of {total['targets']:,} identifiers the agent's next replies took from tool results "
            "were in the prompt they answered"
        ),
    )
    table.add_row(
        "replies losing one",
        Text(f"{total['losing']:,} of {total['replies']:,} replies that used such an identifier"),
    )
    console.print(table)


@dataclass
class KeptInUse:
    """What folds left in place because it was in use, over the pass lines read."""

    passes: int = 0  # committed passes that kept something
    iterations: int = 0
    tokens: Number = 0
    logged: int = 0  # committed passes that say what they kept (only folds by use do)

    @classmethod
    def of(cls, micro: Iterable[TelemetryRecord]) -> KeptInUse:
        kept = cls()
        for r in micro:
            if r.outcome not in MICRO_COMMITTED:
                continue
            kept.logged += r.kept_in_use_iterations is not None or r.kept_in_use_tokens is not None
            if r.kept_in_use_iterations or r.kept_in_use_tokens:
                kept.passes += 1
                kept.iterations += int(r.kept_in_use_iterations or 0)
                kept.tokens += r.kept_in_use_tokens or 0
        return kept


__all__ = ["KeptInUse", "SessionRecall", "read_recall", "recall_json", "recall_text", "render_recall"]
