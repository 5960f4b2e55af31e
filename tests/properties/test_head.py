"""Rule: the head (system prompt + the first ``protect_first_n`` messages, within the head token budget) is
never rewritten, and no cut falls inside it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from microcompact.config import parse_config
from microcompact.messages import render_micro_marker
from microcompact.properties import TOOL_PAIRING, Head, allowed_cuts
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import Window, WindowBudget
from support.compaction_runs import run_passes
from support.strategies import examples, micro_configs, transcripts

Message = dict[str, Any]
PASSES = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
S: Message = {"role": "system", "content": "s"}
U: Message = {"role": "user", "content": "u"}
A: Message = {"role": "assistant", "content": "a"}


def test_no_cut_and_no_absorbing_inside_the_head() -> None:
    msgs = [S, U, A, U, A, A]
    head = Head(3)
    assert [i for i in range(7) if head.allows_cut(msgs, i)] == [3, 4, 5, 6]
    assert not head.may_absorb(2) and head.may_absorb(3)
    assert allowed_cuts(msgs, 0, 6, head=3) == [3, 4, 5, 6]


def test_errors_report_a_changed_or_lost_head_message() -> None:
    before = [S, U, A, U, A]
    assert Head(3).errors(before, before) == []
    assert Head(3).errors(before, [S, U, render_micro_marker("x"), U, A]) == ["message 2: head message changed"]
    assert Head(3).errors(before, [S, U]) != []
    with_meta = [S, U, {**A, "_tokens": 5}, U, A]
    assert Head(3).errors(before, with_meta) == []  # bookkeeping keys are not content


@PASSES
@given(transcripts(), micro_configs())
def test_the_head_ends_on_an_allowed_cut_and_passes_leave_it_alone(msgs: list[Message], cfg: dict[str, Any]) -> None:
    config = parse_config(cfg)
    ledger = Ledger(TokenCounter(EstimateCounter()), msgs)
    window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(config))
    assert TOOL_PAIRING.allows_cut(msgs, window.head)
    for step in run_passes(msgs, cfg):
        assert Head(step.window.head).errors(step.before, step.after) == []
