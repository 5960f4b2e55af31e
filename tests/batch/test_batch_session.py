"""Micro and batch together in a Session: micro continues from the batch marker with a fresh rolling
summary.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

from typing import Any

from microcompact.config import Config
from microcompact.messages import (
    is_marker,
    marker_body,
    marker_count,
    marker_kind,
)
from microcompact.session import Session
from support.batch_helpers import (
    Checked,
    Scribe,
    build,
    check_markers,
    config,
    counter,
    turn,
)

# --------------------------------------------------------------------------- Session: micro and batch together


def micro_config(**kw: Any) -> Config:
    base = dict(micro_compact=True, micro_compact_max_exchange_tokens=1000, protect_first_n=3)
    base.update(kw)
    return config(**base)


def test_micro_continues_from_the_batch_marker_with_a_fresh_rolling_summary() -> None:
    summ = Scribe()
    s = Session(micro_config(), summ, counter=counter())
    checked = Checked(s.batch, s.config)
    for m in build(10, size=150):
        if m["role"] == "user" and len(s.ledger):
            s.finalize_turn()
        if m["role"] == "assistant":
            s.before_request()
        s.append(m)
    s.finalize_turn()
    assert summ.merges and marker_count(s.transcript, "micro") == 1
    micro_body_before = marker_body(next(m for m in s.transcript if marker_kind(m) == "micro"))
    result = s.compact()
    assert result.outcome == "compacted" and checked.results
    out = s.transcript
    batch_at = max(i for i, m in enumerate(out) if marker_kind(m) == "batch")  # the newest: micro goes on there
    assert marker_count(out, "micro") == 0
    # the rolling summary went into the batch marker of the run it was in (once): as the previous summary of
    # that run's call, or as the marker itself when micro had already absorbed all of the run
    assert (
        sum(micro_body_before in previous for previous, _, _ in summ.batches)
        + sum(marker_body(m) == micro_body_before for m in out if marker_kind(m) == "batch")
        == 1
    )
    assert s.micro.state.cursor == batch_at + 1 and s.micro.state.text == "" and s.micro.state.marker_index is None
    assert result.record["micro_passes_since_last"] == len(summ.merges)
    merges_before = len(summ.merges)
    for m in turn(20, size=150) + turn(21, size=150) + turn(22, size=150):
        if m["role"] == "user":
            s.finalize_turn()
        if m["role"] == "assistant":
            s.before_request()
        s.append(m)
    s.finalize_turn()
    assert len(summ.merges) > merges_before
    check_markers(s, "after micro, batch, micro")
    out = s.transcript
    micro = next(m for m in out if marker_kind(m) == "micro")
    assert marker_body(micro).startswith(f"- micro {merges_before + 1}:")  # fresh, not the batch body
    assert "batch" not in marker_body(micro)
    # what the first micro pass after the batch read: nothing before the batch marker
    first_after = summ.merges[merges_before]
    assert not any(is_marker(m) for m in first_after)
