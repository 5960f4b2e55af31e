"""Keeping the working set verbatim inside a span a pass absorbs.

:func:`keep_in_use` takes the span :func:`.spans.select_span` chose and the iterations the agent still
uses (:mod:`.working_set`, bounded by the caller's budget) and returns the span a pass absorbs instead.

**Placement.** A kept iteration (an assistant call with all its results) stays where it is, verbatim, like
a user message: the pass replaces the span by its kept messages, in their order, then the new marker
(:func:`~microcompact.events.apply_event`). So a kept iteration sits before the marker, after the user
message it answered; the role sequence holds (a call and its results are whole, the marker is an
assistant message after a result or a user message), pairing holds (whole iterations only), users stay
verbatim and in order, and the store writes no row of a kept message (it keeps its position; the marker
takes the freed position after every kept one, see ``store/compaction.py``).

**The cursor.** The cursor stays just after the one rolling marker, oldest first. What earlier folds kept
sits between the head (or the last other marker) and the marker: the *kept zone*. A later pass starts at
the zone's first iteration that is no longer kept, when there is one, so what the agent stopped using is
absorbed by the next fold; its span then holds the old marker, which is neither kept nor absorbed: the
pass drops it and puts the new marker after every kept message of the span. A span always ends with an
absorbed iteration or the old marker, so kept messages never follow the new marker inside it.

**Cache breakpoints.** Everything before the span's first absorbed message is unchanged and stays cached;
a fold that reaches into the kept zone moves its change point there (the price quote counts that prefix).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..events import Span
from ..messages import Message, is_marker
from ..properties import TOOL_PAIRING, absorbable
from ..window import iteration_end


@dataclass(frozen=True)
class Unit:
    """A run ``[start, end)`` of the span: an absorbed iteration, a kept one, or a message that stays."""

    start: int
    end: int
    absorbed: bool


def _unit_at(msgs: Sequence[Message], i: int, limit: int, keep: Collection[int]) -> Unit:
    m = msgs[i]
    if not absorbable(m):  # a user message, an instruction, a marker: stays
        return Unit(i, i + 1, False)
    if m.get("role") != "assistant":  # a stray result (a broken recording): absorbed with what it follows
        return Unit(i, min(TOOL_PAIRING.forward(msgs, i), limit), True)
    end = iteration_end(msgs, i)
    if end is None:  # results missing: never kept, absorbed as the span found it
        return Unit(i, min(TOOL_PAIRING.forward(msgs, i + 1), limit), True)
    return Unit(i, min(end, limit), i not in keep)


def units(msgs: Sequence[Message], start: int, end: int, keep: Collection[int], skip: int | None = None) -> list[Unit]:
    """The span ``[start, end)`` cut into units; ``skip`` (the old marker) is a unit of its own, not absorbed."""
    out: list[Unit] = []
    i = start
    while i < end:
        unit = Unit(i, i + 1, False) if i == skip else _unit_at(msgs, i, end, keep)
        out.append(unit)
        i = max(unit.end, i + 1)
    return out


def kept_zone(msgs: Sequence[Message], marker_index: int | None, head: int) -> int | None:
    """Where the kept zone before the rolling marker starts (after the head or the last other marker), or
    None without a marker."""
    if marker_index is None:
        return None
    i = marker_index
    while i > head and not is_marker(msgs[i - 1]):
        i -= 1
    return i


def _zone_start(msgs: Sequence[Message], span: Span, keep: Collection[int], marker: int | None, head: int) -> int:
    """The first iteration of the kept zone no longer kept, when only user messages lie between the marker
    and the span; else the span's own start."""
    zone = kept_zone(msgs, marker, head)
    if zone is None or marker is None or marker >= span.start:
        return span.start
    if any(absorbable(m) or is_marker(m) for m in msgs[marker + 1 : span.start]):
        return span.start
    for unit in units(msgs, zone, marker, keep):
        if unit.absorbed and msgs[unit.start].get("role") == "assistant":
            return unit.start
    return span.start


def keep_in_use(
    msgs: Sequence[Message],
    tokens: Sequence[int],
    span: Span,
    keep: Collection[int],
    marker_index: int | None,
    head: int,
) -> tuple[Span | None, str]:
    """``span`` with the iterations starting at an index in ``keep`` left in place (and the kept zone's
    iterations no longer in ``keep`` absorbed), or (None, reason) when nothing is left to absorb."""
    start = _zone_start(msgs, span, keep, marker_index, head)
    skip = marker_index if start < span.start else None
    parts = units(msgs, start, span.end, keep, skip)
    absorbed = [u for u in parts if u.absorbed]
    if not absorbed:
        return None, "everything in the span is in use"
    end = absorbed[-1].end
    if skip is not None:
        end = max(end, skip + 1)
    kept = tuple(i for u in parts if not u.absorbed and u.end <= end for i in range(u.start, u.end) if i != skip)
    size = sum(sum(tokens[u.start : u.end]) for u in absorbed)
    return Span(start, end, size, kept, partial=span.partial), ""


__all__ = ["Unit", "keep_in_use", "kept_zone", "units"]
