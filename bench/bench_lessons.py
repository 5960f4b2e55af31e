"""Time of one extractive merge (the fold's summarizer step) and the marker it writes, per workload.

Run: ``PYTHONPATH=src:tests .venv/bin/python bench/bench_lessons.py [--sessions cc_fa812bfe ...] [--rounds 3]``.
Prints figures; asserts nothing.

Why: reading what tools taught (:mod:`microcompact.summarizers.facts_lessons`) runs inside every fold, and
a background fold that takes long lands requests late. Workloads:

* ``sdk``: the SDK loop of ``bench/bench_proxy_cost.py`` (an assistant calls Bash, the result is 3,000
  numbered lines), 20 exchanges folded one by one into a rolling summary;
* each shared Claude Code session (``tests/support/paths.py``): every assistant message with the tool
  results that answer it is one exchange, folded one by one (the first 400 exchanges).

Columns: median, p90 and max ms per merge over ``--rounds`` runs of each workload (a merge's best of the
rounds, so another process's burst counts less), mean ms of :func:`extract_lessons` alone per exchange, and
the final summary's size and its ``What tools showed`` section's size in characters. To compare two
commits, run this at each (``git stash`` or a second worktree): one run holds one version of the code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from microcompact.messages import Message
from microcompact.replay import load_transcript
from microcompact.summarizers.extractive import ExtractiveSummarizer
from microcompact.summarizers.facts_lessons import extract_lessons
from microcompact.summarizers.facts_taught import TAUGHT

SESSIONS = ("cc_fa812bfe",)
SDK_EXCHANGES = 20
SDK_LINES = 3000
MAX_EXCHANGES = 400


def sdk_exchanges(count: int = SDK_EXCHANGES, lines: int = SDK_LINES) -> list[list[Message]]:
    """The SDK loop's exchanges: step ``n`` runs ``seq`` and gets ``lines`` numbers back."""
    out = []
    for n in range(1, count + 1):
        first, last = n * 1_000_000 + 1, n * 1_000_000 + lines
        args = json.dumps({"command": f"seq {first} {last}", "description": f"Print numbers (step {n})"})
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "Bash", "arguments": args}}
        output = "\n".join(str(i) for i in range(first, last + 1))
        out.append(
            [
                {"role": "assistant", "content": f"Step {n}.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{n}", "content": output},
            ]
        )
    return out


def transcript_exchanges(path: Path, limit: int = MAX_EXCHANGES) -> list[list[Message]]:
    """Each assistant message with the tool results after it (user turns left out), in order."""
    out: list[list[Message]] = []
    for message in load_transcript(path):
        role = message.get("role")
        if role == "assistant":
            out.append([message])
        elif role == "tool" and out:
            out[-1].append(message)
    return out[:limit]


def section_chars(summary: str) -> int:
    """Characters of the summary's ``What tools showed`` section (0 when it has none)."""
    start = summary.find(f"### {TAUGHT}")
    if start < 0:
        return 0
    end = summary.find("\n### ", start + 1)
    return len(summary[start:]) if end < 0 else end - start


def run(exchanges: list[list[Message]], rounds: int) -> dict[str, Any]:
    best = [float("inf")] * len(exchanges)
    lessons_ms = float("inf")
    summary = ""
    for _ in range(rounds):
        summarizer, summary = ExtractiveSummarizer(), ""
        for i, exchange in enumerate(exchanges):
            start = time.perf_counter()
            summary = summarizer.merge(summary, exchange)
            best[i] = min(best[i], (time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        for exchange in exchanges:
            extract_lessons(exchange)
        lessons_ms = min(lessons_ms, (time.perf_counter() - start) * 1000 / len(exchanges))
    ordered = sorted(best)
    return {
        "merges": len(exchanges),
        "median": statistics.median(ordered),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
        "max": ordered[-1],
        "lessons": lessons_ms,
        "chars": len(summary),
        "taught": section_chars(summary),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", nargs="*", default=list(SESSIONS), help="shared sessions to fold")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each workload (best per merge)")
    args = parser.parse_args()
    from support.paths import NORMALIZED

    workloads = {f"sdk ({SDK_EXCHANGES} x {SDK_LINES} numbered lines)": sdk_exchanges()}
    for name in args.sessions:
        path = NORMALIZED / f"{name}.jsonl"
        if not path.is_file():
            raise SystemExit(f"bench_lessons: no transcript {path}")
        workloads[name] = transcript_exchanges(path)
    print("| workload | merges | ms/merge median | p90 | max | extract_lessons ms | summary chars | taught chars |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, exchanges in workloads.items():
        r = run(exchanges, args.rounds)
        print(
            f"| {name} | {r['merges']} | {r['median']:.1f} | {r['p90']:.1f} | {r['max']:.1f} | {r['lessons']:.2f} "
            f"| {r['chars']:,} | {r['taught']:,} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
