"""Folding by use against folding by age, inline on a recorded session: what the next reply still finds.

Run: ``PYTHONPATH=src .venv/bin/python bench/working_set_folds.py [--sessions cc_fa812bfe]``.
Prints one row per session and rule; asserts nothing.

Method: the session's messages are appended one by one to a ledger (``estimate`` counts). Before each
assistant message, when the transcript passes ``low water + FOLD_EVERY`` tokens, drain folds run (the
policy's "drain" passes, its fold tail of the low-water mark, one newest message kept) until it is at the
low-water mark or nothing is left to absorb; the marker is a fixed placeholder (what it would say is not
counted: this measures what stays verbatim). By age: ``select_span`` as today, low water 4,000. By use:
the same with ``keep`` = the working set within ``keep_budget`` (:mod:`microcompact.bill.fold_price`, 200K
window) and the low-water mark ``working_set_low_water``. ``recall`` is the share of the identifiers each
next reply takes from tool results that are still in the transcript verbatim; ``mean``/``peak`` the
transcript's tokens at the requests. A third row folds by age with the low-water mark raised by the
difference of the means (equal budget: does the working set beat keeping more of the newest?).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from microcompact.bill.fold_price import keep_budget, working_set_low_water
from microcompact.config import Config
from microcompact.events import Absorb, apply_event
from microcompact.identifiers import message_identifiers
from microcompact.messages import render_micro_marker
from microcompact.micro.fold_tail import fold_budget
from microcompact.micro.spans import select_span
from microcompact.micro.state import RollingSummary
from microcompact.micro.working_set import FactsCache, working_set
from microcompact.tokens import Ledger, TokenCounter, make_text_counter
from microcompact.window import Window, WindowBudget

# shared/ beside the repository (as CI lays it out), else the team's /work/shared
_BESIDE = Path(__file__).resolve().parents[2] / "shared"
NORMALIZED = (_BESIDE if _BESIDE.is_dir() else Path("/work/shared")) / "transcripts" / "normalized"
SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
WINDOW = 200_000
BASE_LOW_WATER = 4_000
FOLD_EVERY = 16_000


def fold_down(ledger: Ledger, state: RollingSummary, by_use: bool, facts: FactsCache, base: int) -> None:
    low_water = base
    keep = None
    if by_use:
        ws = working_set(ledger.messages, facts=facts)
        budget = keep_budget(BASE_LOW_WATER, WINDOW)
        keep = ws.keep_within(ledger.tokens, budget)
        low_water = working_set_low_water(BASE_LOW_WATER, ws.tokens(ledger.tokens, keep), WINDOW)
    if ledger.total <= low_water + FOLD_EVERY:
        return
    config = Config().with_overrides(compression={"micro_compact": True})
    fold_tail = fold_budget(config, WindowBudget.of(config), BASE_LOW_WATER, 1)
    for _ in range(64):
        if ledger.total <= low_water:
            return
        window = Window.of(ledger.messages, ledger.tokens, fold_tail)
        state.cursor = max(state.cursor or 0, window.head)
        span, _ = select_span(ledger.messages, ledger.tokens, window, state, config, "drain", keep=keep)
        if span is None:
            return
        marker = render_micro_marker("folded")
        event = Absorb(span, state.marker_index, marker, "folded", span.absorbed_indexes(state.marker_index))
        apply_event(ledger, event)
        state.marker_index = event.marker_index_after
        state.cursor = state.marker_index + 1
        if by_use:  # the indexes moved: the working set of the folded transcript
            keep = working_set(ledger.messages, facts=facts).keep_within(ledger.tokens, budget)


def run(msgs: list[dict[str, Any]], by_use: bool, base: int = BASE_LOW_WATER) -> tuple[int, int, list[int]]:
    ledger = Ledger(TokenCounter(make_text_counter("estimate")))
    state, facts = RollingSummary(), FactsCache()
    first: dict[str, str] = {}
    need = found = 0
    sizes: list[int] = []
    for m in msgs:
        if m.get("role") == "assistant" and ledger.messages:
            fold_down(ledger, state, by_use, facts, base)
            sizes.append(ledger.total)
            wanted = {x for x in message_identifiers(m) if first.get(x) == "tool"}
            present = set().union(*(message_identifiers(k) for k in ledger.messages)) if wanted else set()
            need += len(wanted)
            found += len(wanted & present)
        for x in message_identifiers(m):
            first.setdefault(x, str(m.get("role")))
        ledger.append(m)
    return need, found, sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default=",".join(SESSIONS))
    args = parser.parse_args(argv)
    print(f"{'session':<12} {'rule':<7} {'need':>5} {'recall':>7} {'mean':>7} {'peak':>7}")
    for name in args.sessions.split(","):
        msgs = [json.loads(line) for line in (NORMALIZED / f"{name}.jsonl").read_text().splitlines() if line.strip()]
        rows = [("by age", run(msgs, False)), ("by use", run(msgs, True))]
        # By age again, its low-water mark raised by what the working set added on average: equal budget.
        extra = _mean(rows[1][1][2]) - _mean(rows[0][1][2])
        rows.append((f"age+{extra // 1000}K", run(msgs, False, BASE_LOW_WATER + max(0, extra))))
        for rule, (need, found, sizes) in rows:
            recall = f"{100 * found / need:6.1f}%" if need else "     -"
            print(f"{name:<12} {rule:<7} {need:>5} {recall} {_mean(sizes):>7} {max(sizes):>7}")


def _mean(sizes: list[int]) -> int:
    return sum(sizes) // max(1, len(sizes))


if __name__ == "__main__":
    main()
