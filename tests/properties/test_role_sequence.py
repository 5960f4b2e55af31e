"""Rule: replacing a span with an assistant marker keeps a role sequence every API accepts."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.contract import role_sequence_errors as exported_checker
from microcompact.messages import render_micro_marker
from microcompact.properties import ROLE_SEQUENCE, TOOL_PAIRING
from microcompact.properties.role_sequence import role_sequence_errors
from support.strategies import examples, transcripts

Message = dict[str, Any]
FAST = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
S: Message = {"role": "system", "content": "s"}
U: Message = {"role": "user", "content": "u"}
A: Message = {"role": "assistant", "content": "a"}
CALL: Message = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}],
}
RESULT: Message = {"role": "tool", "tool_call_id": "x", "content": "ok"}


def test_no_cut_before_a_tool_result_or_ahead_of_the_system_prompt() -> None:
    msgs = [S, U, CALL, RESULT, A]
    assert [i for i in range(len(msgs) + 1) if ROLE_SEQUENCE.allows_cut(msgs, i)] == [1, 2, 4, 5]
    assert not ROLE_SEQUENCE.allows_cut(msgs, 0)  # a marker there would precede the system prompt
    assert not ROLE_SEQUENCE.allows_cut(msgs, 3)  # a marker there would precede a tool result
    assert ROLE_SEQUENCE.allows_cut(msgs, 1) and ROLE_SEQUENCE.allows_cut(msgs, 5)
    mid_system = [S, U, A, {"role": "developer", "content": "d"}]
    assert ROLE_SEQUENCE.allows_cut(mid_system, 3)  # already after the conversation started: no new error


def test_instructions_are_never_absorbed() -> None:
    assert not ROLE_SEQUENCE.may_absorb(S)
    assert not ROLE_SEQUENCE.may_absorb({"role": "developer", "content": "d"})
    assert ROLE_SEQUENCE.may_absorb(A) and ROLE_SEQUENCE.may_absorb(RESULT)


def test_errors_report_what_a_pass_broke_not_what_it_was_given() -> None:
    good = [S, U, CALL, RESULT, A]
    broken = [S, U, render_micro_marker("summary"), RESULT, A]
    assert ROLE_SEQUENCE.errors(good, broken) == role_sequence_errors(broken) != []
    assert ROLE_SEQUENCE.errors(broken, broken) == []  # a broken input is not the pass's fault
    assert exported_checker is role_sequence_errors


@st.composite
def transcript_and_cuts(draw: st.DrawFn) -> tuple[list[Message], int, int]:
    msgs = draw(transcripts())
    start = draw(st.integers(0, len(msgs) - 1))
    end = draw(st.integers(start + 1, len(msgs)))
    return msgs, start, end


@FAST
@given(transcript_and_cuts())
def test_a_span_between_allowed_cuts_becomes_a_marker_without_role_errors(case: tuple[list[Message], int, int]) -> None:
    msgs, start, end = case
    assert role_sequence_errors(msgs) == []
    folded = [*msgs[:start], render_micro_marker("summary"), *msgs[end:]]
    allowed = all(ROLE_SEQUENCE.allows_cut(msgs, i) and TOOL_PAIRING.allows_cut(msgs, i) for i in (start, end))
    absorbable = all(ROLE_SEQUENCE.may_absorb(m) for m in msgs[start:end])
    if allowed and absorbable:
        assert ROLE_SEQUENCE.errors(msgs, folded) == []
    if not ROLE_SEQUENCE.allows_cut(msgs, end):
        assert ROLE_SEQUENCE.errors(msgs, folded) != []
