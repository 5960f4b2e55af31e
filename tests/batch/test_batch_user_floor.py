"""The user floor: the oldest verbatim user messages folded when they take too much, never the current
request.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import logging

import pytest

from microcompact.batch import (
    BatchCompactor,
)
from microcompact.messages import (
    user_texts,
)
from microcompact.session import Session
from microcompact.tokens import Ledger
from support.batch_helpers import (
    Checked,
    Scribe,
    bounds,
    config,
    counter,
    iteration,
    opening,
    system,
    turn,
)


def test_user_floor_folds_the_oldest_user_messages_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    cfg = config()  # threshold 10,000; floor 5,000
    msgs = [system(), {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"}]
    for n in range(8):  # each user message pastes ~1,000 tokens
        msgs += turn(n, iterations=1, size=60, user=f"u{n}: pasted log\n" + f"log line {n} " * 330)
    summ = Scribe()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    checked = Checked(b, cfg)
    result = b.compact(ledger)
    assert result.outcome == "user_floor_exceeded"
    folded = result.record["users_folded"]
    assert folded >= 1
    seen = [m for _, part, _ in reversed(summ.batches) for m in part]  # (calls go newest run first)
    middle_users = [m for m in msgs[h:t] if m["role"] == "user"]
    assert [m["content"] for m in seen if m["role"] == "user"] == [m["content"] for m in middle_users[:folded]]
    kept = [m for m in ledger.messages[h:t] if m["role"] == "user"]
    assert sum(counter().count_message(m) for m in kept) <= 0.5 * cfg.threshold_tokens()
    # the folded ones are summarized in the run they now belong to; the kept ones stay individual, in order
    assert [m["content"] for m in ledger.messages if m["role"] == "user"] == [
        m["content"] for m in msgs if m["role"] == "user" and m not in middle_users[:folded]
    ]
    assert any(
        "verbatim user messages exceed 50% of the threshold" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )
    assert checked.outcomes() == ["user_floor_exceeded"]


def test_user_floor_never_folds_the_latest_user_message() -> None:
    cfg = config()  # floor 5,000 tokens
    request = "Here is the spec, implement it:\n" + "spec line\n" * 2_500  # ~6,000 tokens
    msgs = [*opening(), {"role": "user", "content": request}]
    for k in range(40):  # the long turn that follows pushes the request out of the tail
        msgs += iteration(f"k{k}", "out " * 100, command=f"step {k}")
    s = Session(cfg, Scribe(), counter=counter(), messages=msgs)
    assert s.should_compress()
    result = s.before_request()[0]
    assert result.changed
    assert request in user_texts(s.transcript), f"outcome {result.outcome}: the current request was folded"
