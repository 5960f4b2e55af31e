"""All rules together: the cuts every rule allows, and the whole contract on real passes' outputs."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from microcompact.messages import render_micro_marker
from microcompact.properties import (
    MARKERS,
    ROLE_SEQUENCE,
    TOOL_PAIRING,
    USER_MESSAGES,
    Head,
    Tail,
    allowed_cuts,
    contract_errors,
)
from support.compaction_runs import run_passes
from support.strategies import examples, micro_configs, transcripts

Message = dict[str, Any]
PASSES = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
FAST = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@FAST
@given(transcripts())
def test_allowed_cuts_are_those_every_rule_allows(msgs: list[Message]) -> None:
    head, tail = min(2, len(msgs)), max(min(2, len(msgs)), len(msgs) - 2)
    rules = [TOOL_PAIRING, ROLE_SEQUENCE, USER_MESSAGES, MARKERS, Head(head), Tail(tail)]
    expected = [i for i in range(len(msgs) + 1) if all(r.allows_cut(msgs, i) for r in rules)]
    assert allowed_cuts(msgs, 0, len(msgs), head=head, tail=tail) == expected


def test_contract_errors_collect_every_broken_rule() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}],
    }
    before = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        call,
        {"role": "tool", "tool_call_id": "x", "content": "ok"},
        {"role": "user", "content": "u2"},
    ]
    assert contract_errors(before, before, head=1, tail=4) == []
    broken = [before[0], render_micro_marker("s"), before[3], before[4]]  # user u1 and the call absorbed
    errors = contract_errors(before, broken, head=1, tail=4)
    assert any("tool result" in e for e in errors) and any("user message" in e for e in errors)


@PASSES
@given(transcripts(), micro_configs())
def test_micro_passes_keep_the_whole_contract(msgs: list[Message], cfg: dict[str, Any]) -> None:
    for step in run_passes(msgs, cfg):
        w = step.window
        assert contract_errors(step.before, step.after, head=w.head, tail=w.tail) == []
