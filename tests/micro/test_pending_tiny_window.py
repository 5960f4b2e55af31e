"""Pending outputs against a small window: the working set keeps the step the agent works on whatever its
in-use budget (``micro/working_set.py``, ``PENDING``), but the hard limits rule over it. With outputs of ~6K
tokens at a 16K window, two pending steps and the newest are more than the window: every request must still
stay under its limit, users verbatim and in order, the newest message as sent, one marker."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from microcompact.messages import marker_count
from microcompact.server.run import proxy_config
from microcompact.session import Session
from support.agent_steps import bash, user

Message = dict[str, Any]
REFETCH_EVERY = 5


def key(step: int) -> str:
    return hashlib.sha256(f"key {step}".encode()).hexdigest()[:16]


def output(step: int, lines: int) -> str:
    numbers = "\n".join(str(step * 1_000_000 + k) for k in range(lines))
    return f"{numbers}\nkey of step {step}: {key(step)}"


def agent_steps(steps: int, lines: int) -> list[tuple[bool, list[Message]]]:
    """Each step quotes the previous step's key; every fifth one re-runs step 1 first (a re-fetch, marked
    True), so the step it works on is pending behind it when that request goes."""
    out: list[tuple[bool, list[Message]]] = []
    for n in range(1, steps + 1):
        said = f"Key of step {n - 1}: {key(n - 1)}." if n > 1 else "Starting."
        if n % REFETCH_EVERY == 0:
            out.append((True, bash("run step 1", output(1, lines), text="I lost step 1's key; again.")))
        out.append((False, bash(f"run step {n}", output(n, lines), text=said)))
    return out


@pytest.mark.parametrize(
    ("window", "lines"),
    [
        (16_000, 1500),
        pytest.param(32_000, 700, marks=pytest.mark.slow),
        pytest.param(64_000, 1500, marks=pytest.mark.slow),
    ],
)
def test_pending_outputs_never_take_a_request_over_a_small_window(window: int, lines: int) -> None:
    config = proxy_config(None, window).with_overrides(
        source="test", compression={"micro_compact_background": False}, pricing={"preset": "anthropic"}
    )
    session = Session(config)
    users = [user("Run the numbered steps.")]
    session.extend(dict(m) for m in users)
    steps = agent_steps(40, lines)
    folded = refetches = 0
    try:
        for k, (refetch, iteration) in enumerate(steps):
            session.extend(dict(m) for m in iteration)
            if k == 20:
                users.append(user("Keep going, and be quick."))
                session.append(dict(users[-1]))
            folded += len(session.before_request())
            prompt = session.messages
            assert session.tokens <= config.model.context_length, (k, session.tokens)
            assert [m for m in prompt if m.get("role") == "user"] == users
            assert prompt[-1] == (users[-1] if k == 20 else iteration[-1]), k
            assert marker_count(session.transcript, "micro") <= 1
            refetches += refetch
            session.record_usage(session.tokens, session.tokens, cache_read_tokens=session.tokens // 2)
    finally:
        session.close()
    assert folded > 0 and refetches == 40 // REFETCH_EVERY
