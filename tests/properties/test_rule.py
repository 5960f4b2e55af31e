"""The Rule protocol: one tuple of rules that both "where may a cut go" and "what is broken" loop over."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from microcompact import properties
from microcompact.contract import RULES as PUBLIC_RULES
from microcompact.contract import Rule
from microcompact.messages import render_micro_marker
from microcompact.properties import (
    MARKERS,
    ROLE_SEQUENCE,
    RULES,
    TOOL_PAIRING,
    USER_MESSAGES,
    Head,
    Tail,
    allowed_cuts,
    allows_cut,
    contract_errors,
    rules_in_force,
)

Message = dict[str, Any]


def call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "Read", "arguments": "{}"}}


TRANSCRIPT: list[Message] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a", "tool_calls": [call("x")]},
    {"role": "tool", "tool_call_id": "x", "content": "r"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "done"},
]


class Recording:
    """A rule that answers as ``rule`` does and remembers which question it was asked."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.name = rule.name
        self.asked: set[str] = set()

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        self.asked.add("allows_cut")
        return self.rule.allows_cut(messages, index)

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        self.asked.add("errors")
        return self.rule.errors(before, after)


class Broken:
    """A rule that forbids every cut and reports every output: both loops must notice it."""

    name = "broken"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        return False

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        return ["broken: always"]


def test_the_tuple_holds_every_transcript_rule_once_and_each_is_a_rule() -> None:
    assert RULES == (TOOL_PAIRING, ROLE_SEQUENCE, USER_MESSAGES, MARKERS)
    assert PUBLIC_RULES is RULES
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in (*RULES, Head(0), Tail(0)):
        assert isinstance(rule, Rule), rule


def test_the_head_and_tail_join_the_tuple_only_when_named() -> None:
    assert rules_in_force() == RULES
    assert rules_in_force(2, 5) == (*RULES, Head(2), Tail(5))
    assert rules_in_force(tail=5) == (*RULES, Tail(5))


def test_every_rule_in_the_tuple_is_asked_by_both_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = tuple(Recording(r) for r in RULES)
    monkeypatch.setattr(properties, "RULES", recording)
    assert allows_cut(TRANSCRIPT, 2)
    assert contract_errors(TRANSCRIPT, TRANSCRIPT) == []
    for r in recording:
        assert r.asked == {"allows_cut", "errors"}, r.name
    for r in recording:
        r.asked.clear()
    assert allowed_cuts(TRANSCRIPT, 1, 5) == [1, 2, 4, 5]
    assert all(r.asked == {"allows_cut"} for r in recording)


def test_a_broken_rule_makes_both_loops_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    assert allowed_cuts(TRANSCRIPT, 1, 5) == [1, 2, 4, 5]
    assert contract_errors(TRANSCRIPT, TRANSCRIPT) == []
    monkeypatch.setattr(properties, "RULES", (*RULES, Broken()))
    assert not any(allows_cut(TRANSCRIPT, i) for i in range(len(TRANSCRIPT) + 1))
    assert allowed_cuts(TRANSCRIPT, 0, len(TRANSCRIPT)) == []
    assert contract_errors(TRANSCRIPT, TRANSCRIPT) == ["broken: always"]


def test_a_rule_taken_out_of_the_tuple_is_asked_by_neither_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tool pairing in the tuple, the split pair is reported once (by the role sequence, which
    includes pairing) instead of twice; without both, a cut on a tool result is allowed and nothing is
    reported: the tuple, not a second hand-written list, is what both loops obey."""
    split = [*TRANSCRIPT[:3], TRANSCRIPT[4], TRANSCRIPT[5]]  # the call's result dropped
    missing = "message 2: tool call(s) ['x'] have no result"
    assert not allows_cut(TRANSCRIPT, 3)
    assert contract_errors(TRANSCRIPT, split) == [missing, missing]
    monkeypatch.setattr(properties, "RULES", tuple(r for r in RULES if r is not TOOL_PAIRING))
    assert contract_errors(TRANSCRIPT, split) == [missing]
    assert not allows_cut(TRANSCRIPT, 3)  # the role sequence forbids a cut before a tool result too
    monkeypatch.setattr(properties, "RULES", (USER_MESSAGES, MARKERS))
    assert allows_cut(TRANSCRIPT, 3)
    assert contract_errors(TRANSCRIPT, split) == []


def test_the_named_ends_bind_both_loops() -> None:
    assert [i for i in range(7) if allows_cut(TRANSCRIPT, i, head=2, tail=5)] == [2, 4, 5]
    changed_head = [{"role": "system", "content": "other"}, *TRANSCRIPT[1:]]
    assert contract_errors(TRANSCRIPT, changed_head) == []
    assert contract_errors(TRANSCRIPT, changed_head, head=1) == ["message 0: head message changed"]
    marker = render_micro_marker("a summary")
    folded = [*TRANSCRIPT[:4], marker, *TRANSCRIPT[4:]]
    assert contract_errors(TRANSCRIPT, folded, tail=4) == []
    assert contract_errors(TRANSCRIPT, TRANSCRIPT[:1], tail=4) == [
        "user message 0 of the input (of 2) is missing or out of order: 'u1'",
        "tail: 2 protected messages, 1 left",
    ]
