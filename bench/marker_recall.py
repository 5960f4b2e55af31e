"""Quick measure of what the rolling marker keeps of what tools taught (issue 26, item 3).

Run: ``PYTHONPATH=src .venv/bin/python bench/marker_recall.py [--sessions cc_fa812bfe ...] [--upto N]``.

Each shared Claude Code session is replayed inline through a library :class:`Session` at ``serve``'s
defaults for an Anthropic route (200K window, price schedule, Anthropic prices, the extractive
summarizer; the cache usage each request reports comes from :class:`~microcompact.cost.CacheModel`, as
``replay --compare``'s price row does). At each model request, *needed* is the identifiers
(:mod:`microcompact.identifiers`) of the reply the agent wrote next, its text and its tool-call argument
values, that it had first seen in a tool result. Printed per session and in total:

* **prompt**: share of *needed* present anywhere in the prompt sent at that request;
* **marker**: share of *needed* present in the marker's text;
* **folded**: of the needed identifiers that the verbatim part of the prompt no longer holds (only a
  marker could keep them), the share the marker holds: what the ledger is for;
* **marker tokens**: mean and peak size of the marker (o200k estimate of the library's counter).

This is a smaller cousin of the full recall bench (``bench/recall.py``); it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcompact.bill.cache_usage import UsageReport
from microcompact.bill.replay_cost import CacheModel
from microcompact.config import Config
from microcompact.identifiers import message_identifiers
from microcompact.messages import Message, content_text, is_marker
from microcompact.micro.price import PricePolicy
from microcompact.replay import SimClock, load_transcript, replay, request_times
from microcompact.session import Session

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
WINDOW = 200_000
GAP_SECONDS = 30.0


def normalized_dir() -> Path:
    """The shared transcripts, found the way the tests find them (tests/support/paths.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.paths import NORMALIZED

    return NORMALIZED


def serve_defaults() -> Config:
    """``serve``'s defaults for an Anthropic client (server/run.py's ``proxy_config``), as a library config
    whose passes run inline (no background thread: the replay is deterministic)."""
    return Config.model_validate(
        {
            "model": {"context_length": WINDOW},
            "compression": {
                "micro_compact": True,
                "micro_compact_cache_ttl_seconds": 300.0,
                "micro_compact_schedule": "price",
            },
            "pricing": {"preset": "anthropic"},
        }
    )


def first_seen_in_tools(messages: list[Message]) -> tuple[list[set[str]], dict[str, int]]:
    """Each message's identifiers, and the index where each identifier first seen in a tool result was seen."""
    per_message = [message_identifiers(m) for m in messages]
    source: dict[str, int] = {}
    taught: dict[str, int] = {}
    for i, (message, found) in enumerate(zip(messages, per_message, strict=True)):
        for ident in found - source.keys():
            source[ident] = i
            if message.get("role") == "tool":
                taught[ident] = i
    return per_message, taught


@dataclass
class Tally:
    needed: int = 0
    in_prompt: int = 0
    in_marker: int = 0
    folded: int = 0
    folded_in_marker: int = 0
    marker_tokens: list[int] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # needed, folded, and not in the marker

    def add(self, other: Tally) -> None:
        self.needed += other.needed
        self.in_prompt += other.in_prompt
        self.in_marker += other.in_marker
        self.folded += other.folded
        self.folded_in_marker += other.folded_in_marker
        self.marker_tokens += other.marker_tokens
        self.lost += other.lost


def measure(name: str, upto: int | None) -> Tally:
    messages = load_transcript(normalized_dir() / f"{name}.jsonl")
    messages = messages[:upto] if upto else messages
    per_message, taught = first_seen_in_tools(messages)
    config = serve_defaults()
    pricing = config.cache_pricing()
    assert pricing is not None
    clock = SimClock()
    session = Session(config, session_id=name, clock=clock)
    session.micro.use_policy(PricePolicy(config, pricing, session.cache))
    model = CacheModel(pricing)
    cache: dict[int, tuple[Any, set[str]]] = {}
    tally = Tally()

    def ids_of(message: Message) -> set[str]:
        held = cache.get(id(message))
        if held is None or held[0] is not message:
            held = cache[id(message)] = (message, message_identifiers(message))
        return held[1]

    def on_request(i: int, s: Session) -> None:
        read = model.tally.cached_read_tokens
        written = model.tally.cache_write_tokens + model.tally.uncached_tokens
        model.request(s.ledger.messages, s.ledger.tokens, clock.now, s.counter.count_message(messages[i]))
        read = model.tally.cached_read_tokens - read
        written = model.tally.cache_write_tokens + model.tally.uncached_tokens - written
        s.cache.record(UsageReport(read + written, read, written, clock.now))
        needed = {x for x in per_message[i] if taught.get(x, i) < i}
        if not needed:
            return
        markers = [m for m in s.ledger.messages if is_marker(m)]
        verbatim: set[str] = set()
        for m in s.ledger.messages:
            if not is_marker(m):
                verbatim |= ids_of(m)
        in_marker: set[str] = set()
        for m in markers:
            in_marker |= message_identifiers(m)
        if markers:
            tally.marker_tokens.append(sum(s.counter.count_text(content_text(m)) for m in markers))
        folded = needed - verbatim
        tally.needed += len(needed)
        tally.in_prompt += len(needed & (verbatim | in_marker))
        tally.in_marker += len(needed & in_marker)
        tally.folded += len(folded)
        tally.folded_in_marker += len(folded & in_marker)
        tally.lost += sorted(folded - in_marker)

    times, _ = request_times(messages, GAP_SECONDS)
    replay(messages, session, clock=clock, times=times, on_request=on_request)
    return tally


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}% ({part}/{whole})" if whole else "-"


def row(name: str, t: Tally) -> str:
    sizes = t.marker_tokens
    mean = sum(sizes) / len(sizes) if sizes else 0
    return (
        f"| {name} | {pct(t.in_prompt, t.needed)} | {pct(t.in_marker, t.needed)} | "
        f"{pct(t.folded_in_marker, t.folded)} | {mean:,.0f} / {max(sizes, default=0):,} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", nargs="+", default=list(SESSIONS))
    parser.add_argument("--upto", type=int, help="replay only the first N messages of each session")
    parser.add_argument("--lost", action="store_true", help="list the folded identifiers the marker lacked")
    args = parser.parse_args(argv)
    print("| session | prompt | marker | folded, in marker | marker tokens mean / peak |")
    print("|---|---:|---:|---:|---:|")
    total = Tally()
    for name in args.sessions:
        tally = measure(name, args.upto)
        total.add(tally)
        print(row(name, tally), flush=True)
    print(row("total", total))
    if args.lost:
        print("lost:", ", ".join(f"{x} x{n}" for x, n in Counter(total.lost).most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
