"""A conversation's running figures as every process on one store sees them: the cost lines its store holds
(``request_figures`` rows, written by whichever ``serve`` process answered) plus the lines this process
charged and has not stored yet.

Each line this process charges gets an id (:class:`LineIds`) that its stored row carries. A read of the
store (:meth:`StoredTotals.refresh`) takes only the rows appended since the last one it read (a
conversation's rows are appended one at a time, under its key's lock, so their ids grow in the order they
commit); a row carrying one of this process's pending ids moves that line from pending to stored, so each
line counts once, wherever it is when the headers are made. Without a store (or while it cannot be read)
the figures are this process's lines alone, as before.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .cost_line import CostLine, SessionCost

LINE_KEY = "line"  # the stored row's key for the id of the cost line it holds


class FigureRows(Protocol):
    """Where the conversations' cost lines are stored (``store.request_figures.RequestFigures`` is one)."""

    def since(self, session_id: str, after: int) -> list[tuple[int, dict[str, Any]]]: ...


class LineIds:
    """Ids for this process's cost lines: a random prefix per process, then a count."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:12]
        self._count = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}-{next(self._count)}"


@dataclass
class _Conversation:
    stored: SessionCost
    last_row: int = 0  # the id of the newest stored row read
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # line id -> record, charged, not read back


class StoredTotals:
    """Each conversation's figures: its stored rows summed, plus this process's lines not read back. Thread-safe."""

    def __init__(self, rows: FigureRows | None = None) -> None:
        self.rows = rows
        self.ids = LineIds()
        self._conversations: dict[str, _Conversation] = {}
        self._lock = threading.Lock()

    def _of(self, session_id: str) -> _Conversation:
        """Under ``self._lock``."""
        found = self._conversations.get(session_id)
        if found is None:
            found = self._conversations[session_id] = _Conversation(SessionCost(session_id))
        return found

    def added(self, line: CostLine) -> CostLine:
        """``line`` with its id, pending in its conversation's figures until its row is read back."""
        line = replace(line, line_id=self.ids.next())
        with self._lock:
            self._of(line.session_id).pending[line.line_id] = line.record()
        return line

    def refresh(self, session_id: str, counterfactual: Callable[[int], None] | None = None) -> int:
        """Read the conversation's rows stored since the last read (the first read takes them all); the
        number read. ``counterfactual``: told the newest row's uncompacted prompt when that row is not one
        of this process's pending lines and none of them is left (another process answered last). Raises
        what the store raises."""
        if self.rows is None:
            return 0
        with self._lock:
            after = self._of(session_id).last_row
        found = self.rows.since(session_id, after)
        newest_full: int | None = None
        with self._lock:
            conversation = self._of(session_id)
            for row_id, row in found:
                if row_id <= conversation.last_row:  # another thread read it meanwhile
                    continue
                conversation.last_row = row_id
                line = row.get(LINE_KEY)
                mine = isinstance(line, str) and conversation.pending.pop(line, None) is not None
                conversation.stored.add(row)
                full = row.get("uncompacted_tokens")
                if mine:
                    newest_full = None  # this process's own bill went on from it already
                elif isinstance(full, int) and not isinstance(full, bool):
                    newest_full = full
            tell = newest_full is not None and not conversation.pending
        if tell and counterfactual is not None and newest_full is not None:
            counterfactual(newest_full)
        return len(found)

    def figures(self, session_id: str) -> SessionCost | None:
        """The conversation's figures: stored rows, then pending lines (a copy); None before any."""
        with self._lock:
            conversation = self._conversations.get(session_id)
            if conversation is None:
                return None
            figures = replace(conversation.stored)
            for record in conversation.pending.values():
                figures.add(record)
        return figures if figures.requests else None


__all__ = ["LINE_KEY", "FigureRows", "LineIds", "StoredTotals"]
