"""Rule: the role sequence stays one every OpenAI-compatible API accepts.

A pass replaces a span with one assistant-role marker. That marker may not stand before a tool result
(a result must follow the assistant message that called it) nor before the leading system prompt, and
system/developer messages are never absorbed (they are instructions, not history). The module owns the
checker, :func:`role_sequence_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message
from .tool_pairing import tool_pairing_errors

INSTRUCTION_ROLES = ("system", "developer")


class RoleSequence:
    """Replacing a span with an assistant marker never creates a role error."""

    name = "role sequence"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """False before a tool result, and before a system message with only instructions ahead of it."""
        if index >= len(messages):
            return True
        role = messages[index].get("role")
        if role == "tool":
            return index == 0
        if role in INSTRUCTION_ROLES:
            return any(m.get("role") not in INSTRUCTION_ROLES for m in messages[:index])
        return True

    def may_absorb(self, message: Message) -> bool:
        """False for system/developer messages: instructions are never summarized."""
        return message.get("role") not in INSTRUCTION_ROLES

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """Role problems of ``after`` when ``before`` had none (a pass does not repair a broken input)."""
        if role_sequence_errors(before):
            return []
        return role_sequence_errors(after)


ROLE_SEQUENCE = RoleSequence()


def role_sequence_errors(messages: Sequence[Message], *, strict_alternation: bool = False) -> list[str]:
    """A role sequence every OpenAI-compatible API accepts.

    System/developer messages only at the start, tool results only after a tool-calling assistant
    (checked with pairing), no empty assistant message without tool calls. With ``strict_alternation``
    (what ``to_api(strict_alternation=True)`` produces), user and assistant turns must alternate.
    """
    errors: list[str] = []
    seen_other = False
    prev_role = None
    for i, m in enumerate(messages):
        role = m.get("role")
        if role in ("system", "developer"):
            if seen_other:
                errors.append(f"message {i}: {role} message after the conversation started")
            continue
        seen_other = True
        if role == "tool" and prev_role not in ("assistant", "tool"):
            errors.append(f"message {i}: tool result after a {prev_role} message")
        if strict_alternation and role in ("user", "assistant") and role == prev_role:
            errors.append(f"message {i}: two {role} messages in a row")
        prev_role = role
    return errors + tool_pairing_errors(messages)
