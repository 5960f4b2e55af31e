"""Rule: user messages stay: never absorbed, kept verbatim and in order."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.contract import user_message_errors as exported_checker
from microcompact.messages import render_micro_marker
from microcompact.properties import USER_MESSAGES, absorbable
from microcompact.properties.user_messages import user_message_errors
from support.strategies import examples, transcripts

Message = dict[str, Any]
FAST = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def test_a_user_message_is_never_absorbable_but_a_cut_may_pass_it() -> None:
    user = {"role": "user", "content": "keep me"}
    assert not USER_MESSAGES.may_absorb(user) and not absorbable(user)
    assert USER_MESSAGES.may_absorb({"role": "assistant", "content": "a"})
    msgs = [user, {"role": "assistant", "content": "a"}]
    assert all(USER_MESSAGES.allows_cut(msgs, i) for i in range(3))


def test_errors_report_a_missing_or_changed_user_message() -> None:
    before = [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "u2"},
    ]
    assert USER_MESSAGES.errors(before, before) == []
    dropped = [before[0], render_micro_marker("summary")]
    assert USER_MESSAGES.errors(before, dropped) == user_message_errors(before, dropped) != []
    edited = [before[0], {"role": "user", "content": "u2 (edited)"}]
    assert USER_MESSAGES.errors(before, edited) != []
    assert exported_checker is user_message_errors


@st.composite
def transcript_and_span(draw: st.DrawFn) -> tuple[list[Message], int, int]:
    msgs = draw(transcripts())
    start = draw(st.integers(0, len(msgs) - 1))
    end = draw(st.integers(start + 1, len(msgs)))
    return msgs, start, end


@FAST
@given(transcript_and_span())
def test_folding_a_span_keeps_every_user_message_iff_the_rule_keeps_them(case: tuple[list[Message], int, int]) -> None:
    """Replace [start, end) with a marker, keeping what the rule says may not be absorbed: nothing user-visible
    is lost. Absorbing the user messages too loses them, and the checker says so."""
    msgs, start, end = case
    marker = render_micro_marker("summary")
    kept = [m for m in msgs[start:end] if not USER_MESSAGES.may_absorb(m)]
    folded = [*msgs[:start], marker, *kept, *msgs[end:]]
    assert USER_MESSAGES.errors(msgs, folded) == []
    swallowed = [*msgs[:start], marker, *msgs[end:]]
    assert (USER_MESSAGES.errors(msgs, swallowed) == []) == (not kept)  # generated user texts are unique
