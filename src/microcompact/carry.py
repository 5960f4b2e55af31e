"""The engine memory a stored session carries to the next process that continues it.

The transcript, the micro cursor and rolling summary are recovered from the store; the turn counter and
skipped exchanges are stored as they change. What is left lives only in memory and steers later passes:
the token calibration (what the provider adds to every request), batch compaction's convergence pause,
micro failure counts and the reclaim gate's floor, and the running totals the proxy reports. A session
whose requests alternate between processes (several ``serve`` processes on one store) must decide as one
process would, so this memory is written to the session's meta when the session is handed over and read
back when another process opens it.

A plain dict of JSON values; unknown or malformed entries are ignored (an older or damaged record costs at
most a recalibration, never a failure).
"""

from __future__ import annotations

import logging
from typing import Any

from .batch import BatchCompactor
from .micro import MicroCompactor
from .tokens import Ledger, TokenCounter

log = logging.getLogger("microcompact")

META_KEY = "carried"


def _fits(ledger: Ledger) -> list[Any]:
    """What the transcript looked like when the memory was taken: its length and last stored row."""
    return [len(ledger.messages), ledger.messages[-1].get("_row") if ledger.messages else None]


def snapshot(ledger: Ledger, counter: TokenCounter, micro: MicroCompactor, batch: BatchCompactor) -> dict[str, Any]:
    """The memory to carry, as JSON values: the calibration, and each engine's own :meth:`memory`."""
    return {
        "transcript": _fits(ledger),
        "calibration": {
            "observed": [[c, r] for c, r in counter.observations()],
            "scale": counter.scale,
            "overhead": counter.overhead,
        },
        "batch": batch.memory(),
        "micro": micro.memory(),
    }


def restore(carried: Any, ledger: Ledger, counter: TokenCounter, micro: MicroCompactor, batch: BatchCompactor) -> None:
    """Take back what :func:`snapshot` wrote (a session just opened from the store). The micro cursor and
    failure counts are taken only when the transcript is still the one they were taken on (a writer that
    does not carry, e.g. an older version, may have changed it since); otherwise the engine recovers them
    from the last marker as after any restart."""
    if not isinstance(carried, dict):
        return
    try:
        cal = carried.get("calibration") or {}
        counter.restore_calibration(
            [(int(c), int(r)) for c, r in cal.get("observed", [])],
            float(cal.get("scale", 1.0)),
            int(cal.get("overhead", 0)),
        )
        batch.restore(carried.get("batch") or {})
        micro.restore(carried.get("micro") or {}, ledger, same_transcript=carried.get("transcript") == _fits(ledger))
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        log.warning("Session store: ignoring the carried engine memory (%s: %s)", type(exc).__name__, exc)
