"""Rule: the protected tail (the latest messages within the tail token budget) is never rewritten, and a
span ends at or before its start."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.messages import render_micro_marker
from microcompact.properties import TOOL_PAIRING, Tail, allowed_cuts
from microcompact.window import tail_start
from support.compaction_runs import run_passes
from support.strategies import examples, micro_configs, transcripts

Message = dict[str, Any]
PASSES = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
U: Message = {"role": "user", "content": "u"}
A: Message = {"role": "assistant", "content": "a"}


def test_no_cut_and_no_absorbing_past_the_tail_start() -> None:
    msgs = [U, A, U, A, U, A]
    tail = Tail(4)
    assert [i for i in range(7) if tail.allows_cut(msgs, i)] == [0, 1, 2, 3, 4]
    assert tail.may_absorb(3) and not tail.may_absorb(4)
    assert allowed_cuts(msgs, 0, 6, tail=4) == [0, 1, 2, 3, 4]


def test_errors_report_a_changed_or_lost_tail_message() -> None:
    before = [U, A, U, A, U, A]
    assert Tail(4).errors(before, [render_micro_marker("x"), U, A, U, A]) == []  # the middle may change
    assert Tail(4).errors(before, [U, A, U, A, U]) != []
    assert Tail(4).errors(before, [U]) != []


@PASSES
@given(transcripts(), st.integers(0, 6000), st.integers(0, 8))
def test_the_tail_starts_on_an_allowed_cut(msgs: list[Message], budget: int, min_messages: int) -> None:
    tokens = [len(str(m.get("content") or "")) // 4 + 4 for m in msgs]
    start = tail_start(msgs, tokens, budget, min_messages=min_messages, floor=0)
    assert TOOL_PAIRING.allows_cut(msgs, start)


@PASSES
@given(transcripts(), micro_configs())
def test_passes_never_rewrite_the_tail(msgs: list[Message], cfg: dict[str, Any]) -> None:
    for step in run_passes(msgs, cfg):
        assert step.window.head <= step.window.tail
        assert Tail(step.window.tail).errors(step.before, step.after) == []
