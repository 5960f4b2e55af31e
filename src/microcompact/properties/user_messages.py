"""Rule: user messages stay, never absorbed, verbatim and in order.

A pass may fold assistant and tool messages into a summary, but every user message keeps its place in
the order (a piece that passes one keeps it, see ``Span.kept``). A cut may fall on either side of a user
message; what the rule forbids is absorbing one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, user_message_errors


class UserMessagesStay:
    """No pass absorbs a user message; the output holds every original one, verbatim, in order."""

    name = "user messages stay"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """Always: a user message is one whole message, and it stays on whichever side it is."""
        return True

    def may_absorb(self, message: Message) -> bool:
        """False for a user message: it is kept, never summarized."""
        return message.get("role") != "user"

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """User messages of ``before`` missing from ``after``, changed, or out of order."""
        return user_message_errors(before, after)


USER_MESSAGES = UserMessagesStay()
