"""Background passes follow the same cache-aware schedule as inline ones: while the provider's prompt cache
is warm, a pass (which rewrites the prompt from the marker on) waits unless occupancy says it must not.
Before, background mode submitted a pass at every request whatever the cache, which is what doubled the
proxy's cost with Claude Code's cache breakpoints."""

from __future__ import annotations

from microcompact.config import parse_config
from microcompact.events import Outcome
from microcompact.replay import load_transcript
from microcompact.session import Session
from support.builders import request_points
from support.paths import NORMALIZED


class Clock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 1_000.0, step

    def __call__(self) -> float:
        return self.now


def passes(background: bool, ttl: float | None, seconds_between_requests: float) -> tuple[int, float]:
    """Absorbed passes and peak occupancy for a Claude Code session fed request by request."""
    compression = {
        "micro_compact": True,
        "micro_compact_background": background,
        "micro_compact_cache_ttl_seconds": ttl,
        "tokenizer": "estimate",
    }
    config = parse_config({"model": {"context_length": 60_000}, "compression": compression})
    clock = Clock(seconds_between_requests)
    session = Session(config, clock=clock)
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:260]
    absorbed, peak = 0, 0.0
    for end in request_points(history):
        clock.now += seconds_between_requests
        result = session.sync_history(history[:end])
        done = session.finalize_turn() if result.human and result.matched else []
        done += session.before_request()
        done += session.drain()
        absorbed += sum(r.outcome == Outcome.ABSORBED for r in done)
        peak = max(peak, session.occupancy_pct() or 0.0)
    session.close()
    return absorbed, peak


def test_background_passes_wait_while_the_cache_is_warm() -> None:
    eager, eager_peak = passes(background=True, ttl=None, seconds_between_requests=5)
    warm, warm_peak = passes(background=True, ttl=300, seconds_between_requests=5)
    # Waiting lets occupancy climb to the cap (60% of the threshold) before a pass breaks the cache; a
    # background pass at every request (the old behaviour) kept it where eager passes keep it.
    assert warm_peak >= eager_peak + 10, (warm_peak, eager_peak)
    assert 0 < warm <= eager and warm_peak <= 70, (warm, eager, warm_peak)


def test_background_passes_run_when_the_cache_has_gone_cold() -> None:
    cold, _ = passes(background=True, ttl=300, seconds_between_requests=400)
    eager, _ = passes(background=True, ttl=None, seconds_between_requests=400)
    assert cold >= eager * 0.8, (cold, eager)


def test_background_and_inline_follow_one_schedule() -> None:
    inline, _ = passes(background=False, ttl=300, seconds_between_requests=5)
    background, _ = passes(background=True, ttl=300, seconds_between_requests=5)
    assert abs(inline - background) <= max(2, inline // 3), (inline, background)
