"""What proxy sessions spent against not compacting, from the proxy's cost lines
(:mod:`microcompact.bill.cost_line`: what a line holds and how a session's lines sum)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..bill.cost_line import SessionCost, cost_record
from .reading import log_lines
from .recall import SessionRecall, recall_text


def read_costs(paths: Iterable[Path]) -> list[SessionCost]:
    """The cost lines of ``paths``, summed per session (in order of first appearance); bad lines skipped."""
    sessions: dict[str, SessionCost] = {}
    for path in paths:
        for line in log_lines(path):
            record = cost_record(line)
            if record is None:
                continue
            sid = str(record.get("session_id") or "?")
            sessions.setdefault(sid, SessionCost(sid)).add(record)
    return list(sessions.values())


def costs_json(costs: list[SessionCost], recall: Iterable[SessionRecall] = ()) -> list[dict[str, Any]]:
    """Each session's cost, and beside it its recall (null without recall lines)."""
    by_id = {r.session_id: r for r in recall}
    return [{**c.as_dict(), "recall": by_id[c.session_id].as_dict() if c.session_id in by_id else None} for c in costs]


SHORT_ID_CHARS = 16  # a session id is shown this long, longer where two would read the same


def short_ids(ids: list[str], shortest: int = SHORT_ID_CHARS) -> dict[str, str]:
    """Each id cut to the shortest prefix of at least ``shortest`` characters that no other id starts with
    (the whole id when that is all there is): two sessions never print the same, and ``sessions show``
    takes the prefix back."""
    shown: dict[str, str] = {}
    for sid in ids:
        length = min(shortest, len(sid))
        while length < len(sid) and any(o != sid and o.startswith(sid[:length]) for o in ids):
            length += 1
        shown[sid] = sid[:length]
    return shown


def render_costs(costs: list[SessionCost], console: Console, recall: Iterable[SessionRecall] = ()) -> None:
    """Spent / saved per session, in dollars and tokens, and the session's recall beside them (nothing when
    no proxy cost line was read); then the audited sessions' would-have table (:func:`render_would_have`)."""
    if not costs:
        return
    by_id = {r.session_id: r for r in recall}
    table = Table(title="Cost against not compacting (proxy sessions, as the upstream reported its cache)")
    heads = ["session", "prices", "requests", "occupancy now", "peak", "folds", "prompt tok", "uncompacted tok",
             "tokens saved", "cache read", "cache written", "spent $", "uncompacted $", "saved $"]  # fmt: skip
    for head in [*heads, "recall"]:
        table.add_column(head, justify="left" if head in ("session", "prices") else "right")
    shown = short_ids([c.session_id for c in costs])
    for c in costs:
        table.add_row(
            shown[c.session_id],
            c.pricing,
            str(c.requests),
            _pct(c.occupancy_pct),
            _pct(c.occupancy_peak),
            str(c.folds),
            f"{c.prompt_tokens:,}",
            f"{c.uncompacted_tokens:,}",
            f"{c.tokens_saved:,}",
            f"{c.cache_read_tokens:,}",
            f"{c.cache_write_tokens:,}",
            c.dollars(c.spent),
            c.dollars(c.uncompacted),
            f"{c.saved:+.4f}" if c.priced else c.dollars(0.0),
            recall_text(by_id.get(c.session_id), counts=False),
        )
    console.print(table)
    render_would_have(costs, console)


def render_would_have(costs: list[SessionCost], console: Console) -> None:
    """The audited sessions (``serve --audit``: their requests went up as the client sent them): what
    rewriting would have cost them and saved against that, from the same cost lines (their ``would_have``
    dollars, as the page and the headers sum them). Nothing when no session was audited."""
    audited = [c for c in costs if c.would_have_priced]
    if not audited:
        return
    table = Table(title="Audit: what rewriting would have cost (serve --audit, requests sent as the client sent them)")
    for head in ("session", "prices", "audited requests", "sent $", "would have $", "would have saved $"):
        table.add_column(head, justify="left" if head in ("session", "prices") else "right")
    shown = short_ids([c.session_id for c in costs])
    for c in audited:
        table.add_row(
            shown[c.session_id],
            c.pricing,
            str(c.would_have_priced),
            f"{c.audited_uncompacted:.4f}",
            f"{c.would_have:.4f}",
            f"{c.would_have_saved:+.4f}",
        )
    console.print(table)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


__all__ = ["costs_json", "read_costs", "render_costs", "render_would_have", "short_ids"]
