"""Time order: the middle split at its kept user messages into runs of work, one batch marker per run, and
the :class:`~microcompact.events.BatchCompact` that puts each marker at the place of its run."""

from __future__ import annotations

from ..events import BatchCompact, Outcome
from ..messages import Message, is_marker, marker_body, marker_kind, render_marker


def split_runs(msgs: list[Message], start: int, end: int, kept: set[int]) -> list[list[int]]:
    """``[start, end)`` split at the ``kept`` indexes (verbatim user messages) into the runs of work between
    them, oldest first; no run is empty."""
    runs: list[list[int]] = []
    current: list[int] = []
    for i in range(start, end):
        if i in kept:
            if current:
                runs.append(current)
            current = []
        else:
            current.append(i)
    if current:
        runs.append(current)
    return runs


class _Run:
    """One run of work between two kept user messages: what its batch marker summarizes, and the result."""

    def __init__(self, indexes: list[int], msgs: list[Message]) -> None:
        self.indexes = indexes
        self.material = [msgs[i] for i in indexes if not is_marker(msgs[i])]
        # Earlier markers in the run are its previous summary (batch ones first): they are in time here.
        markers = sorted((i for i in indexes if is_marker(msgs[i])), key=lambda i: marker_kind(msgs[i]) != "batch")
        self.previous = "\n\n".join(marker_body(msgs[i]) for i in markers)
        # An earlier batch marker with nothing new around it stays as it is: no call, no new row.
        self.untouched = len(indexes) == 1 and marker_kind(msgs[indexes[0]]) == "batch"
        self.summary: str | None = None
        self.outcome: str = Outcome.COMPACTED
        self.error: str | None = None
        self.used = ""  # the summarizer that wrote the summary ("" when old markers were kept as they are)
        self.capped = False  # beyond batch_max_calls: the deterministic summary, no model call
        self.input_tokens = 0


def chronological_event(msgs: list[Message], h: int, t: int, runs: list[_Run]) -> BatchCompact:
    """The middle rewritten in time order: kept messages where they were, each summarized run's marker at
    the place of its run."""
    first = {run.indexes[0]: run for run in runs if not run.untouched}
    covered = {i for run in first.values() for i in run.indexes}
    new: list[Message] = []
    sources: list[tuple[int, ...]] = []
    kept: list[int] = []
    for i in range(h, t):
        if i in first:
            run = first[i]
            assert run.summary is not None
            new.append(render_marker(run.summary, "batch"))
            sources.append(tuple(run.indexes))
        elif i not in covered:
            new.append(msgs[i])
            sources.append((i,))
            kept.append(i)
    return BatchCompact(h, t, tuple(new), tuple(sources), tuple(kept))
