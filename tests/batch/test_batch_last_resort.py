"""The last resort: a request never exceeds the window unless user messages alone do; user and system
messages are never cut.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import META_KEY, content_text, to_api
from microcompact.session import Session
from microcompact.tokens import TokenCounter
from support.batch_helpers import (
    Scribe,
    call,
    config,
    counter,
    system,
)


def six_parallel_reads(tokens_each: int = 4_750) -> list[dict[str, Any]]:
    """One iteration of six parallel file reads, ~28.5K tokens of results (the issue's repro)."""
    calls = [call(f"r{k}", "Read", file_path=f"src/module_{k}.py") for k in range(6)]
    msgs: list[dict[str, Any]] = [
        system(),
        {"role": "user", "content": "review the six modules"},
        {"role": "assistant", "content": "reading them", "tool_calls": calls},
    ]
    for k in range(6):
        lines = [f"{n:5d}\tdef function_{k}_{n}(value): return value + {n}" for n in range(tokens_each // 14)]
        msgs.append({"role": "tool", "tool_call_id": f"r{k}", "content": "\n".join(lines)})
    return msgs


@pytest.mark.parametrize("micro", [True, False])
def test_a_request_never_exceeds_the_window_unless_user_messages_alone_do(
    tmp_path: Path, micro: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 8.7: six parallel reads (28.5K tokens) in a 32K window made requests larger than the window.
    As a last resort the largest outputs are cut head-and-tail with a note; the originals stay in the store."""
    from microcompact.store import open_store

    caplog.set_level(logging.WARNING, logger="microcompact")
    cfg = parse_config({"compression": {"micro_compact": micro}, "model": {"context_length": 32_000}})
    real = TokenCounter()
    msgs = six_parallel_reads()
    assert sum(real.count_message(m) for m in msgs[3:]) >= 28_000
    with open_store(tmp_path / "s.db") as store:
        s = Session(cfg, Scribe(), counter=real, store=store, session_id="reads")
        for m in msgs[:3]:
            s.append(m)
        s.before_request()
        for m in msgs[3:]:
            s.append(m)
        msgs.append({"role": "user", "content": "what do they share?"})
        s.append(msgs[-1])
        results = s.before_request()  # the next model request
        assert real.estimate_prompt(s.tokens) <= 32_000, [r.outcome for r in results]
        cuts = [r for r in results if r.outcome == "truncated"]
        assert len(cuts) == 1 and cuts[0].record["cut"] >= 1
        assert role_sequence_errors(s.transcript) == [] and user_message_errors(msgs, s.transcript) == []
        cut = [m for m in s.transcript if (m.get(META_KEY) or {}).get("cut")]
        assert cut and all(
            "omitted by microcompact: the request was over the context window" in content_text(m) for m in cut
        )
        for m in cut:  # the start and the end of the output survive
            original = next(o for o in msgs if o.get("tool_call_id") == m["tool_call_id"])
            assert content_text(m)[:200] == original["content"][:200]
            assert content_text(m)[-200:] == original["content"][-200:]
        assert any(
            "cut" in r.getMessage() and "originals are kept in the store" in r.getMessage() for r in caplog.records
        )
        s.close()
        everything = store.export("reads", include_absorbed=True)
        for m in msgs[3:-1]:  # nothing lost: every original is in the store, absorbed by its cut copy
            assert any(e.get("content") == m["content"] for e in everything)
        assert to_api(Session.open(store, "reads", cfg, Scribe()).transcript) == to_api(s.transcript)


def test_last_resort_never_cuts_user_or_system_messages(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="microcompact")
    cfg = config(8_192)
    msgs = [{"role": "system", "content": "rule " * 5_000}, {"role": "user", "content": "spec " * 6_000}]
    s = Session(cfg, Scribe(), counter=counter(), messages=msgs)
    results = s.before_request()
    assert "truncated" not in [r.outcome for r in results]
    assert to_api(s.transcript) == msgs
    assert any(
        "over the context window" in r.getMessage() and "nothing left to cut" in r.getMessage() for r in caplog.records
    )
