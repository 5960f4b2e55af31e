"""The compaction contract as rules, one module each.

Every rule (a :class:`Rule`) answers two questions: where a cut (the boundary before ``messages[index]``)
may go, and what is wrong with an output (``errors(before, after)``, empty when the rule holds). Both
questions loop over the same tuple, :data:`RULES`, plus the protected head and tail when a caller names
them: span selection asks :func:`allows_cut` / :func:`allowed_cuts` / :func:`absorbable`; tests and callers
check a pass's output with :func:`contract_errors`. Each rule's module owns its checker.

- :mod:`.tool_pairing`: a call and its results are never split (and the repair of a broken recording);
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
from .role_sequence import ROLE_SEQUENCE, RoleSequence, role_sequence_errors
from .rule import Rule
from .tail import Tail
from .tool_pairing import (
    DROP_DUPLICATES,
    INTERRUPTED_RESULT,
    NO_RESULT,
    RENAME_DUPLICATES,
    TOOL_PAIRING,
    PairingPolicy,
    Repair,
    ToolPairing,
    check_tool_pairing,
    is_empty_assistant,
    repair_tool_pairing,
    tool_pairing_errors,
)
from .user_messages import USER_MESSAGES, UserMessagesStay, user_message_errors

__all__ = [
    "DROP_DUPLICATES",
    "INTERRUPTED_RESULT",
    "MARKERS",
    "NO_RESULT",
    "RENAME_DUPLICATES",
    "ROLE_SEQUENCE",
    "RULES",
    "TOOL_PAIRING",
    "USER_MESSAGES",
    "Head",
    "MarkersStay",
    "PairingPolicy",
    "Repair",
    "RoleSequence",
    "Rule",
    "Tail",
    "ToolPairing",
    "UserMessagesStay",
    "absorbable",
    "allowed_cuts",
    "allows_cut",
    "check_tool_pairing",
    "contract_errors",
    "is_empty_assistant",
    "repair_tool_pairing",
    "role_sequence_errors",
    "rules_in_force",
    "tool_pairing_errors",
    "user_message_errors",
]

# The rules that hold for any transcript, in the order their errors are listed. The head and tail are
# rules too, but of a position a caller names (see :func:`rules_in_force`).
RULES: tuple[Rule, ...] = (TOOL_PAIRING, ROLE_SEQUENCE, USER_MESSAGES, MARKERS)


def rules_in_force(head: int | None = None, tail: int | None = None) -> tuple[Rule, ...]:
    """:data:`RULES`, then the protected head (its end) and tail (its start) when given: the one tuple both
    :func:`allows_cut` and :func:`contract_errors` loop over."""
    ends: tuple[Rule, ...] = ((Head(head),) if head is not None else ()) + ((Tail(tail),) if tail is not None else ())
    return RULES + ends


def absorbable(message: Message) -> bool:
    """True when a pass may fold ``message`` into a summary: not a user message, an instruction, or a marker."""
    return USER_MESSAGES.may_absorb(message) and ROLE_SEQUENCE.may_absorb(message) and MARKERS.may_absorb(message)


def allows_cut(messages: Sequence[Message], index: int, *, head: int = 0, tail: int | None = None) -> bool:
    """True when every rule allows a cut before ``messages[index]``, given the head's end and tail's start
    (no tail: the end of ``messages``)."""
    end = len(messages) if tail is None else tail
    return all(rule.allows_cut(messages, index) for rule in rules_in_force(head, end))


def allowed_cuts(
    messages: Sequence[Message], start: int, stop: int, *, head: int = 0, tail: int | None = None
) -> list[int]:
    """Every index in ``start..stop`` (inclusive) where all rules allow a cut."""
    rules = rules_in_force(head, len(messages) if tail is None else tail)
    return [i for i in range(start, stop + 1) if all(rule.allows_cut(messages, i) for rule in rules)]


def contract_errors(
    before: Sequence[Message], after: Sequence[Message], *, head: int | None = None, tail: int | None = None
) -> list[str]:
    """Everything a pass broke going from ``before`` to ``after`` (empty when the contract holds).

    With ``head`` (the head's end) and ``tail`` (the tail's start in ``before``), the protected ends are
    checked too.
    """
    return [error for rule in rules_in_force(head, tail) for error in rule.errors(before, after)]
