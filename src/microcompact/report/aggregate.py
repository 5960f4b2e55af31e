"""The report's figures, computed from typed telemetry records into typed aggregates (definitions: the
package docstring and :data:`DEFINITIONS`). :meth:`Report.as_dict` is what ``--json`` prints."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..events import BATCH_COMPACTIONS, MICRO_COMMITTED, MICRO_FAILURES, Outcome
from .reading import Files, LineCounts, Number, Telemetry, TelemetryRecord
from .recall import KeptInUse

REPORT_VERSION = 1

DEFINITIONS = {
    "pass": "one micro telemetry line; pass index = its 1-based position among the session's lines in time order",
    "committed_passes": "passes with outcome absorbed, model_rejected, defrag or defrag_failed (they changed "
    "the transcript)",
    "model_rejected": "passes whose model summary failed the checks; the deterministic summary absorbed the "
    "exchange (rejections: how many per check)",
    "net_saved": "tokens removed from transcripts: sum of -tokens_delta over committed passes in the files "
    "read (not the proxy's tokens saved, which is per request: cost[].tokens_saved)",
    "counter_saved": "sum over sessions of the last tokens_saved_total seen (the engine's running counter)",
    "failures": "outcomes summarize_failed, exchange_skipped, defrag_failed, store_failed",
    "marker_overhead": "tokens_delta of a session's first absorbed pass when positive, else 0; null when the "
    "session began before the logs (passes_total > 1 on that line)",
    "payback_pass": "first pass index after the first absorbed one at which the session's cumulative "
    "-tokens_delta is >= 0; only for sessions with a positive marker overhead",
    "batch_compactions": "batch lines with outcome compacted, user_floor_exceeded or fallback (pruned apart)",
    "occupancy": "occupancy_pct of micro lines (% of the batch threshold after the pass), nulls left out; the "
    "proxy's per-request occupancy is cost[].occupancy_pct / occupancy_peak",
    "median": "statistics.median (mean of the two middle values for an even count)",
    "p95": "nearest rank: the ceil(0.95 * n)-th smallest value",
    "summarizer_share_pct": "sum of summarizer_ms / sum of duration_ms over micro lines having both",
    "ignored_lines": "non-blank lines that are not telemetry of logger microcompact.telemetry with valid JSON",
    "kept_in_use": "sums of kept_in_use_iterations / _tokens over committed passes: tool iterations a fold left "
    "in place, verbatim, because the agent was still using them; logged: passes carrying them (folds by use)",
    "recall": "proxy_recall lines (serve, one per reply using an identifier first seen in a tool result): "
    "present / targets pooled; losing = replies whose prompt lacked one",
}


# --------------------------------------------------------------------------- small numeric helpers


def _round(value: Number | None, digits: int = 1) -> Number | None:
    return value if value is None or isinstance(value, int) else round(value, digits)


def median(values: list[Number]) -> Number | None:
    """:func:`statistics.median` rounded to 3 decimals (an int stays an int), None for no values."""
    if not values:
        return None
    m = statistics.median(values)
    if isinstance(m, float) and m.is_integer() and all(isinstance(v, int) for v in values):
        return int(m)
    return _round(m, 3)


def percentile_nearest_rank(values: list[Number], pct: float) -> Number | None:
    """Nearest-rank percentile: the ``ceil(pct / 100 * n)``-th smallest value (1-based), None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def _sorted_counts(counts: Counter[str]) -> dict[str, int]:
    """Counts by count (descending), then name: how every outcome dict of the report is ordered."""
    return {k: v for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _known(values: Iterable[Number | None]) -> list[Number]:
    return [v for v in values if v is not None]


# --------------------------------------------------------------------------- the aggregates


class PaybackStatus(StrEnum):
    PAID_BACK = "paid_back"
    NOT_PAID_BACK = "not_paid_back"
    NO_OVERHEAD = "no_overhead"
    START_MISSING = "start_missing"
    NO_ABSORB = "no_absorb"


@dataclass
class SessionSummary:
    session_id: str
    passes: int
    committed_passes: int
    absorbed: int
    model_rejected: int
    failures: int
    outcomes: dict[str, int]
    tokens_saved: Number
    counter_saved: Number | None
    occupancy_max: Number | None
    occupancy_series: list[Number | None]
    batch_compactions: int
    batch_pruned: int
    batch_attempts: int
    marker_overhead: Number | None
    payback_pass: int | None
    payback_status: PaybackStatus
    kept_in_use: KeptInUse


@dataclass
class Occupancy:
    min: Number | None
    median: Number | None
    max: Number | None
    samples: int
    unknown: int


@dataclass
class PassesPerCompaction:
    mean: Number | None = None
    median: Number | None = None
    values: list[Number] = field(default_factory=list)
    source: str | None = None  # "micro_passes_since_last" | "committed_passes/batch_compactions" | None


@dataclass
class BatchSummary:
    attempts: int
    compactions: int
    pruned: int
    outcomes: dict[str, int]
    still_over_threshold: int
    tokens_freed: Number
    micro_passes_per_compaction: PassesPerCompaction


@dataclass
class Headroom:
    occupancy_pct: Occupancy
    threshold_tokens: list[Number]
    context_limit: list[Number]
    batch: BatchSummary


@dataclass
class OutcomeShare:
    count: int
    pct: float | None


@dataclass
class Durations:
    median: Number | None
    p95: Number | None
    max: Number | None


@dataclass
class Activity:
    sessions: int
    sessions_with_micro: int
    passes: int
    committed_passes: int
    outcomes: dict[str, OutcomeShare]
    modes: dict[str, int]
    model_rejected: int
    rejections: dict[str, int]
    duration_ms: Durations
    summarizer_share_pct: float | None


@dataclass
class MarkerOverhead:
    sessions: int
    median: Number | None
    max: Number | None
    total: Number


@dataclass
class Payback:
    median_pass: Number | None
    paid_back: int
    not_paid_back: int
    no_overhead: int
    start_missing: int
    no_absorb: int


@dataclass
class Tokens:
    net_saved: Number
    counter_saved: Number | None
    exchanges_absorbed: int
    partial_absorbs: int
    mean_exchange_tokens: Number | None
    marker_overhead: MarkerOverhead
    payback: Payback
    kept_in_use: KeptInUse


@dataclass
class Report:
    """The whole report; its fields, in order, are the keys of ``--json`` (numbers None when unknown)."""

    version: int
    files: Files
    lines: LineCounts
    headroom: Headroom
    activity: Activity
    tokens: Tokens
    per_session: list[SessionSummary]  # most passes first, then by session id
    definitions: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able form ``--json`` prints (and :func:`~microcompact.report.build_report` returns)."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- per session


@dataclass
class SessionTelemetry:
    """One session's records, each kind in time order."""

    session_id: str
    micro: list[TelemetryRecord] = field(default_factory=list)
    batch: list[TelemetryRecord] = field(default_factory=list)

    def summary(self) -> SessionSummary:
        outcomes = Counter[str](r.outcome for r in self.micro)
        occ = [r.occupancy_pct for r in self.micro]
        known = _known(occ)
        counters = _known(r.tokens_saved_total for r in self.micro)
        overhead, payback, status = self._payback()
        return SessionSummary(
            session_id=self.session_id,
            passes=len(self.micro),
            committed_passes=sum(outcomes[o] for o in MICRO_COMMITTED),
            absorbed=outcomes[Outcome.ABSORBED],
            model_rejected=outcomes[Outcome.MODEL_REJECTED],
            failures=sum(outcomes[o] for o in MICRO_FAILURES),
            outcomes=_sorted_counts(outcomes),
            tokens_saved=sum(-(r.tokens_delta or 0) for r in self.micro if r.outcome in MICRO_COMMITTED),
            counter_saved=counters[-1] if counters else None,
            occupancy_max=max(known) if known else None,
            occupancy_series=occ,
            batch_compactions=sum(1 for r in self.batch if r.outcome in BATCH_COMPACTIONS),
            batch_pruned=sum(1 for r in self.batch if r.outcome == Outcome.PRUNED),
            batch_attempts=len(self.batch),
            marker_overhead=overhead,
            payback_pass=payback,
            payback_status=status,
            kept_in_use=KeptInUse.of(self.micro),
        )

    def _payback(self) -> tuple[Number | None, int | None, PaybackStatus]:
        """(marker overhead, payback pass, status) of the session's first absorbed pass."""
        first = next((i for i, r in enumerate(self.micro) if r.outcome == Outcome.ABSORBED), None)
        if first is None:
            return None, None, PaybackStatus.NO_ABSORB
        passes_total = self.micro[first].passes_total
        if passes_total is not None and passes_total > 1:
            return None, None, PaybackStatus.START_MISSING
        delta = self.micro[first].tokens_delta or 0
        if delta <= 0:
            return 0, None, PaybackStatus.NO_OVERHEAD
        cumulative = 0.0
        for i, r in enumerate(self.micro):
            if r.outcome in MICRO_COMMITTED:
                cumulative -= r.tokens_delta or 0
            if i > first and cumulative >= 0:
                return delta, i + 1, PaybackStatus.PAID_BACK
        return delta, None, PaybackStatus.NOT_PAID_BACK


def _group_by_session(records: list[TelemetryRecord]) -> dict[str, SessionTelemetry]:
    sessions: dict[str, SessionTelemetry] = {}
    for r in records:
        s = sessions.setdefault(r.session_id, SessionTelemetry(r.session_id))
        (s.micro if r.kind == "micro" else s.batch).append(r)
    return sessions


# --------------------------------------------------------------------------- the report


def report_of(telemetry: Telemetry) -> Report:
    """The report of what :func:`~microcompact.report.reading.read_telemetry` read."""
    sessions = _group_by_session(telemetry.records)
    per_session = [s.summary() for s in sessions.values()]
    per_session.sort(key=lambda s: (-s.passes, s.session_id))  # the table and JSON read the same way
    micro = [r for r in telemetry.records if r.kind == "micro"]
    batch = [r for r in telemetry.records if r.kind == "batch"]
    outcomes = Counter[str](r.outcome for r in micro)
    committed = sum(outcomes[o] for o in MICRO_COMMITTED)
    return Report(
        version=REPORT_VERSION,
        files=telemetry.files,
        lines=telemetry.lines,
        headroom=_headroom(micro, batch, committed),
        activity=_activity(len(sessions), per_session, micro, outcomes, committed),
        tokens=_tokens(per_session, micro),
        per_session=per_session,
        definitions=DEFINITIONS,
    )


def _headroom(micro: list[TelemetryRecord], batch: list[TelemetryRecord], committed: int) -> Headroom:
    """How close sessions ran to the batch threshold, and what batch compaction did when they hit it."""
    occ_all = [r.occupancy_pct for r in micro]
    occ = _known(occ_all)
    return Headroom(
        occupancy_pct=Occupancy(
            min=min(occ) if occ else None,
            median=_round(median(occ), 1) if occ else None,
            max=max(occ) if occ else None,
            samples=len(occ),
            unknown=len(occ_all) - len(occ),
        ),
        # the distinct values seen, sorted (several sessions may use different limits)
        threshold_tokens=sorted(set(_known(r.threshold_tokens for r in micro + batch))),
        context_limit=sorted(set(_known(r.context_limit for r in micro + batch))),
        batch=_batch_summary(batch, committed),
    )


def _batch_summary(batch: list[TelemetryRecord], committed: int) -> BatchSummary:
    """Batch attempts, what they did and freed, and how many micro passes ran between compactions."""
    batch_outcomes = Counter[str](r.outcome for r in batch)
    compactions = [r for r in batch if r.outcome in BATCH_COMPACTIONS]
    return BatchSummary(
        attempts=len(batch),
        compactions=len(compactions),
        pruned=batch_outcomes[Outcome.PRUNED],
        outcomes=_sorted_counts(batch_outcomes),
        still_over_threshold=sum(1 for r in batch if r.still_over_threshold),
        tokens_freed=sum(-(r.tokens_delta or 0) for r in batch if r.outcome in BATCH_COMPACTIONS | {Outcome.PRUNED}),
        micro_passes_per_compaction=_passes_per_compaction(compactions, committed),
    )


def _passes_per_compaction(compactions: list[TelemetryRecord], committed: int) -> PassesPerCompaction:
    """Micro passes per batch compaction: from the lines' own counter when logged, else an average."""
    since = _known(r.micro_passes_since_last for r in compactions)
    if since:
        return PassesPerCompaction(
            mean=_round(sum(since) / len(since), 1),
            median=median(since),
            values=since,
            source="micro_passes_since_last",
        )
    if compactions:
        return PassesPerCompaction(
            mean=_round(committed / len(compactions), 1), source="committed_passes/batch_compactions"
        )
    return PassesPerCompaction()


def _activity(
    session_count: int,
    per_session: list[SessionSummary],
    micro: list[TelemetryRecord],
    outcomes: Counter[str],
    committed: int,
) -> Activity:
    """How much micro-compaction ran, how it ended, and what a pass costs in time."""
    durations = _known(r.duration_ms for r in micro)
    both = [
        (r.duration_ms, r.summarizer_ms) for r in micro if r.duration_ms is not None and r.summarizer_ms is not None
    ]
    return Activity(
        sessions=session_count,
        sessions_with_micro=sum(1 for s in per_session if s.passes),
        passes=len(micro),
        committed_passes=committed,
        outcomes={k: OutcomeShare(v, _pct(v, len(micro))) for k, v in _sorted_counts(outcomes).items()},
        modes=_sorted_counts(Counter(r.mode for r in micro if r.mode is not None)),
        model_rejected=outcomes[Outcome.MODEL_REJECTED],
        rejections=_sorted_counts(Counter(str(r.rejected) for r in micro if r.outcome == Outcome.MODEL_REJECTED)),
        duration_ms=Durations(
            median=median(durations),
            p95=percentile_nearest_rank(durations, 95),
            max=max(durations) if durations else None,
        ),
        summarizer_share_pct=_pct(sum(s for _, s in both), sum(d for d, _ in both)) if both else None,
    )


def _tokens(per_session: list[SessionSummary], micro: list[TelemetryRecord]) -> Tokens:
    """Tokens saved (by the lines and by the engine's counters), what was absorbed, and the marker's cost."""
    absorbed = [r for r in micro if r.outcome == Outcome.ABSORBED]
    exchange = _known(r.exchange_tokens for r in absorbed)
    counters = _known(s.counter_saved for s in per_session)
    return Tokens(
        net_saved=sum(s.tokens_saved for s in per_session),
        counter_saved=sum(counters) if counters else None,
        exchanges_absorbed=len(absorbed),
        partial_absorbs=sum(1 for r in absorbed if r.partial),
        mean_exchange_tokens=_round(sum(exchange) / len(exchange), 1) if exchange else None,
        marker_overhead=_marker_overhead(per_session),
        payback=_payback(per_session),
        kept_in_use=KeptInUse.of(micro),
    )


def _marker_overhead(per_session: list[SessionSummary]) -> MarkerOverhead:
    """What the first rolling-summary marker cost, over the sessions where it grew the transcript."""
    overheads = _known(s.marker_overhead for s in per_session if s.marker_overhead)
    return MarkerOverhead(
        sessions=len(overheads),
        median=median(overheads),
        max=max(overheads) if overheads else None,
        total=sum(overheads),
    )


def _payback(per_session: list[SessionSummary]) -> Payback:
    """When sessions earned the marker's cost back, and how many are in each payback state."""
    paybacks: list[Number] = [
        s.payback_pass
        for s in per_session
        if s.payback_status is PaybackStatus.PAID_BACK and s.payback_pass is not None
    ]
    status = Counter(s.payback_status for s in per_session if s.passes)
    return Payback(
        median_pass=median(paybacks),
        paid_back=status[PaybackStatus.PAID_BACK],
        not_paid_back=status[PaybackStatus.NOT_PAID_BACK],
        no_overhead=status[PaybackStatus.NO_OVERHEAD],
        start_missing=status[PaybackStatus.START_MISSING],
        no_absorb=status[PaybackStatus.NO_ABSORB],
    )
