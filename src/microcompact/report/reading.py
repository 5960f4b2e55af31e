"""Telemetry read back from log files (plain or ``.gz``): typed records in time order, and what the files held.

A line counts as telemetry when :func:`~microcompact.telemetry.parse_line` finds a JSON object after its
tag, the logger in its prefix (when it has one) is ``microcompact.telemetry`` and the object's ``event``
(when it has one) matches the tag. Every other non-blank line is counted as ignored, and why.
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from ..events import Outcome
from ..telemetry import TELEMETRY_LOGGER, parse_line

Number = int | float
Kind = Literal["micro", "batch"]

# "%(asctime)s %(levelname)s %(name)s: %(message)s" as telemetry.setup_file_logging writes it.
_PREFIX = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) (\S+) (\S+): ")


def num(value: Any) -> Number | None:
    """A finite int or float, else None (booleans, strings, NaN and missing values are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def outcome_of(value: Any) -> Outcome | str:
    """The :class:`Outcome` a line names; an outcome this version does not know stays the text logged (it is
    still counted, under its own name)."""
    text = str(value)
    try:
        return Outcome(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class TelemetryRecord:
    """One telemetry line, as far as the report reads it: numbers are finite or None, flags are booleans."""

    kind: Kind
    session_id: str  # "(none)" when the line names no session
    outcome: Outcome | str
    tokens_delta: Number | None = None
    occupancy_pct: Number | None = None
    tokens_saved_total: Number | None = None
    passes_total: Number | None = None
    exchange_tokens: Number | None = None
    duration_ms: Number | None = None
    summarizer_ms: Number | None = None
    threshold_tokens: Number | None = None
    context_limit: Number | None = None
    micro_passes_since_last: Number | None = None
    kept_in_use_iterations: Number | None = None  # what a fold left in place because it was in use
    kept_in_use_tokens: Number | None = None
    partial: bool = False
    still_over_threshold: bool = False
    mode: str | None = None
    rejected: str | None = None  # which check failed, on a model_rejected line

    @classmethod
    def parse(cls, kind: Kind, data: dict[str, Any]) -> TelemetryRecord:
        """The record of a line's JSON object, whatever its fields hold (a wrong type reads as unknown)."""
        numbers = {
            name: num(data.get(name))
            for name in (
                "tokens_delta",
                "occupancy_pct",
                "tokens_saved_total",
                "passes_total",
                "exchange_tokens",
                "duration_ms",
                "summarizer_ms",
                "threshold_tokens",
                "context_limit",
                "micro_passes_since_last",
                "kept_in_use_iterations",
                "kept_in_use_tokens",
            )
        }
        mode, rejected = data.get("mode"), data.get("rejected")
        return cls(
            kind=kind,
            session_id=str(data.get("session_id") or "(none)"),
            outcome=outcome_of(data.get("outcome")),
            partial=bool(data.get("partial")),
            still_over_threshold=bool(data.get("still_over_threshold")),
            mode=None if mode is None else str(mode),
            rejected=None if rejected is None else str(rejected),
            **numbers,
        )


@dataclass
class SkippedFile:
    path: str
    error: str


@dataclass
class Files:
    read: list[str] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)


@dataclass
class LineCounts:
    """Non-blank lines read: telemetry by kind, and the ignored ones (malformed and other loggers among them)."""

    total: int = 0
    micro: int = 0
    batch: int = 0
    ignored: int = 0
    malformed: int = 0
    other_logger: int = 0

    def add(self, other: LineCounts) -> None:
        self.total += other.total
        self.micro += other.micro
        self.batch += other.batch
        self.ignored += other.ignored
        self.malformed += other.malformed
        self.other_logger += other.other_logger


@dataclass
class Telemetry:
    """What a set of log files held: the records in time order, the files read or skipped, the line counts."""

    records: list[TelemetryRecord]
    files: Files
    lines: LineCounts


class _Entry(NamedTuple):
    asctime: str | None
    file_index: int
    lineno: int
    record: TelemetryRecord


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def log_lines(path: Path) -> Iterator[str]:
    """The lines of a log (plain or ``.gz``); nothing for one that cannot be read (the telemetry reader
    reports it as skipped)."""
    try:
        with _open_text(path) as fh:
            yield from fh
    except (OSError, EOFError):
        return


def _entry(line: str, file_index: int, lineno: int, counts: LineCounts) -> _Entry | None:
    """The telemetry of one non-blank line, or None with the reason it is ignored counted."""
    prefix = _PREFIX.match(line)
    parsed = parse_line(line)
    if parsed is None:
        counts.ignored += 1
        if "compaction telemetry: " in line:
            counts.malformed += 1
        return None
    tag, data = parsed
    if prefix is not None and prefix.group(3) != TELEMETRY_LOGGER:
        counts.ignored += 1
        counts.other_logger += 1
        return None
    if data.get("event", f"{tag}_compaction") != f"{tag}_compaction":
        counts.ignored += 1
        counts.malformed += 1
        return None
    kind: Kind = "micro" if tag == "micro" else "batch"
    if kind == "micro":
        counts.micro += 1
    else:
        counts.batch += 1
    return _Entry(prefix.group(1) if prefix else None, file_index, lineno, TelemetryRecord.parse(kind, data))


def _read_file(path: Path, file_index: int) -> tuple[list[_Entry], LineCounts]:
    """The telemetry entries and line counts of one file (raises OSError or EOFError when it cannot be read)."""
    entries: list[_Entry] = []
    counts = LineCounts()
    with _open_text(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            counts.total += 1
            entry = _entry(line, file_index, lineno, counts)
            if entry is not None:
                entries.append(entry)
    return entries, counts


def read_telemetry(paths: Iterable[Path]) -> Telemetry:
    """The telemetry of ``paths`` in time order (by the ``asctime`` prefix when every kept line has one, so
    rotated files can be given in any order; else in the order given). Unreadable files are listed in
    ``files.skipped``, never raised; nothing of a file that fails half-way is counted."""
    entries: list[_Entry] = []
    counts = LineCounts()
    files = Files()
    for i, given in enumerate(paths):
        path = Path(given)
        try:
            file_entries, file_counts = _read_file(path, i)
        except (OSError, EOFError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            files.skipped.append(SkippedFile(str(path), reason))
            continue
        files.read.append(str(path))
        entries += file_entries
        counts.add(file_counts)
    if entries and all(e.asctime is not None for e in entries):
        # asctime is zero-padded: string order is time order
        entries.sort(key=lambda e: (e.asctime or "", e.file_index, e.lineno))
    return Telemetry([e.record for e in entries], files, counts)
