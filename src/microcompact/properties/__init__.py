"""The compaction contract as rules, one module each.

Every rule answers two questions: where a cut (the boundary before ``messages[index]``) may go, and what is
wrong with an output (``errors(before, after)``, empty when the rule holds). Span selection asks
:func:`allows_cut` / :func:`allowed_cuts` / :func:`absorbable`; tests and callers check a pass's output with
:func:`contract_errors`.

- :mod:`.tool_pairing`: a call and its results are never split;
- :mod:`.user_messages`: user messages stay, verbatim and in order;
- :mod:`.role_sequence`: the output is a role sequence every API accepts;
- :mod:`.markers`: markers are never split nor absorbed twice;
- :mod:`.head`, :mod:`.tail`: the protected head and tail are never rewritten.

This package sits just above ``messages``: it imports nothing from the engines or ``window``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message
from .head import Head
from .markers import MARKERS, MarkersStay
from .role_sequence import ROLE_SEQUENCE, RoleSequence
from .tail import Tail
from .tool_pairing import TOOL_PAIRING, ToolPairing
from .user_messages import USER_MESSAGES, UserMessagesStay

__all__ = [
    "MARKERS",
    "ROLE_SEQUENCE",
    "TOOL_PAIRING",
    "USER_MESSAGES",
    "Head",
    "MarkersStay",
    "RoleSequence",
    "Tail",
    "ToolPairing",
    "UserMessagesStay",
    "absorbable",
    "allowed_cuts",
    "allows_cut",
    "contract_errors",
]


def absorbable(message: Message) -> bool:
    """True when a pass may fold ``message`` into a summary: not a user message, an instruction, or a marker."""
    return USER_MESSAGES.may_absorb(message) and ROLE_SEQUENCE.may_absorb(message) and MARKERS.may_absorb(message)


def allows_cut(messages: Sequence[Message], index: int, *, head: int = 0, tail: int | None = None) -> bool:
    """True when every rule allows a cut before ``messages[index]``, given the head's end and tail's start."""
    end = len(messages) if tail is None else tail
    return (
        Head(head).allows_cut(messages, index)
        and Tail(end).allows_cut(messages, index)
        and TOOL_PAIRING.allows_cut(messages, index)
        and ROLE_SEQUENCE.allows_cut(messages, index)
        and USER_MESSAGES.allows_cut(messages, index)
        and MARKERS.allows_cut(messages, index)
    )


def allowed_cuts(
    messages: Sequence[Message], start: int, stop: int, *, head: int = 0, tail: int | None = None
) -> list[int]:
    """Every index in ``start..stop`` (inclusive) where all rules allow a cut."""
    return [i for i in range(start, stop + 1) if allows_cut(messages, i, head=head, tail=tail)]


def contract_errors(
    before: Sequence[Message], after: Sequence[Message], *, head: int | None = None, tail: int | None = None
) -> list[str]:
    """Everything a pass broke going from ``before`` to ``after`` (empty when the contract holds).

    With ``head`` (the head's end) and ``tail`` (the tail's start in ``before``), the protected ends are
    checked too.
    """
    errors = (
        TOOL_PAIRING.errors(before, after)
        + ROLE_SEQUENCE.errors(before, after)
        + USER_MESSAGES.errors(before, after)
        + MARKERS.errors(before, after)
    )
    if head is not None:
        errors += Head(head).errors(before, after)
    if tail is not None:
        errors += Tail(tail).errors(before, after)
    return errors
