"""What the recorded Claude Code sessions cost through ``serve`` against sent direct, by the cache's rules.

    PYTHONPATH=src:tests python bench/recorded_bill.py                      # the three shared sessions
    PYTHONPATH=src:tests python bench/recorded_bill.py --sessions cc_fa812bfe --config my.yaml

The cost bench's agents are scripted; these are real sessions. Each is replayed through a real ``serve`` at
its defaults (or ``--config``) on the Anthropic route exactly as ``bench/recall.py``'s ``serve-anthropic``
row does (the client resends the whole history with Claude Code's breakpoint on the newest block and never
compacts on its own). The bodies ``serve`` forwarded and the bodies the client would have sent direct are
each priced by the scripted upstream's Anthropic cache (``tests/upstream/usage.py``: entries at breakpoints,
20-block lookback, 1,024-token minimum, no expiry between requests) at the Anthropic preset's prices; the
output is the same on both sides and left out. One table: per session and in total, cache reads and writes,
uncached input, dollars, and serve's cost as a multiple of direct.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench")]

from microcompact.bill.pricing import CachePricing  # noqa: E402
from microcompact.config import parse_config  # noqa: E402
from recall import SESSIONS, load  # noqa: E402
from recall_serve import ServeRun, anthropic_body  # noqa: E402
from upstream.usage import PromptCache  # noqa: E402

WINDOW = 200_000
MIN_CACHEABLE = 1024


@dataclass
class Bill:
    """Prompt tokens by how the cache billed them, and their price."""

    read: int = 0
    written: int = 0
    uncached: int = 0

    def add(self, cache: PromptCache, body: dict[str, Any]) -> None:
        usage = cache.usage(body)
        self.read += usage.cache_read_input_tokens
        self.written += usage.cache_creation_input_tokens
        self.uncached += usage.input_tokens

    def dollars(self, prices: CachePricing) -> float:
        return (
            self.read * prices.cached_read + self.written * prices.cache_write + self.uncached * prices.input
        ) / 1_000_000

    def __iadd__(self, other: Bill) -> Bill:
        self.read += other.read
        self.written += other.written
        self.uncached += other.uncached
        return self


def session_bills(name: str, config: Path | None) -> tuple[Bill, Bill]:
    """(through serve, direct) for one session."""
    messages, _ = load(name, None)
    served, direct = Bill(), Bill()
    served_cache, direct_cache = PromptCache(min_tokens=MIN_CACHEABLE), PromptCache(min_tokens=MIN_CACHEABLE)
    with ServeRun(WINDOW, config) as run:
        for index, _prompt in run.prompts(name, "anthropic", messages):
            served.add(served_cache, run.script.bodies[-1])
            direct.add(direct_cache, anthropic_body(messages[:index]))
    return served, direct


def _row(name: str, served: Bill, direct: Bill, prices: CachePricing) -> str:
    cost, base = served.dollars(prices), direct.dollars(prices)
    figures = [
        f"{served.read / 1e6:.2f}M",
        f"{served.written / 1e3:.0f}K",
        f"{served.uncached / 1e3:.0f}K",
        f"{cost:.2f}",
        f"{direct.read / 1e6:.2f}M",
        f"{direct.written / 1e3:.0f}K",
        f"{base:.2f}",
        f"{cost / base:.3f}" if base else "-",
    ]
    return " | ".join([name, *figures])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default=",".join(SESSIONS), help="comma-separated shared session names")
    parser.add_argument("--config", type=Path, default=None, help="serve's config over its defaults")
    args = parser.parse_args(argv)
    prices = parse_config({}).pricing.resolve("anthropic")
    rates = f"input {prices.input}, cache read {prices.cached_read}, write {prices.cache_write}"
    print(f"prices ($/M): {prices.name}: {rates}")
    columns = ["session", "serve read", "serve written", "serve uncached", "serve $"]
    columns += ["direct read", "direct written", "direct $", "x direct"]
    head = " | ".join(columns)
    print(head)
    print(" | ".join("---" for _ in head.split(" | ")))
    total_served, total_direct = Bill(), Bill()
    started = time.monotonic()
    for name in args.sessions.split(","):
        served, direct = session_bills(name.strip(), args.config)
        total_served += served
        total_direct += direct
        print(_row(name.strip(), served, direct, prices), flush=True)
    print(_row("total", total_served, total_direct, prices))
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
