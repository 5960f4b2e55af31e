"""One content-free JSON line per pass, on logger ``microcompact.telemetry``, and where logs are written.

Lines look like ``micro compaction telemetry: {"event": "micro_compaction", ...}`` with sorted keys, so
``grep 'compaction telemetry'`` plus a JSON parser is all a report needs. Only counts, sizes, timings and
identifiers go in; never transcript text.

The library only logs; an application decides where logs go. :func:`log_telemetry` sends them to
:func:`default_log_path`, the file the ``replay`` command writes and ``report`` reads when given no file,
so a program using :class:`~microcompact.Session` and the command line meet in one place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from .config import home_dir

TELEMETRY_LOGGER = "microcompact.telemetry"
telemetry_log = logging.getLogger(TELEMETRY_LOGGER)
_Handler = TypeVar("_Handler", bound=logging.Handler)

# Fields a micro-compaction line always has; values are numbers, short identifiers or null.
MICRO_FIELDS = (
    "event",
    "session_id",
    "outcome",
    "messages_before",
    "messages_after",
    "tokens_before",
    "tokens_after",
    "tokens_delta",
    "exchange_tokens",
    "rolling_summary_tokens",
    "cursor",
    "passes_total",
    "tokens_saved_total",
    "duration_ms",
    "threshold_tokens",
    "context_limit",
    "occupancy_pct",
    "aux_model",
)


def occupancy_pct(tokens: int, threshold_tokens: int | None) -> float | None:
    if not threshold_tokens:
        return None
    return round(100.0 * tokens / threshold_tokens, 1)


def format_line(kind: str, record: dict[str, Any]) -> str:
    """``"<kind> compaction telemetry: {json}"`` with sorted keys (kind is ``micro`` or ``batch``)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
    return f"{kind} compaction telemetry: " + json.dumps(clean, sort_keys=True, separators=(", ", ": "))


def emit(kind: str, record: dict[str, Any]) -> None:
    telemetry_log.info("%s", format_line(kind, record))


def parse_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """The (kind, record) of a telemetry line anywhere in a log line, or None."""
    for kind in ("micro", "batch"):
        tag = f"{kind} compaction telemetry: "
        pos = line.find(tag)
        if pos >= 0:
            try:
                record = json.loads(line[pos + len(tag) :])
            except ValueError:
                return None
            return (kind, record) if isinstance(record, dict) else None
    return None


def default_log_path() -> Path:
    """``$MICROCOMPACT_HOME/logs/agent.log``: where the CLI logs and ``report`` looks by default."""
    return home_dir() / "logs" / "agent.log"


def setup_file_logging(path: str | Path, level: int = logging.INFO) -> logging.Handler:
    """Send the ``microcompact`` loggers to ``path``; returns the handler.

    A new log (and its folder) is created readable by its owner only: it names sessions, files and errors.
    """
    p = Path(path)
    _create_private(p)
    handler = logging.FileHandler(p, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    root = logging.getLogger("microcompact")
    root.addHandler(degrade_quietly(handler))
    root.setLevel(min(level, root.level or level) if root.level else level)
    return handler


@contextlib.contextmanager
def file_logging(path: str | Path, level: int = logging.INFO) -> Iterator[logging.Handler]:
    """The ``microcompact`` loggers write to ``path`` while the block runs; the handler is taken off and closed
    after it, however it ends (a command logs only while it runs, and a second command in the same process
    must not write into the first one's file). An OSError opening the file is raised on entry."""
    handler = setup_file_logging(path, level)
    try:
        yield handler
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()


def log_telemetry(path: str | Path | None = None) -> logging.Handler:
    """Write the library's logs, telemetry included, to ``path`` (default :func:`default_log_path`, where
    ``microcompact report`` looks). Calling it again for the same file returns the handler already there,
    so no line is written twice."""
    p = Path(path) if path is not None else default_log_path()
    target = os.path.abspath(p)
    for handler in logging.getLogger("microcompact").handlers:
        if isinstance(handler, logging.FileHandler) and handler.baseFilename == target:
            return handler
    return setup_file_logging(p)


def _create_private(path: Path) -> None:
    """Create ``path`` (and its folder) with owner-only permissions, unless it exists."""
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.touch(mode=0o600)


def degrade_quietly(handler: _Handler) -> _Handler:
    """A log file that stops taking writes (disk full, I/O error) costs one warning on stderr, never the
    session: the first failure is reported, later records are dropped, and flush/close never raise.
    (``logging`` would otherwise print a "Logging error" dump per record and ``close`` would raise.)"""
    failed: list[BaseException] = []
    name = getattr(handler, "baseFilename", "the log")

    def handle_error(record: logging.LogRecord) -> None:
        if failed:
            return
        exc = sys.exc_info()[1]
        failed.append(exc or OSError("write failed"))
        reason = getattr(exc, "strerror", None) or exc
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(
                f"warning: cannot write the log file {name} ({reason}); logging to it stops, the session goes on\n"
            )

    plain_flush, plain_close = handler.flush, handler.close

    def flush() -> None:
        try:
            plain_flush()
        except (OSError, ValueError):
            handle_error(None)  # type: ignore[arg-type]

    def close() -> None:
        try:
            plain_close()
        except (OSError, ValueError):
            handle_error(None)  # type: ignore[arg-type]

    handler.handleError = handle_error  # type: ignore[method-assign]
    handler.flush = flush  # type: ignore[method-assign]
    handler.close = close  # type: ignore[method-assign]
    handler.addFilter(lambda record: not failed)
    return handler
