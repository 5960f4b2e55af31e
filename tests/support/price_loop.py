"""A tool loop for the price policy's tests: a deterministic summarizer and a session of numbered steps.

The fold-by-price tests (tests/micro/test_price_policy.py, test_fold_ahead.py, test_fold_catch_up.py) grow one
session step by step under an injected clock; this is the part they share.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from microcompact.config import parse_config
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter

STEP_LINES = 3000
WINDOW = 200_000  # ~6K tokens a step, as Claude Code's 24 KB outputs


class Notes:
    """A deterministic summarizer: one line per exchange. ``delay`` slows each merge; ``gate`` (set by
    default) holds it until the test opens it; the threads it ran on are recorded."""

    name = "notes"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0
        self.threads: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        assert self.gate.wait(60), "the test never opened the gate"
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        ids = [c["id"] for m in exchange for c in (m.get("tool_calls") or [])]
        return (summary + "\n- ran " + ",".join(ids)).strip()

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        return (summary + f"\n- batch of {len(messages)}").strip()

    def condense(self, summary: str, target_tokens: int) -> str:
        return summary[: len(summary) // 4]


def step_session(cfg: Any, now: list[float], summarizer: Notes | None = None) -> Session:
    """A session on ``now[0]``'s clock with a large system prompt and the one user request."""
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    s = Session(cfg, summarizer=summarizer or Notes(), counter=TokenCounter(EstimateCounter()), clock=clock)
    s.append({"role": "system", "content": "system " * 16_000})
    s.append({"role": "user", "content": "Run the numbered steps."})
    return s


def step(s: Session, n: int) -> None:
    """Step ``n``: one Bash call and its ``STEP_LINES``-line output."""
    call = f"c{n}"
    tool_call = {"id": call, "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    s.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
    s.append(
        {"role": "tool", "tool_call_id": call, "content": "\n".join(str(n * 10**6 + i) for i in range(STEP_LINES))}
    )


def price_config(**compression: Any) -> Any:
    """Micro-compaction on, a 200K window, Anthropic's cache prices (so the price policy schedules)."""
    return parse_config(
        {
            "compression": {"micro_compact": True, **compression},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic"},
        }
    )


def answered(s: Session, read_all: bool = True) -> None:
    """The provider's answer: the prompt read from the cache up to the last request, the rest written."""
    t = s.tokens
    last = s.cache.last
    read = min(t, last.cached_after) if read_all and last is not None else 0
    s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)
