"""``microcompact report``: what compaction did, read back from the telemetry lines in agent logs.

Every micro pass logs ``micro compaction telemetry: {json}`` and every batch attempt logs
``batch compaction telemetry: {json}`` on logger ``microcompact.telemetry`` (see :mod:`.telemetry`).
This module reads one or more log files (plain or ``.gz``), keeps those lines and turns them into one
JSON-able dict (:func:`build_report`), which is rendered as Rich tables (:func:`render_report`), printed
as JSON, or drawn as occupancy per pass (:func:`plot_report`, needs the optional ``matplotlib``).

Definitions (also in the ``definitions`` entry of the report):

* **pass**: one micro telemetry line, whatever its outcome. The pass index of a session counts its lines
  from 1 in time order. **Committed passes** are those that changed the transcript: outcomes ``absorbed``,
  ``model_rejected``, ``defrag`` and ``defrag_failed`` (a failed defrag still commits the deterministic
  shortening).
* **model rejected**: passes whose model summary failed the checks (echo, unchanged, unknown path, cut
  off, ...; the ``rejected`` field names which), so the deterministic summary absorbed the exchange.
  They are committed but never counted as ``absorbed``.
* **net tokens saved**: the sum of ``-tokens_delta`` over committed passes (the other outcomes leave the
  transcript as it was, delta 0). This only counts what the files read contain; ``counter_saved`` is the
  sum over sessions of the last ``tokens_saved_total`` seen, the engine's own running counter, which differs
  when the logs start after a session did (rotated logs) or a session was resumed in a new process.
* **failures**: outcomes ``summarize_failed``, ``exchange_skipped``, ``defrag_failed`` and ``store_failed``.
* **marker overhead**: ``tokens_delta`` of a session's first ``absorbed`` pass when positive (the marker
  scaffolding cost more than the exchange it replaced), else 0. Unknown (null) when that pass is not the
  session's first (its ``passes_total`` is over 1: the session began before the logs).
* **payback pass**: for a session with a positive overhead, the first pass index at which the cumulative
  ``-tokens_delta`` of the session's passes is >= 0 again; null while it is still negative.
* **batch compactions**: batch lines with outcome ``compacted``, ``user_floor_exceeded`` or ``fallback``;
  ``pruned`` ones are counted apart. Micro passes per batch compaction come from ``micro_passes_since_last``
  of those lines, else are committed micro passes / batch compactions.
* **percentiles**: medians are :func:`statistics.median` (mean of the two middle values for an even count);
  p95 is nearest-rank: the ``ceil(0.95 * n)``-th smallest value.
* **ignored lines**: non-blank lines that are not telemetry: other log lines, telemetry whose JSON is
  broken or not an object (also counted as ``malformed``), telemetry whose event does not match its tag,
  and telemetry-looking lines logged by another logger than ``microcompact.telemetry``.

Lines are put in time order by their ``asctime`` prefix when every kept line has one (so rotated files can
be given in any order); otherwise they are taken in the order of the files and lines given.
"""

from __future__ import annotations

import gzip
import importlib
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .events import BATCH_COMPACTIONS, MICRO_COMMITTED, MICRO_FAILURES, Outcome
from .telemetry import TELEMETRY_LOGGER, default_log_path, parse_line

Report = dict[str, Any]

REPORT_VERSION = 1
COMMITTED = MICRO_COMMITTED
FAILURES = MICRO_FAILURES
BATCH_COMPACTED = BATCH_COMPACTIONS
NO_BATCH_LINE = "no batch compaction fired: the long pause never came"
PLOT_INSTALL_HINT = "--plot needs matplotlib, an optional extra: pip install matplotlib"

# "%(asctime)s %(levelname)s %(name)s: %(message)s" as telemetry.setup_file_logging writes it.
_PREFIX = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) (\S+) (\S+): ")


def default_log() -> Path:
    """The log ``report`` reads when given none: the one the CLI and :func:`~microcompact.log_telemetry` write."""
    return default_log_path()


# --------------------------------------------------------------------------- small numeric helpers


