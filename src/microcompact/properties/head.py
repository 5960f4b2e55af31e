"""Rule: the head stays: the system prompt and the first ``protect_first_n`` messages, within the head
token budget, are never rewritten.

``end`` is the index of the first message after the head (``window.head_end`` computes it, extending it
over tool results so the head never ends between a call and its results). Passes work at or after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..messages import Message


def _public(message: Message) -> Message:
    """The message without the library's bookkeeping keys (``_mc``, ``_tokens``)."""
    return {k: v for k, v in message.items() if not k.startswith("_")}


@dataclass(frozen=True)
class Head:
    """Nothing before ``end`` is absorbed or moved."""

    end: int
    name = "head"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """True at or after the head's end."""
        return index >= self.end

    def may_absorb(self, index: int) -> bool:
        return index >= self.end

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """Head messages of ``before`` not at the same place, unchanged, in ``after``."""
        if len(after) < self.end:
            return [f"head: {len(after)} messages left of a {self.end}-message head"]
        return [
            f"message {i}: head message changed" for i in range(self.end) if _public(after[i]) != _public(before[i])
        ]
