"""Future-reference recall (``microcompact.recall``): at each request of a recorded session, the share of the
identifiers the agent used next, first seen in a tool result, that the prompt still held.

    PYTHONPATH=src:tests python bench/recall.py                    # every row, the three Claude Code sessions
    PYTHONPATH=src:tests python bench/recall.py --sessions cc_fa812bfe --rows none,inline,truncation
    PYTHONPATH=src:tests python bench/recall.py --quick            # a short cut: 80 messages, no serve
    PYTHONPATH=src:tests python bench/recall.py --config my.yaml   # serve and inline rows over that config

Rows: ``none`` (no compaction), ``recorded`` (Claude Code's own compaction: after the summary at the
meta's ``compact_summary_indices``, the prompt is the summary and what follows), ``inline`` (a ``Session``
with serve's config, inline passes, Anthropic prices, 200K window), ``serve-chat``, ``serve-anthropic``,
``serve-responses`` (a real ``microcompact serve`` at its defaults in front of a scripted upstream that
answers with the recorded replies), and the baselines ``truncation`` (head + newest messages) and
``masking`` (older tool results replaced by a placeholder), each at the token count of every compacting
row's prompt at each request (``truncation @ inline``, ...). ``decay``: a synthetic session planting 20
facts the agent mentions once, run through the library until 20 more folds and a defrag have happened (or
150 steps): at serve's config, and with a tail small enough for defrag to run at all (at serve's config the
prompt stays inside the protected tail, where the marker is never defragmented).

Columns: recall pooled over targets, requests whose prompt lost something, targets, mean and peak prompt
(o200k tokens, the package's counter), stale claims (``microcompact.recall.stale``: distinct summary lines stating
a file's state from before a change that was folded away).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench")]

from microcompact.recall import RecallTotals  # noqa: E402
from recall_decay import DEFRAG_REACHABLE, DecayResult, decay  # noqa: E402
from recall_policies import (  # noqa: E402
    WINDOW,
    Measure,
    RowResult,
    at_budget,
    inline_config,
    library_inline,
    masked,
    recorded_compaction,
    truncated,
    uncompacted,
)
from support.paths import NORMALIZED as CORPUS  # noqa: E402

SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
COMPACTING = ("inline", "serve-chat", "serve-anthropic", "serve-responses")
ROWS = ("none", "recorded", *COMPACTING, "truncation", "masking", "decay")
QUICK_MESSAGES = 80


@dataclass
class SessionResult:
    name: str
    rows: list[RowResult]


def load(name: str, limit: int | None) -> tuple[list[dict[str, Any]], list[int]]:
    path = CORPUS / f"{name}.jsonl"
    if not path.is_file():
        raise SystemExit(f"recall.py: no session {name!r} in {CORPUS}")
    messages = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    meta_path = CORPUS / f"{name}.meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    summaries = [int(i) for i in meta.get("compact_summary_indices") or []]
    if limit is not None:
        messages = messages[:limit]
        summaries = [i for i in summaries if i < limit]
    return messages, summaries


def measure_session(
    name: str, rows: list[str], limit: int | None, serve: Any, config: Path | None = None
) -> SessionResult:
    messages, summaries = load(name, limit)
    measure = Measure(messages)
    out: list[RowResult] = []
    if "none" in rows:
        out.append(measure.row("no compaction", uncompacted(messages)))
    if "recorded" in rows and summaries:
        texts = {
            i: str(messages[max(s for s in summaries if s < i)].get("content"))
            for i in measure.targets
            if i > min(summaries)
        }
        out.append(measure.row("Claude Code's own (recorded)", recorded_compaction(messages, summaries), texts))
    compacting: list[RowResult] = []
    if "inline" in rows:
        compacting.append(measure.row("inline, serve's config", library_inline(messages, inline_config(config))))
    for route in ("chat", "anthropic", "responses"):
        if f"serve-{route}" in rows:
            compacting.append(measure.row(f"serve, {route} route", serve.prompts(name, route, messages)))
    out += compacting
    for reference in compacting:
        if "truncation" in rows:
            out.append(measure.row(f"truncation @ {reference.name}", at_budget(measure, reference.tokens, truncated)))
        if "masking" in rows:
            out.append(measure.row(f"masking @ {reference.name}", at_budget(measure, reference.tokens, masked)))
    return SessionResult(name, out)


def _cells(name: str, totals: RecallTotals, tokens: list[int], stale: int) -> list[str]:
    recall = f"{100 * totals.recall:.1f}%" if totals.recall is not None else "-"
    mean = f"{sum(tokens) / len(tokens) / 1000:.1f}K" if tokens else "-"
    peak = f"{max(tokens) / 1000:.1f}K" if tokens else "-"
    return [name, recall, f"{totals.losing}/{totals.requests}", str(totals.targets), mean, peak, str(stale)]


HEAD = ["row", "recall", "requests losing", "targets", "mean prompt", "peak prompt", "stale claims"]


def _table(title: str, lines: list[list[str]]) -> str:
    widths = [max(len(r[k]) for r in [HEAD, *lines]) for k in range(len(HEAD))]
    fmt = [
        " | ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [HEAD, *lines]
    ]
    return "\n".join([title, fmt[0], "-|-".join("-" * w for w in widths), *fmt[1:]])


def session_table(result: SessionResult) -> str:
    lines = [_cells(r.name, r.totals, list(r.tokens.values()), len(r.stale)) for r in result.rows]
    return _table(f"## {result.name}", lines)


def total_table(results: list[SessionResult]) -> str:
    names = list(dict.fromkeys(r.name for s in results for r in s.rows))
    lines = []
    for name in names:
        rows = [r for s in results for r in s.rows if r.name == name]
        totals = sum((r.totals for r in rows), RecallTotals())
        tokens = [t for r in rows for t in r.tokens.values()]
        lines.append(_cells(name, totals, tokens, sum(len(r.stale) for r in rows)))
    return _table(f"## total ({len(results)} sessions)", lines)


def decay_line(title: str, result: DecayResult) -> str:
    return (
        f"## decay, {title}: {result.kept}/{result.planted} planted facts still in the prompt "
        f"({100 * result.kept / result.planted:.0f}%) after {result.folds} folds and {result.defrags} defrags "
        f"({result.steps} steps, final prompt {result.final_tokens / 1000:.1f}K){result.note}"
    )


def run(
    sessions: list[str], rows: list[str], quick: bool, config: Path | None = None, pace: float = 0.0
) -> tuple[list[SessionResult], dict[str, DecayResult]]:
    limit = QUICK_MESSAGES if quick else None
    results: list[SessionResult] = []
    serving = [r for r in rows if r.startswith("serve-")]
    if serving:
        from recall_serve import ServeRun

        with ServeRun(WINDOW, config, pace) as serve:
            results = [measure_session(name, rows, limit, serve, config) for name in sessions]
    else:
        results = [measure_session(name, rows, limit, None, config) for name in sessions]
    facts: dict[str, DecayResult] = {}
    if "decay" in rows and quick:
        facts["serve's config"] = decay(facts=3, folds=3, max_steps=12)
    elif "decay" in rows:
        facts["serve's config"] = decay()
        facts["defrag reachable (3K tail, 200-token threshold)"] = decay(overrides=DEFRAG_REACHABLE)
    return results, facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default=",".join(SESSIONS), help="names in the shared corpus")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"some of {', '.join(ROWS)}")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_MESSAGES} messages, no serve rows")
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="serve rows: seconds between an answer and the next request (an agent's tool run; default 0, at once)",
    )
    parser.add_argument("--config", type=Path, help="a YAML config file over serve's defaults (serve and inline rows)")
    args = parser.parse_args(argv)
    if args.config is not None and not args.config.is_file():
        raise SystemExit(f"recall.py: --config: no file {args.config}")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"recall.py: --rows: unknown {', '.join(unknown)} (known: {', '.join(ROWS)})")
    if args.quick:
        rows = [r for r in rows if not r.startswith("serve-")]
    started = time.monotonic()
    sessions = [s.strip() for s in args.sessions.split(",") if s.strip()]
    results, facts = run(sessions, rows, args.quick, args.config, args.pace)
    for result in results:
        print(session_table(result), end="\n\n")
    if results:
        print(total_table(results), end="\n\n")
    for title, result in facts.items():
        print(decay_line(title, result))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