def _num(value: Any) -> float | int | None:
    """A finite int or float, else None (booleans, strings, NaN and missing values are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _round(value: float | int | None, digits: int = 1) -> float | int | None:
    return value if value is None or isinstance(value, int) else round(value, digits)


def median(values: list[float | int]) -> float | int | None:
    """:func:`statistics.median` rounded to 3 decimals (an int stays an int), None for no values."""
    if not values:
        return None
    m = statistics.median(values)
    if isinstance(m, float) and m.is_integer() and all(isinstance(v, int) for v in values):
        return int(m)
    return _round(m, 3)


def percentile_nearest_rank(values: list[float | int], pct: float) -> float | int | None:
    """Nearest-rank percentile: the ``ceil(pct / 100 * n)``-th smallest value (1-based), None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# --------------------------------------------------------------------------- reading


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _read_file(path: Path, file_index: int) -> tuple[list[tuple[Any, ...]], Counter[str]]:
    """(entries, line counts) of one file; entries are (timestamp|None, file_index, lineno, kind, record)."""
    entries: list[tuple[Any, ...]] = []
    counts: Counter[str] = Counter()
    with _open_text(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            counts["total"] += 1
            prefix = _PREFIX.match(line)
            parsed = parse_line(line)
            if parsed is None:
                counts["ignored"] += 1
                if "compaction telemetry: " in line:
                    counts["malformed"] += 1
                continue
            kind, record = parsed
            if prefix is not None and prefix.group(3) != TELEMETRY_LOGGER:
                counts["ignored"] += 1
                counts["other_logger"] += 1
                continue
            if record.get("event", f"{kind}_compaction") != f"{kind}_compaction":
                counts["ignored"] += 1
                counts["malformed"] += 1
                continue
            counts[kind] += 1
            entries.append((prefix.group(1) if prefix else None, file_index, lineno, kind, record))
    return entries, counts


def read_telemetry(paths: Iterable[Path]) -> tuple[list[tuple[str, dict[str, Any]]], Report]:
    """The (kind, record) telemetry of ``paths`` in time order, and a dict about the files and lines."""
    entries: list[tuple[Any, ...]] = []
    counts: Counter[str] = Counter()
    read: list[str] = []
    skipped: list[dict[str, str]] = []
    for i, path in enumerate(paths):
        path = Path(path)
        try:
            file_entries, file_counts = _read_file(path, i)
        except (OSError, EOFError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            skipped.append({"path": str(path), "error": reason})
            continue
        read.append(str(path))
        entries += file_entries
        counts += file_counts
    if entries and all(e[0] is not None for e in entries):
        entries.sort(key=lambda e: (e[0], e[1], e[2]))  # asctime is zero-padded: string order is time order
    files = {"read": read, "skipped": skipped}
    lines = {k: counts.get(k, 0) for k in ("total", "micro", "batch", "ignored", "malformed", "other_logger")}
    return [(e[3], e[4]) for e in entries], {"files": files, "lines": lines}


# --------------------------------------------------------------------------- the report


class _Session:
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.micro: list[dict[str, Any]] = []
        self.batch: list[dict[str, Any]] = []

    def summary(self) -> dict[str, Any]:
        outcomes = Counter(str(r.get("outcome")) for r in self.micro)
        occ = [_num(r.get("occupancy_pct")) for r in self.micro]
        known = [v for v in occ if v is not None]
        saved = sum(-(_num(r.get("tokens_delta")) or 0) for r in self.micro if r.get("outcome") in COMMITTED)
        counters = [_num(r.get("tokens_saved_total")) for r in self.micro]
        counters = [c for c in counters if c is not None]
        overhead, payback, status = self._payback()
        return {
            "session_id": self.session_id,
            "passes": len(self.micro),
            "committed_passes": sum(outcomes[o] for o in COMMITTED),
            "absorbed": outcomes["absorbed"],
            "model_rejected": outcomes[Outcome.MODEL_REJECTED],
            "failures": sum(outcomes[o] for o in FAILURES),
            "outcomes": _sorted_counts(outcomes),
            "tokens_saved": saved,
            "counter_saved": counters[-1] if counters else None,
            "occupancy_max": max(known) if known else None,
            "occupancy_series": occ,
            "batch_compactions": sum(1 for r in self.batch if r.get("outcome") in BATCH_COMPACTED),
            "batch_pruned": sum(1 for r in self.batch if r.get("outcome") == "pruned"),
            "batch_attempts": len(self.batch),
            "marker_overhead": overhead,
            "payback_pass": payback,
            "payback_status": status,
        }

    def _payback(self) -> tuple[int | float | None, int | None, str]:
        """(marker overhead, payback pass, status); status is one of paid_back, not_paid_back, no_overhead,
        no_absorb, start_missing."""
        first = next((i for i, r in enumerate(self.micro) if r.get("outcome") == "absorbed"), None)
        if first is None:
            return None, None, "no_absorb"
        passes_total = _num(self.micro[first].get("passes_total"))
        if passes_total is not None and passes_total > 1:
            return None, None, "start_missing"
        delta = _num(self.micro[first].get("tokens_delta")) or 0
        if delta <= 0:
            return 0, None, "no_overhead"
        cumulative = 0.0
        for i, r in enumerate(self.micro):
            if r.get("outcome") in COMMITTED:
                cumulative -= _num(r.get("tokens_delta")) or 0
            if i > first and cumulative >= 0:
                return delta, i + 1, "paid_back"
        return delta, None, "not_paid_back"


def _sorted_counts(counts: Counter[str]) -> dict[str, int]:
    return {k: v for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


DEFINITIONS = {
    "pass": "one micro telemetry line; pass index = its 1-based position among the session's lines in time order",
    "committed_passes": "passes with outcome absorbed, model_rejected, defrag or defrag_failed (they changed "
    "the transcript)",
    "model_rejected": "passes whose model summary failed the checks; the deterministic summary absorbed the "
    "exchange (rejections: how many per check)",
    "net_saved": "sum of -tokens_delta over committed passes in the files read",
    "counter_saved": "sum over sessions of the last tokens_saved_total seen (the engine's running counter)",
    "failures": "outcomes summarize_failed, exchange_skipped, defrag_failed, store_failed",
    "marker_overhead": "tokens_delta of a session's first absorbed pass when positive, else 0; null when the "
    "session began before the logs (passes_total > 1 on that line)",
    "payback_pass": "first pass index after the first absorbed one at which the session's cumulative "
    "-tokens_delta is >= 0; only for sessions with a positive marker overhead",
    "batch_compactions": "batch lines with outcome compacted, user_floor_exceeded or fallback (pruned apart)",
    "occupancy": "occupancy_pct of micro lines (% of the batch threshold after the pass), nulls left out",
    "median": "statistics.median (mean of the two middle values for an even count)",
    "p95": "nearest rank: the ceil(0.95 * n)-th smallest value",
    "summarizer_share_pct": "sum of summarizer_ms / sum of duration_ms over micro lines having both",
    "ignored_lines": "non-blank lines that are not telemetry of logger microcompact.telemetry with valid JSON",
}


def build_report(paths: list[Path]) -> Report:
    """The report of the telemetry in ``paths`` as a JSON-able dict; ``--json`` prints exactly this.

    Structure (``version`` 1; numbers are null when unknown; definitions in the module docstring)::

        version: 1
        files: {read: [path], skipped: [{path, error}]}
        lines: {total, micro, batch, ignored, malformed, other_logger}      # non-blank lines
        headroom:
          occupancy_pct: {min, median, max, samples, unknown}              # % of the batch threshold
          threshold_tokens: [int], context_limit: [int]                    # distinct values seen
          batch: {attempts, compactions, pruned, outcomes: {outcome: n}, still_over_threshold, tokens_freed,
                  micro_passes_per_compaction: {mean, median, values: [n],
                                                source: "micro_passes_since_last" |
                                                        "committed_passes/batch_compactions" | null}}
        activity: {sessions, sessions_with_micro, passes, committed_passes,
                   outcomes: {outcome: {count, pct}}, modes: {mode: n},
                   model_rejected, rejections: {check: n},
                   duration_ms: {median, p95, max}, summarizer_share_pct}
        tokens: {net_saved, counter_saved, exchanges_absorbed, partial_absorbs, mean_exchange_tokens,
                 marker_overhead: {sessions, median, max, total},          # over sessions with overhead > 0
                 payback: {median_pass, paid_back, not_paid_back, no_overhead, start_missing, no_absorb}}
        per_session: [{session_id, passes, committed_passes, absorbed, model_rejected, failures, outcomes,
                       tokens_saved,
                       counter_saved, occupancy_max, occupancy_series: [pct | null per pass],
                       batch_compactions, batch_pruned, batch_attempts, marker_overhead, payback_pass,
                       payback_status: paid_back | not_paid_back | no_overhead | start_missing | no_absorb}]
                     # most passes first, then by session id
        definitions: {name: text}

    Outcome dicts are ordered by count (descending), then name. Unreadable files are listed in
    ``files.skipped``, never raised.
    """
    telemetry, meta = read_telemetry(paths)
    sessions, micro, batch = _group_by_session(telemetry)
    per_session = _per_session(sessions)
    outcomes = Counter(str(r.get("outcome")) for r in micro)
    committed = sum(outcomes[o] for o in COMMITTED)
    return {
        "version": REPORT_VERSION,
        **meta,
        "headroom": _headroom(micro, batch, committed),
        "activity": _activity(len(sessions), per_session, micro, outcomes, committed),
        "tokens": _tokens(per_session, micro),
        "per_session": per_session,
        "definitions": DEFINITIONS,
    }


def _group_by_session(
    telemetry: list[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, _Session], list[dict[str, Any]], list[dict[str, Any]]]:
    """Records per session (for per-session figures) and all micro/batch records (for the totals)."""
    sessions: dict[str, _Session] = {}
    micro: list[dict[str, Any]] = []
    batch: list[dict[str, Any]] = []
    for kind, record in telemetry:
        sid = str(record.get("session_id") or "(none)")
        s = sessions.setdefault(sid, _Session(sid))
        (s.micro if kind == "micro" else s.batch).append(record)
        (micro if kind == "micro" else batch).append(record)
    return sessions, micro, batch


def _per_session(sessions: dict[str, _Session]) -> list[dict[str, Any]]:
    """One summary per session, busiest first (then by id) so the table and JSON read the same way."""
    per_session = [s.summary() for s in sessions.values()]
    per_session.sort(key=lambda s: (-s["passes"], s["session_id"]))
    return per_session


# --------------------------------------------------------------------------- headroom


def _headroom(micro: list[dict[str, Any]], batch: list[dict[str, Any]], committed: int) -> dict[str, Any]:
    """How close sessions ran to the batch threshold, and what batch compaction did when they hit it."""
    return {
        "occupancy_pct": _occupancy(micro),
        "threshold_tokens": _distinct(micro + batch, "threshold_tokens"),
        "context_limit": _distinct(micro + batch, "context_limit"),
        "batch": _batch_summary(batch, committed),
    }


def _occupancy(micro: list[dict[str, Any]]) -> dict[str, Any]:
    """Occupancy after each micro pass (% of the threshold); lines without it are counted as unknown."""
    occ_all = [_num(r.get("occupancy_pct")) for r in micro]
    occ = [v for v in occ_all if v is not None]
    return {
        "min": min(occ) if occ else None,
        "median": _round(median(occ), 1) if occ else None,
        "max": max(occ) if occ else None,
        "samples": len(occ),
        "unknown": len(occ_all) - len(occ),
    }


def _distinct(records: list[dict[str, Any]], key: str) -> list[float | int]:
    """The distinct numeric values of ``key`` seen, sorted (several sessions may use different limits)."""
    return sorted({v for v in (_num(r.get(key)) for r in records) if v is not None})


def _batch_summary(batch: list[dict[str, Any]], committed: int) -> dict[str, Any]:
    """Batch attempts, what they did and freed, and how many micro passes ran between compactions."""
    batch_outcomes = Counter(str(r.get("outcome")) for r in batch)
    compactions = [r for r in batch if r.get("outcome") in BATCH_COMPACTED]
    return {
        "attempts": len(batch),
        "compactions": len(compactions),
        "pruned": batch_outcomes["pruned"],
        "outcomes": _sorted_counts(batch_outcomes),
        "still_over_threshold": sum(1 for r in batch if r.get("still_over_threshold")),
        "tokens_freed": sum(
            -(_num(r.get("tokens_delta")) or 0) for r in batch if r.get("outcome") in BATCH_COMPACTED | {Outcome.PRUNED}
        ),
        "micro_passes_per_compaction": _passes_per_compaction(compactions, committed),
    }


def _passes_per_compaction(compactions: list[dict[str, Any]], committed: int) -> dict[str, Any]:
    """Micro passes per batch compaction: from the lines' own counter when logged, else an average."""
    since = [v for v in (_num(r.get("micro_passes_since_last")) for r in compactions) if v is not None]
    if since:
        return {
            "mean": _round(sum(since) / len(since), 1),
            "median": median(since),
            "values": since,
            "source": "micro_passes_since_last",
        }
    if compactions:
        return {
            "mean": _round(committed / len(compactions), 1),
            "median": None,
            "values": [],
            "source": "committed_passes/batch_compactions",
        }
    return {"mean": None, "median": None, "values": [], "source": None}


# --------------------------------------------------------------------------- activity


def _activity(
    session_count: int,
    per_session: list[dict[str, Any]],
    micro: list[dict[str, Any]],
    outcomes: Counter[str],
    committed: int,
) -> dict[str, Any]:
    """How much micro-compaction ran, how it ended, and what a pass costs in time."""
    durations = [v for v in (_num(r.get("duration_ms")) for r in micro) if v is not None]
    both = [
        (d, s)
        for d, s in ((_num(r.get("duration_ms")), _num(r.get("summarizer_ms"))) for r in micro)
        if d is not None and s is not None
    ]
    return {
        "sessions": session_count,
        "sessions_with_micro": sum(1 for s in per_session if s["passes"]),
        "passes": len(micro),
        "committed_passes": committed,
        "outcomes": {k: {"count": v, "pct": _pct(v, len(micro))} for k, v in _sorted_counts(outcomes).items()},
        "modes": _sorted_counts(Counter(str(r.get("mode")) for r in micro if r.get("mode") is not None)),
        "model_rejected": outcomes[Outcome.MODEL_REJECTED],
        "rejections": _sorted_counts(
            Counter(str(r.get("rejected")) for r in micro if r.get("outcome") == Outcome.MODEL_REJECTED)
        ),
        "duration_ms": {
            "median": median(durations),
            "p95": percentile_nearest_rank(durations, 95),
            "max": max(durations) if durations else None,
        },
        "summarizer_share_pct": _pct(sum(s for _, s in both), sum(d for d, _ in both)) if both else None,
    }


# --------------------------------------------------------------------------- tokens


def _tokens(per_session: list[dict[str, Any]], micro: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens saved (by the lines and by the engine's counters), what was absorbed, and the marker's cost."""
    absorbed = [r for r in micro if r.get("outcome") == "absorbed"]
    exchange = [v for v in (_num(r.get("exchange_tokens")) for r in absorbed) if v is not None]
    counters = [s["counter_saved"] for s in per_session if s["counter_saved"] is not None]
    return {
        "net_saved": sum(s["tokens_saved"] for s in per_session),
        "counter_saved": sum(counters) if counters else None,
        "exchanges_absorbed": len(absorbed),
        "partial_absorbs": sum(1 for r in absorbed if r.get("partial")),
        "mean_exchange_tokens": _round(sum(exchange) / len(exchange), 1) if exchange else None,
        "marker_overhead": _marker_overhead(per_session),
        "payback": _payback(per_session),
    }


def _marker_overhead(per_session: list[dict[str, Any]]) -> dict[str, Any]:
    """What the first rolling-summary marker cost, over the sessions where it grew the transcript."""
    overheads = [s["marker_overhead"] for s in per_session if s["marker_overhead"]]
    return {
        "sessions": len(overheads),
        "median": median(overheads),
        "max": max(overheads) if overheads else None,
        "total": sum(overheads),
    }


def _payback(per_session: list[dict[str, Any]]) -> dict[str, Any]:
    """When sessions earned the marker's cost back, and how many are in each payback state."""
    paybacks = [s["payback_pass"] for s in per_session if s["payback_status"] == "paid_back"]
    status = Counter(s["payback_status"] for s in per_session if s["passes"])
    return {
        "median_pass": median(paybacks),
        "paid_back": status["paid_back"],
        "not_paid_back": status["not_paid_back"],
        "no_overhead": status["no_overhead"],
        "start_missing": status["start_missing"],
        "no_absorb": status["no_absorb"],
    }


# --------------------------------------------------------------------------- rendering


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value}{suffix}"


def _section(title: str) -> Table:
    table = Table(title=title, show_header=False, title_justify="left", title_style="bold")
    table.add_column("what", style="bold")
    table.add_column("value")
    return table


def _row(table: Table, *cells: str) -> None:
    """A table row of plain text: session ids, outcomes and paths come from logs, never Rich markup."""
    table.add_row(*(Text(c) for c in cells))


def render_report(report: Report, per_session: bool, console: Console) -> None:
    """The human report: a header, Headroom, Activity and Tokens tables, and the per-session table."""
    files, lines = report["files"], report["lines"]
    console.print(
        f"microcompact report: {len(files['read'])} file(s) read "
        f"({', '.join(files['read']) or 'none'}); {lines['micro']} micro and {lines['batch']} batch "
        f"telemetry lines, {lines['ignored']} ignored lines",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(_headroom_table(report["headroom"]))
    console.print(_activity_table(report["activity"]))
    console.print(_tokens_table(report["tokens"]))
    if per_session:
        console.print(_per_session_table(report["per_session"]))


def _headroom_table(head: dict[str, Any]) -> Table:
    """Occupancy against the threshold and what batch compaction did."""
    t = _section("Headroom")
    occ = head["occupancy_pct"]
    if occ["samples"]:
        extra = f"; {occ['unknown']} unknown" if occ["unknown"] else ""
        _row(
            t,
            "occupancy % of threshold",
            f"min {_fmt(occ['min'])}  median {_fmt(occ['median'])}  "
            f"max {_fmt(occ['max'])}  ({occ['samples']} passes{extra})",
        )
    else:
        _row(t, "occupancy % of threshold", "unknown: no pass knew the context limit (set model.context_length)")
    if head["threshold_tokens"]:
        _row(t, "batch threshold", ", ".join(f"{v:,}" for v in head["threshold_tokens"]) + " tokens")
    b = head["batch"]
    if b["compactions"]:
        _row(
            t,
            "batch compactions",
            f"{b['compactions']} (+{b['pruned']} pruned), freed {_fmt(b['tokens_freed'])} tokens",
        )
        pb = b["micro_passes_per_compaction"]
        how = (
            "from micro_passes_since_last"
            if pb["source"] == "micro_passes_since_last"
            else "committed passes / compactions"
        )
        med = f"median {_fmt(pb['median'])}, " if pb["median"] is not None else ""
        _row(t, "micro passes per batch compaction", f"{med}mean {_fmt(pb['mean'])} ({how})")
    else:
        pruned = f" ({b['pruned']} pruned)" if b["pruned"] else ""
        _row(t, "batch compactions", NO_BATCH_LINE + pruned)
    if b["attempts"]:
        _row(t, "batch outcomes", ", ".join(f"{k} {v}" for k, v in b["outcomes"].items()))
    return t


def _activity_table(act: dict[str, Any]) -> Table:
    """Sessions, passes, outcomes and pass durations."""
    t = _section("Activity")
    _row(t, "sessions", f"{act['sessions']} ({act['sessions_with_micro']} with micro passes)")
    _row(t, "passes", f"{act['passes']:,} ({act['committed_passes']:,} committed)")
    _row(t, "outcomes", ", ".join(f"{k} {v['count']} ({v['pct']}%)" for k, v in act["outcomes"].items()))
    if act["model_rejected"]:
        why = ", ".join(f"{k} {v}" for k, v in act["rejections"].items())
        _row(t, "model summaries rejected", f"{act['model_rejected']:,} ({why}); the deterministic summary was used")
    d = act["duration_ms"]
    _row(t, "pass duration ms", f"median {_fmt(d['median'])}  p95 {_fmt(d['p95'])}  max {_fmt(d['max'])}")
    share = act["summarizer_share_pct"]
    _row(t, "summarizer share", f"{share}% of pass time" if share is not None else "unknown")
    return t


def _tokens_table(tok: dict[str, Any]) -> Table:
    """Tokens saved, exchanges absorbed, and the marker's overhead and payback."""
    t = _section("Tokens")
    counter = tok["counter_saved"]
    agree = (
        "the engine's counters agree"
        if counter == tok["net_saved"]
        else (f"the engine's counters say {_fmt(counter)}: some session began before these logs or was resumed")
    )
    _row(t, "net tokens saved", f"{tok['net_saved']:,} (sum of -tokens_delta over committed passes; {agree})")
    partial = f", {tok['partial_absorbs']} partial" if tok["partial_absorbs"] else ""
    _row(
        t,
        "exchanges absorbed",
        f"{tok['exchanges_absorbed']:,}{partial}, mean size {_fmt(tok['mean_exchange_tokens'])} tokens",
    )
    mo, pay = tok["marker_overhead"], tok["payback"]
    if mo["sessions"]:
        _row(
            t,
            "first-pass marker overhead",
            f"median {_fmt(mo['median'])} tokens, max {_fmt(mo['max'])} ({mo['sessions']} session(s))",
        )
        _row(
            t,
            "overhead paid back at pass",
            f"median {_fmt(pay['median_pass'])} ({pay['paid_back']} of "
            f"{mo['sessions']} paid back, {pay['not_paid_back']} not yet)",
        )
    else:
        _row(t, "first-pass marker overhead", "none (no first absorbed pass grew the transcript)")
    return t


def _per_session_table(sessions: list[dict[str, Any]]) -> Table:
    """One row per session, in the report's order (most passes first)."""
    t = Table(title="Per session (by passes)", title_justify="left", title_style="bold")
    for col in (
        "session",
        "passes",
        "absorbed",
        "failures",
        "tokens saved",
        "occupancy max",
        "batch compactions",
        "payback pass",
    ):
        t.add_column(col, justify="left" if col == "session" else "right")
    for s in sessions:
        payback = (
            _fmt(s["payback_pass"])
            if s["payback_status"] == "paid_back"
            else {
                "not_paid_back": "not yet",
                "no_overhead": "no overhead",
                "start_missing": "start not logged",
                "no_absorb": "—",
            }.get(s["payback_status"], "—")
        )
        _row(
            t,
            s["session_id"],
            f"{s['passes']:,}",
            f"{s['absorbed']:,}",
            f"{s['failures']:,}",
            f"{s['tokens_saved']:,}",
            _fmt(s["occupancy_max"], "%"),
            f"{s['batch_compactions']:,}",
            payback,
        )
    return t


def report_json(report: Report) -> str:
    return json.dumps(report, indent=2, allow_nan=False)


# --------------------------------------------------------------------------- plotting


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
    for s in report["per_session"]:
        series = s["occupancy_series"]
        if not any(v is not None for v in series):
            continue
        xs = list(range(1, len(series) + 1))
        ys = [math.nan if v is None else v for v in series]
        ax.plot(
            xs,
            ys,
            linewidth=1.2,
            marker="." if len(series) <= 50 else None,
            label=f"session {s['session_id']}" if drawn < 12 else None,
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


# --------------------------------------------------------------------------- the command


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
    report = build_report(paths)
    for skipped in report["files"]["skipped"]:
        err_console.print(
            f"[yellow]warning:[/yellow] cannot read {escape(skipped['path'])}: {escape(skipped['error'])}; skipped",
            highlight=False,
            soft_wrap=True,
        )
    if not report["activity"]["passes"]:
        read = report["files"]["read"]
        where = f"in {escape(', '.join(read))}" if read else "(no log file could be read)"
        batch = report["lines"]["batch"]
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
        return 1
    if plot is not None:
        try:
            plot_report(report, plot)
        except OSError as exc:
            reason = escape(str(exc.strerror or exc))
            err_console.print(f"[red]error:[/red] cannot write plot {escape(str(plot))}: {reason}", highlight=False)
            return 2
    if as_json:
        console.out(report_json(report), highlight=False)
    else:
        render_report(report, per_session, console)
    if plot is not None:
        err_console.print(f"occupancy plot written to {plot}", markup=False, highlight=False, soft_wrap=True)
    return 0
