"""One content-free JSON line per pass, on logger ``microcompact.telemetry``, and the CLI's log set-up.

Lines look like ``micro compaction telemetry: {"event": "micro_compaction", ...}`` with sorted keys, so
``grep 'compaction telemetry'`` plus a JSON parser is all a report needs. Only counts, sizes, timings and
identifiers go in; never transcript text.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

TELEMETRY_LOGGER = "microcompact.telemetry"
telemetry_log = logging.getLogger(TELEMETRY_LOGGER)

# Fields a micro-compaction line always has; values are numbers, short identifiers or null.
MICRO_FIELDS = (
    "event", "session_id", "outcome", "messages_before", "messages_after", "tokens_before", "tokens_after",
    "tokens_delta", "exchange_tokens", "rolling_summary_tokens", "cursor", "passes_total",
    "tokens_saved_total", "duration_ms", "threshold_tokens", "context_limit", "occupancy_pct", "aux_model",
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
                record = json.loads(line[pos + len(tag):])
            except ValueError:
                return None
            return (kind, record) if isinstance(record, dict) else None
    return None


def setup_file_logging(path: str | Path, level: int = logging.INFO) -> logging.Handler:
    """Send the ``microcompact`` loggers to ``path`` (created with its folder); returns the handler."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(p, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    root = logging.getLogger("microcompact")
    root.addHandler(handler)
    root.setLevel(min(level, root.level or level) if root.level else level)
    return handler
