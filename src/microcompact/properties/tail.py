"""Rule: the protected tail stays: the latest messages, within the tail token budget, are never rewritten.

``start`` is the index of the tail's first message (``window.tail_start`` computes it; it never starts on
a tool result). A span ends at or before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..messages import Message
from .head import _public


@dataclass(frozen=True)
class Tail:
    """Nothing at or after ``start`` is absorbed or changed."""

    start: int
    name = "tail"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """True up to the tail's start."""
        return index <= self.start

    def may_absorb(self, index: int) -> bool:
        return index < self.start

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """Tail messages of ``before`` not at the end of ``after``, unchanged and in order."""
        size = len(before) - self.start
        if size > len(after):
            return [f"tail: {size} protected messages, {len(after)} left"]
        return [
            f"message {self.start + k}: tail message changed"
            for k in range(size)
            if _public(after[len(after) - size + k]) != _public(before[self.start + k])
        ]
