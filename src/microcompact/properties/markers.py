"""Rule: markers are never split and never absorbed twice.

A marker (a micro or batch summary message) is already a summary. A pass never puts one inside the span it
hands to the summarizer: the rolling summary is merged as the summary text, and the old micro marker is
replaced, not summarized again. A marker is one message, so no cut can fall inside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, is_marker, marker_body, marker_count


class MarkersStay:
    """Spans never include a marker; a pass leaves at most one micro marker."""

    name = "markers"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """Always: a marker is one message, whole on whichever side of a cut it is."""
        return True

    def may_absorb(self, message: Message) -> bool:
        """False for a marker: its text is already a summary and is merged, never re-read as history."""
        return not is_marker(message)

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """A second micro marker (a summary absorbed twice), or a marker that lost its body (split)."""
        errors: list[str] = []
        micro = marker_count(after, "micro")
        if micro > max(1, marker_count(before, "micro")):
            errors.append(f"{micro} micro markers: the rolling summary is kept in one")
        for i, m in enumerate(after):
            if is_marker(m) and not marker_body(m).strip():
                errors.append(f"message {i}: marker with an empty summary")
        return errors


MARKERS = MarkersStay()
