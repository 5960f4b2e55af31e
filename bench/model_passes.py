"""A few real merge passes of a session through a model summarizer and its checks: what was accepted, what
was rejected and why, and the seconds each pass took.

    python bench/model_passes.py SESSION.jsonl --base-url http://127.0.0.1:8087/v1 --model qwen2.5-coder-0.5b-instruct

The session's non-user messages are cut into exchanges of about ``--exchange-tokens`` (a tool call stays with
its result) and folded in one after the other, as micro passes do. A rejected answer (after its one retry)
is replaced by the extractive summary, as the engine does, so the next pass starts from what a session
would hold.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from microcompact.messages import Message
from microcompact.render import exchange_text
from microcompact.summarizers import ExtractiveSummarizer, OpenAISummarizer, SummaryRejected
from microcompact.tokens import make_text_counter


def exchanges(messages: list[Message], budget: int, count: Any) -> list[list[Message]]:
    """Runs of non-user messages of about ``budget`` tokens; a tool result stays with its call."""
    out: list[list[Message]] = [[]]
    for message in messages:
        if message.get("role") == "user":
            continue
        current = out[-1]
        if current and message.get("role") == "assistant" and count(exchange_text(current)) >= budget:
            out.append(current := [])
        current.append(message)
    return [e for e in out if e]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("session", type=Path)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--start", type=int, default=0, help="first message of the slice")
    parser.add_argument("--end", type=int, default=60, help="message after the slice")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--exchange-tokens", type=int, default=1500)
    parser.add_argument("--max-output-tokens", type=int, default=600)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)

    count = make_text_counter("o200k_base").count
    lines = args.session.read_text(encoding="utf-8").splitlines()[args.start : args.end]
    runs = exchanges([json.loads(line) for line in lines], args.exchange_tokens, count)[: args.passes]
    model = OpenAISummarizer(
        args.model, base_url=args.base_url, timeout=args.timeout, max_output_tokens=args.max_output_tokens
    )
    fallback = ExtractiveSummarizer(count)
    summary = ""
    for i, run in enumerate(runs, 1):
        rejections_before = model.rejections
        start = time.monotonic()
        try:
            summary, outcome = model.merge(summary, run), "accepted"
        except SummaryRejected as exc:
            summary, outcome = fallback.merge(summary, run), f"model_rejected ({exc.rejection.code})"
        seconds = time.monotonic() - start
        calls = 1 + (model.rejections - rejections_before > 0)
        tokens = count(exchange_text(run))
        print(f"pass {i}: {tokens} tokens in, {calls} call(s), {seconds:.0f} s, {outcome}", flush=True)
        print("  " + summary.replace("\n", "\n  "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
