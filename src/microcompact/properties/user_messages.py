"""Rule: user messages stay, never absorbed, verbatim and in order.

A pass may fold assistant and tool messages into a summary, but every user message keeps its place in
the order (a piece that passes one keeps it, see ``Span.kept``). A cut may fall on either side of a user
message; what the rule forbids is absorbing one. The module owns the checker, :func:`user_message_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, user_texts


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


def user_message_errors(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """Every user message of ``before`` appears in ``after``, in order, verbatim.

    A user message of ``after`` is one original or several consecutive originals joined the way
    ``join_user_messages`` joins them (blank line between strings, one line break between content parts;
    empty ones contribute nothing). Empty and repeated messages are matched exactly, not as substrings of a
    neighbour, so they raise no false alarm.
    """
    originals = user_texts(before)
    kept = user_texts(after)
    errors: list[str] = []
    reach = {0}  # how many originals the output so far can stand for (more than one with empty messages)
    for j, text in enumerate(kept):
        nxt: set[int] = set()
        for i in reach:
            nxt.update(_join_ends(text, originals, i))
        if not nxt:
            errors.append(f"user message {j} of the output matches no original user message in order")
            continue
        reach = nxt
    if len(originals) not in reach:
        i = max(reach)
        errors.append(
            f"user message {i} of the input (of {len(originals)}) is missing or out of order: {originals[i][:80]!r}"
        )
    return errors


# How join_user_messages separates two originals in content_text: strings, or content parts.
_USER_JOINERS = ("\n\n", "\n")


def _join_ends(text: str, originals: Sequence[str], start: int) -> set[int]:
    """Every ``end`` such that ``text`` is ``originals[start:end]`` joined (empty ones contribute nothing)."""
    ends: set[int] = set()
    stack = [(start, 0, False)]  # (next original, position in text, whether a non-empty one matched yet)
    seen: set[tuple[int, int, bool]] = set()
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        k, pos, started = state
        if pos == len(text) and k > start:
            ends.add(k)
        if k >= len(originals):
            continue
        piece = originals[k]
        if not piece:
            stack.append((k + 1, pos, started))
        elif not started:
            if text.startswith(piece, pos):
                stack.append((k + 1, pos + len(piece), True))
        else:
            for sep in _USER_JOINERS:
                if text.startswith(sep + piece, pos):
                    stack.append((k + 1, pos + len(sep) + len(piece), True))
    return ends
