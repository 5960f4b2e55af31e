"""The engine at every window size: each shared transcript replayed at 32K, 64K, 128K and 200K windows.

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_windows.py [--windows 32000,64000] [--json]``.
Prints one row per transcript and window; asserts nothing.

Method: ``microcompact replay`` as a user runs it (default config, micro-compaction on, the offline
extractive summarizer, tiktoken o200k_base counts), with ``model.context_length`` set to the window. At
every model request the prompt the agent would send is counted (``session.tokens``, after
``before_request``). Columns:

* ``over`` - model requests whose prompt exceeds the window;
* ``user_only`` - of those, requests where the user and system messages alone exceed it (never cut);
* ``batch/100`` - batch compactions that changed the transcript (prunes included) per 100 model requests;
* ``peak`` - the largest prompt, in % of the batch threshold (``threshold * window``) and of the window;
* ``cuts`` - last-resort head-and-tail cuts of oversized messages.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from microcompact.config import Config
from microcompact.replay import load_transcript, replay
from microcompact.session import Session

ROOT = Path(__file__).resolve().parents[1]


def normalized_dir() -> Path:
    """The shared transcripts, found the way the tests find them (tests/support/paths.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.paths import NORMALIZED

    return NORMALIZED


WINDOWS = (32_000, 64_000, 128_000, 200_000)


def run_one(path: Path, window: int) -> dict[str, Any]:
    """Replay ``path`` at ``window`` and measure every request's prompt."""
    messages = load_transcript(path)
    config = Config().with_overrides(compression={"micro_compact": True}, model={"context_length": window})
    session = Session(config)
    prompts: list[tuple[int, int]] = []  # (prompt tokens, user and system tokens)

    def on_request(_i: int, s: Session) -> None:
        users = sum(
            t
            for m, t in zip(s.ledger.messages, s.ledger.tokens, strict=True)
            if m.get("role") in ("user", "system", "developer")
        )
        prompts.append((s.tokens, users))

    stats = replay(messages, session, on_request=on_request)
    threshold = config.threshold_tokens() or window
    changed = sum(
        n
        for outcome, n in stats.batch_outcomes.items()
        if outcome in ("pruned", "compacted", "user_floor_exceeded", "fallback")
    )
    peak = max([p for p, _ in prompts] + [session.tokens])
    requests = max(1, stats.model_requests)
    return {
        "transcript": path.stem,
        "window": window,
        "requests": stats.model_requests,
        "over": sum(1 for p, _ in prompts if p > window),
        "user_only": sum(1 for p, u in prompts if p > window and u > window),
        "batches": changed,
        "batch_per_100": round(100 * changed / requests, 1),
        "peak_pct_threshold": round(100 * peak / threshold, 1),
        "peak_pct_window": round(100 * peak / window, 1),
        "cuts": sum(b.get("cut", 0) for b in stats.batches if b.get("outcome") == "truncated"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    windows = [int(w) for w in args.windows.split(",")]
    files = sorted(normalized_dir().glob("*.jsonl"))
    rows = [run_one(f, w) for f in files for w in windows]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        "| transcript | window | requests | over window | over by user+system alone | batch / 100 req "
        "| peak % threshold | peak % window | cuts |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['transcript']} | {r['window'] // 1000}K | {r['requests']} | {r['over']} | {r['user_only']} "
            f"| {r['batch_per_100']} | {r['peak_pct_threshold']} | {r['peak_pct_window']} | {r['cuts']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
