"""How well the in-use rule (``micro/working_set.py``) predicts what the agent reaches for next.

Run: ``PYTHONPATH=src .venv/bin/python bench/working_set_recall.py [--sessions cc_fa812bfe] [--sweep]``.
Prints one row per session (and per recency window with ``--sweep``); asserts nothing.

Method: replay a recorded session request by request. Before each assistant message ``k`` the history is
``messages[:k]`` and the reply the agent wrote next is ``messages[k]``. The identifiers of that reply
(:mod:`microcompact.identifiers`: its text and tool-call argument values) that the history first showed
in a tool result are what the agent *needs*. For each:

* ``in use`` - an iteration the rule marks in use holds it (kept verbatim by a fold with the working set);
* ``would fold`` - only iterations the rule does not mark hold it.

Columns: ``need`` (needed identifiers over the session), ``recall`` (share of them in use), ``recall old``
(the same, leaving out those the previous step's own output holds: that one is in the tail anyway),
``recency`` (recall old of the newest iterations cut to the same tokens as the working set at each
request: the baseline "keep the newest by size"), ``precision`` (share of in-use iterations the next 5
replies use), ``ws mean/peak`` (tokens of the in-use iterations, o200k-free estimate: chars/4), and the
rule's time per request with the per-message cache warm, as a proxy runs it (mean and max), and on the
whole session once cold.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcompact.identifiers import message_identifiers
from microcompact.micro.working_set import RECENT_REPLIES, FactsCache, iterations_of, working_set

# shared/ beside the repository (as CI lays it out), else the team's /work/shared
_BESIDE = Path(__file__).resolve().parents[2] / "shared"
NORMALIZED = (_BESIDE if _BESIDE.is_dir() else Path("/work/shared")) / "transcripts" / "normalized"
SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
LOOKAHEAD = 5


@dataclass
class Tally:
    need: int = 0
    covered: int = 0
    need_old: int = 0
    covered_old: int = 0
    recency_old: int = 0
    in_use: int = 0
    useful: int = 0
    ws_tokens: list[int] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)


def _tokens(m: dict[str, Any]) -> int:
    return len(json.dumps(m, ensure_ascii=False)) // 4


def _sources(msgs: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """For each prefix length k: identifier -> role of the message that first held it (cumulative)."""
    first: dict[str, str] = {}
    out = []
    for m in msgs:
        out.append(first)
        first = dict(first)
        for x in message_identifiers(m):
            first.setdefault(x, str(m.get("role")))
    return out


def replay(msgs: list[dict[str, Any]], recent: int) -> Tally:
    tally = Tally()
    cache = FactsCache()
    sizes = [_tokens(m) for m in msgs]
    idents = [message_identifiers(m) for m in msgs]
    firsts = _sources(msgs)
    for k, m in enumerate(msgs):
        if m.get("role") != "assistant" or k == 0:
            continue
        history = msgs[:k]
        t0 = time.perf_counter()
        ws = working_set(history, recent_replies=recent, facts=cache)
        tally.call_ms.append((time.perf_counter() - t0) * 1000)
        held = {s: set().union(*idents[s:e]) for s, e in ws.iterations.items()}
        need = {x for x in idents[k] if firsts[k].get(x) == "tool"}
        kept = set().union(*(held[s] for s in ws.in_use)) if ws.in_use else set()
        newest = max(ws.iterations, default=None)
        last = held[newest] if newest is not None and ws.iterations[newest] == k else set()
        ws_tokens = ws.tokens(sizes)
        tally.ws_tokens.append(ws_tokens)
        recency = _newest_within(ws.iterations, sizes, ws_tokens, exclude=newest if last else None)
        recency_held = set().union(*(held[s] for s in recency)) if recency else set()
        tally.need += len(need)
        tally.covered += len(need & kept)
        old = need - last
        tally.need_old += len(old)
        tally.covered_old += len(old & kept)
        tally.recency_old += len(old & recency_held)
        ahead = set().union(*idents[k : k + LOOKAHEAD])
        tally.in_use += len(ws.in_use)
        tally.useful += sum(1 for s in ws.in_use if held[s] & ahead)
    return tally


def _newest_within(iterations: dict[int, int], sizes: list[int], budget: int, exclude: int | None) -> list[int]:
    """The newest iterations (the previous step's aside) whose tokens fit ``budget``."""
    chosen, spent = [], 0
    for s in sorted(iterations, reverse=True):
        if s == exclude:
            continue
        cost = sum(sizes[s : iterations[s]])
        if spent + cost > budget:
            break
        chosen.append(s)
        spent += cost
    return chosen


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f}%" if b else "   - "


def row(name: str, recent: int, t: Tally) -> str:
    ws = t.ws_tokens or [0]
    ms = t.call_ms or [0.0]
    return (
        f"{name:<12} {recent:>3} {t.need:>5} {_pct(t.covered, t.need)} {_pct(t.covered_old, t.need_old)} "
        f"{_pct(t.recency_old, t.need_old)} {_pct(t.useful, t.in_use)} {sum(ws) // len(ws):>7} {max(ws):>7} "
        f"{sum(ms) / len(ms):7.2f} {max(ms):7.2f}"
    )


def cold_ms(msgs: list[dict[str, Any]]) -> tuple[float, float]:
    """One call on the whole session with an empty cache, then one with it warm (ms)."""
    cache = FactsCache()
    t0 = time.perf_counter()
    working_set(msgs, facts=cache)
    t1 = time.perf_counter()
    working_set(msgs, facts=cache)
    return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default=",".join(SESSIONS))
    parser.add_argument("--sweep", action="store_true", help="also recency windows 2, 4, 16, 32")
    args = parser.parse_args(argv)
    windows = [2, 4, RECENT_REPLIES, 16, 32] if args.sweep else [RECENT_REPLIES]
    print(
        f"{'session':<12} {'R':>3} {'need':>5} {'recall':>6} {'rc old':>6} {'recency':>6} {'prec':>6} "
        f"{'ws mean':>7} {'ws peak':>7} {'ms mean':>7} {'ms max':>7}"
    )
    for name in args.sessions.split(","):
        msgs = [json.loads(line) for line in (NORMALIZED / f"{name}.jsonl").read_text().splitlines() if line.strip()]
        for recent in windows:
            print(row(name, recent, replay(msgs, recent)))
        cold, warm = cold_ms(msgs)
        tokens = sum(_tokens(m) for m in msgs)
        its = len(iterations_of(msgs))
        whole = f"{len(msgs)} messages, {its} iterations, ~{tokens} tokens"
        print(f"  whole session: {whole}: {cold:.0f} ms cold, {warm:.2f} ms warm")


if __name__ == "__main__":
    main()
