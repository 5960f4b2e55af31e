"""Rule: a tool call and its results are never split by a cut."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from microcompact.contract import tool_pairing_errors as exported_checker
from microcompact.properties import TOOL_PAIRING
from microcompact.properties.tool_pairing import tool_pairing_errors
from support.strategies import examples, transcripts

Message = dict[str, Any]
FAST = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "Read", "arguments": "{}"}}


def A(*ids: str) -> Message:
    m: Message = {"role": "assistant", "content": "a"}
    if ids:
        m["tool_calls"] = [call(i) for i in ids]
    return m


def T(cid: str) -> Message:
    return {"role": "tool", "tool_call_id": cid, "content": "r"}


U: Message = {"role": "user", "content": "u"}
S: Message = {"role": "system", "content": "s"}


def test_a_cut_never_lands_between_a_call_and_its_results() -> None:
    msgs = [S, U, A("x", "y"), T("x"), T("y"), A(), U]
    assert [i for i in range(len(msgs) + 1) if TOOL_PAIRING.allows_cut(msgs, i)] == [0, 1, 2, 5, 6, 7]


def test_repair_moves_a_cut_past_the_results_or_before_the_call() -> None:
    msgs = [S, U, A("x", "y"), T("x"), T("y"), A(), U]
    assert TOOL_PAIRING.forward(msgs, 3) == 5
    assert TOOL_PAIRING.backward(msgs, 4) == 2
    assert TOOL_PAIRING.backward(msgs, 4, floor=3) == 3  # never below the floor (the head's end)
    assert TOOL_PAIRING.forward(msgs, 5) == 5  # an allowed cut stays where it is


def test_errors_name_a_split_call_and_are_the_messages_checker() -> None:
    msgs = [U, A("x"), T("x"), A()]
    assert TOOL_PAIRING.errors(msgs, msgs) == []
    split = [U, A("x"), A()]  # the result was cut away from its call
    assert TOOL_PAIRING.errors(msgs, split) == tool_pairing_errors(split) != []
    assert "no result" in TOOL_PAIRING.errors(msgs, split)[0]
    assert exported_checker is tool_pairing_errors  # the public home is microcompact.contract


@FAST
@given(transcripts())
def test_allowed_cuts_leave_both_sides_paired_and_forbidden_ones_do_not(msgs: list[Message]) -> None:
    assert tool_pairing_errors(msgs) == []
    for i in range(len(msgs) + 1):
        halves_ok = not tool_pairing_errors(msgs[:i]) and not tool_pairing_errors(msgs[i:])
        assert TOOL_PAIRING.allows_cut(msgs, i) == halves_ok, i


@FAST
@given(transcripts())
def test_repairs_return_the_nearest_allowed_cut(msgs: list[Message]) -> None:
    for i in range(len(msgs) + 1):
        fwd, back = TOOL_PAIRING.forward(msgs, i), TOOL_PAIRING.backward(msgs, i)
        assert TOOL_PAIRING.allows_cut(msgs, fwd) and TOOL_PAIRING.allows_cut(msgs, back)
        assert all(not TOOL_PAIRING.allows_cut(msgs, k) for k in range(i, fwd))
        assert all(not TOOL_PAIRING.allows_cut(msgs, k) for k in range(back + 1, i + 1))
