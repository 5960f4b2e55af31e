"""Rule: a tool call and its results are never split.

The results of one assistant message follow it directly, so a cut (the boundary between ``messages[i-1]``
and ``messages[i]``) may never land on a tool result: it would leave the results on one side and their
call on the other. A cut that does is repaired by moving it past the results (forward) or before the call
(backward).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, tool_pairing_errors


class ToolPairing:
    """A call and its results stay on the same side of every cut."""

    name = "tool pairing"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """True unless ``messages[index]`` is a tool result (its call is before the cut)."""
        return not (0 < index < len(messages) and messages[index].get("role") == "tool")

    def forward(self, messages: Sequence[Message], index: int) -> int:
        """The first allowed cut at or after ``index``: past the results that follow it."""
        n = len(messages)
        while index < n and messages[index].get("role") == "tool":
            index += 1
        return index

    def backward(self, messages: Sequence[Message], index: int, floor: int = 0) -> int:
        """The last allowed cut at or before ``index`` and above ``floor``: the call comes along."""
        while floor < index < len(messages) and messages[index].get("role") == "tool":
            index -= 1
        return index

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """Pairing problems in ``after`` (``before`` is not needed: pairing is a property of one list)."""
        return tool_pairing_errors(after)


TOOL_PAIRING = ToolPairing()
