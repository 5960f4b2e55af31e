"""Rule: the role sequence stays one every OpenAI-compatible API accepts.

A pass replaces a span with one assistant-role marker. That marker may not stand before a tool result
(a result must follow the assistant message that called it) nor before the leading system prompt, and
system/developer messages are never absorbed (they are instructions, not history).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, role_sequence_errors

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
