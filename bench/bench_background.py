"""How long finalize_turn blocks, foreground vs background, with a summarizer that takes 2 s per call.

Target (issue: session store and turn integration): in background mode the median time finalize_turn
blocks must not depend on the summarizer's latency, under 5 ms. Both modes run side by side on the same
turns of a real transcript when available (else synthetic turns). Prints figures; asserts nothing.

    .venv/bin/python bench/bench_background.py [--latency 2.0] [--turns 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from microcompact.config import parse_config
from microcompact.session import Session
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.tokens import TokenCounter


class SlowSummarizer(ExtractiveSummarizer):
    """The extractive summarizer behind a fixed delay, like a remote model."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.name = f"extractive+{latency:g}s"
        self.latency = latency

    def merge(self, summary, exchange):
        time.sleep(self.latency)
        return super().merge(summary, exchange)


def synthetic_turns(n: int) -> list[list[dict]]:
    turns = []
    for i in range(n):
        t = [{"role": "user", "content": f"please handle task {i}"}]
        for k in range(3):
            cid = f"c{i}_{k}"
            t.append(
                {
                    "role": "assistant",
                    "content": f"step {k}",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "Bash", "arguments": json.dumps({"command": f"make t{k}"})},
                        }
                    ],
                }
            )
            t.append({"role": "tool", "tool_call_id": cid, "content": "ok line\n" * 400})
        t.append({"role": "assistant", "content": f"task {i} done"})
        turns.append(t)
    return turns


def run(background: bool, turns: list[list[dict]], latency: float) -> list[float]:
    cfg = parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": background},
            "model": {"context_length": 40_000},
        }
    )
    session = Session(cfg, SlowSummarizer(latency), counter=TokenCounter())
    blocked = []
    for t in turns:
        session.extend(t)
        t0 = time.perf_counter()
        session.finalize_turn()
        blocked.append((time.perf_counter() - t0) * 1000)
        time.sleep(latency * 1.1 if background else 0)  # the user reads and types while the worker summarizes
    session.close()
    return blocked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args()
    turns = synthetic_turns(args.turns + 4)
    print(f"microcompact: time finalize_turn blocks, summarizer latency {args.latency:g} s")
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; {len(turns)} turns of ~3.2K tokens")
    rows = {}
    for mode in (False, True):
        blocked = run(mode, turns, args.latency)
        rows[mode] = blocked
        name = "background" if mode else "foreground"
        print(
            f"  {name:<10}  median {statistics.median(blocked):9.3f} ms   max {max(blocked):9.3f} ms   "
            f"passes {sum(1 for b in blocked if b > args.latency * 500) if not mode else '-'}"
        )
    fg, bg = statistics.median(rows[False]), statistics.median(rows[True])
    print(f"  ratio foreground/background median: {fg / max(bg, 1e-6):,.0f}x")
    print(f"  target: background median < 5 ms: {'PASS' if bg < 5 else 'MISS'} ({bg:.3f} ms)")


if __name__ == "__main__":
    main()
