"""What the framework adapter tests share: a scripted coding agent's tool outputs and prompts, and the
checks on every request its model received.

The scripted model reads one file per iteration (a large, varied tool output), several user turns long,
so a 16K-token window is outgrown many times over. Each request the model receives is checked: within
the window, user messages verbatim and in order, tool calls paired with their results. Peak occupancy is
compared with ``replay`` of the same conversation (the framework's final full history) under the same
configuration: the adapter must compact as the library does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from microcompact import Session
from microcompact.config import Config
from microcompact.contract import tool_pairing_errors, user_message_errors
from microcompact.messages import Message
from microcompact.replay import replay
from microcompact.tokens import TokenCounter, make_text_counter
from support import builders

CONTEXT_LENGTH = 16_384
ITERATIONS_PER_TURN = 12
PROMPTS = [
    "Find why the importer drops the last line of every file; start with src/reader.py.",
    "Now check the writer side: src/writer.py and its tests. Keep the public API unchanged!",
    "Last thing: make sure the CLI reports the error with the file name, then summarize what you changed.",
]
WORDS = "buffer line offset reader writer flush encode decode parse token header footer chunk index".split()


def tool_output(turn: int, step: int) -> str:
    """A deterministic, varied file listing of about 1,200 tokens."""
    rng = random.Random(turn * 1000 + step)
    lines = [f"# src/module_{turn}_{step}.py"]
    for n in range(150):
        lines.append(f"{n:4d}  def {rng.choice(WORDS)}_{rng.randint(0, 999)}({rng.choice(WORDS)}): return {n}")
    return "\n".join(lines)


def tool_path(turn: int, step: int) -> str:
    return f"src/module_{turn}_{step}.py"


def config() -> Config:
    return builders.config(CONTEXT_LENGTH)


@dataclass
class RequestLog:
    """Every request the scripted model received, as OpenAI-format dicts (system prompt left out)."""

    requests: list[list[Message]] = field(default_factory=list)
    counter: TokenCounter = field(default_factory=lambda: TokenCounter(make_text_counter("o200k_base")))

    def tokens(self, request: Sequence[Message]) -> int:
        return sum(self.counter.count_message(m) for m in request)

    def peak_pct(self, threshold: int) -> float:
        return round(100 * max(self.tokens(r) for r in self.requests) / threshold, 1)


def replay_peak_pct(history: list[Message]) -> float:
    """Peak occupancy (% of threshold) of ``microcompact replay`` over the same conversation."""
    stats = replay(history, Session(config()))
    return max(stats.occupancy)


def check_requests(log: RequestLog, full_history: list[Message]) -> None:
    """Every request within the window, user messages verbatim so far, no broken tool pairing; peak
    occupancy within 5 points of replay's."""
    cfg = config()
    threshold = cfg.threshold_tokens()
    assert threshold is not None
    assert len(log.requests) >= 30
    users_so_far = 0
    for i, request in enumerate(log.requests):
        assert log.tokens(request) <= CONTEXT_LENGTH, f"request {i} exceeds the window"
        assert tool_pairing_errors(request) == [], f"request {i}"
        users = [m for m in request if m.get("role") == "user"]
        assert len(users) >= users_so_far, f"request {i} lost a user message"
        users_so_far = len(users)
        sent = [m for m in full_history if m.get("role") == "user"][: len(users)]
        assert user_message_errors(sent, request) == [], f"request {i}"
    assert users_so_far == len(PROMPTS)
    uncompacted = log.tokens(full_history)
    assert uncompacted > 2 * CONTEXT_LENGTH, "the conversation must outgrow the window for the test to mean anything"
    ours = log.peak_pct(threshold)
    theirs = replay_peak_pct(full_history)
    assert abs(ours - theirs) <= 5, (ours, theirs)


def oversized_output() -> str:
    """A tool output of about 12,000 tokens: over a 4,096-token window on its own."""
    return "\n".join(tool_output(9, step) for step in range(10))


CUT_NOTE = "omitted by microcompact"
