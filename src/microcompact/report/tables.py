"""The human report: a header line, then the Headroom, Activity and Tokens tables and the per-session table."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .aggregate import Activity, Headroom, PaybackStatus, Report, SessionSummary, Tokens

NO_BATCH_LINE = "no batch compaction fired: the long pause never came"

_PAYBACK_TEXT = {
    PaybackStatus.NOT_PAID_BACK: "not yet",
    PaybackStatus.NO_OVERHEAD: "no overhead",
    PaybackStatus.START_MISSING: "start not logged",
    PaybackStatus.NO_ABSORB: "—",
}


def _fmt(value: object, suffix: str = "") -> str:
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
    files, lines = report.files, report.lines
    console.print(
        f"microcompact report: {len(files.read)} file(s) read "
        f"({', '.join(files.read) or 'none'}); {lines.micro} micro and {lines.batch} batch "
        f"telemetry lines, {lines.ignored} ignored lines",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(_headroom_table(report.headroom))
    console.print(_activity_table(report.activity))
    console.print(_tokens_table(report.tokens))
    if per_session:
        console.print(_per_session_table(report.per_session))


def report_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2, allow_nan=False)


def _headroom_table(head: Headroom) -> Table:
    """Occupancy against the threshold and what batch compaction did."""
    t = _section("Headroom")
    occ = head.occupancy_pct
    if occ.samples:
        extra = f"; {occ.unknown} unknown" if occ.unknown else ""
        _row(
            t,
            "occupancy after each pass, % of threshold",
            f"min {_fmt(occ.min)}  median {_fmt(occ.median)}  max {_fmt(occ.max)}  ({occ.samples} passes{extra})",
        )
    else:
        unknown = "unknown: no pass knew the context limit (set model.context_length)"
        _row(t, "occupancy after each pass, % of threshold", unknown)
    if head.threshold_tokens:
        _row(t, "batch threshold", ", ".join(f"{v:,}" for v in head.threshold_tokens) + " tokens")
    b = head.batch
    if b.compactions:
        _row(t, "batch compactions", f"{b.compactions} (+{b.pruned} pruned), freed {_fmt(b.tokens_freed)} tokens")
        pb = b.micro_passes_per_compaction
        how = (
            "from micro_passes_since_last"
            if pb.source == "micro_passes_since_last"
            else "committed passes / compactions"
        )
        med = f"median {_fmt(pb.median)}, " if pb.median is not None else ""
        _row(t, "micro passes per batch compaction", f"{med}mean {_fmt(pb.mean)} ({how})")
    else:
        pruned = f" ({b.pruned} pruned)" if b.pruned else ""
        _row(t, "batch compactions", NO_BATCH_LINE + pruned)
    if b.attempts:
        _row(t, "batch outcomes", ", ".join(f"{k} {v}" for k, v in b.outcomes.items()))
    return t


def _activity_table(act: Activity) -> Table:
    """Sessions, passes, outcomes and pass durations."""
    t = _section("Activity")
    _row(t, "sessions", f"{act.sessions} ({act.sessions_with_micro} with micro passes)")
    _row(t, "passes", f"{act.passes:,} ({act.committed_passes:,} committed)")
    _row(t, "outcomes", ", ".join(f"{k} {v.count} ({v.pct}%)" for k, v in act.outcomes.items()))
    if act.model_rejected:
        why = ", ".join(f"{k} {v}" for k, v in act.rejections.items())
        _row(t, "model summaries rejected", f"{act.model_rejected:,} ({why}); the deterministic summary was used")
    d = act.duration_ms
    _row(t, "pass duration ms", f"median {_fmt(d.median)}  p95 {_fmt(d.p95)}  max {_fmt(d.max)}")
    share = act.summarizer_share_pct
    _row(t, "summarizer share", f"{share}% of pass time" if share is not None else "unknown")
    return t


def _tokens_table(tok: Tokens) -> Table:
    """Tokens saved, exchanges absorbed, and the marker's overhead and payback."""
    t = _section("Tokens")
    counter = tok.counter_saved
    agree = (
        "the engine's counters agree"
        if counter == tok.net_saved
        else (f"the engine's counters say {_fmt(counter)}: some session began before these logs or was resumed")
    )
    _row(
        t,
        "tokens removed from transcripts",
        f"{tok.net_saved:,} (sum of -tokens_delta over committed passes; {agree}; tokens saved per request: the "
        "cost table)",
    )
    partial = f", {tok.partial_absorbs} partial" if tok.partial_absorbs else ""
    _row(
        t,
        "exchanges absorbed",
        f"{tok.exchanges_absorbed:,}{partial}, mean size {_fmt(tok.mean_exchange_tokens)} tokens",
    )
    mo, pay = tok.marker_overhead, tok.payback
    if mo.sessions:
        _row(
            t,
            "first-pass marker overhead",
            f"median {_fmt(mo.median)} tokens, max {_fmt(mo.max)} ({mo.sessions} session(s))",
        )
        _row(
            t,
            "overhead paid back at pass",
            f"median {_fmt(pay.median_pass)} ({pay.paid_back} of {mo.sessions} paid back, {pay.not_paid_back} not yet)",
        )
    else:
        _row(t, "first-pass marker overhead", "none (no first absorbed pass grew the transcript)")
    kept = tok.kept_in_use
    if kept.passes:
        _row(
            t,
            "kept in use",
            f"{kept.iterations:,} tool iteration(s), {_fmt(kept.tokens)} tokens, left in place by {kept.passes:,} "
            "fold(s) because the agent was still using them",
        )
    elif kept.logged:
        _row(t, "kept in use", f"nothing ({kept.logged:,} fold(s) by use left no tool iteration in place)")
    else:
        by_age = "not logged: the folds went by age (only folds by use, micro_compact_fold_by_use, log it)"
        _row(t, "kept in use", by_age)
    return t


def _per_session_table(sessions: list[SessionSummary]) -> Table:
    """One row per session, in the report's order (most passes first)."""
    t = Table(title="Per session (by passes)", title_justify="left", title_style="bold")
    for col in (
        "session",
        "passes",
        "absorbed",
        "failures",
        "transcript tokens removed",
        "occupancy after pass, max",
        "batch compactions",
        "payback pass",
        "kept in use tok",
    ):
        t.add_column(col, justify="left" if col == "session" else "right")
    for s in sessions:
        payback = (
            _fmt(s.payback_pass)
            if s.payback_status is PaybackStatus.PAID_BACK
            else _PAYBACK_TEXT.get(s.payback_status, "—")
        )
        _row(
            t,
            s.session_id,
            f"{s.passes:,}",
            f"{s.absorbed:,}",
            f"{s.failures:,}",
            f"{s.tokens_saved:,}",
            _fmt(s.occupancy_max, "%"),
            f"{s.batch_compactions:,}",
            payback,
            _fmt(s.kept_in_use.tokens),
        )
    return t
