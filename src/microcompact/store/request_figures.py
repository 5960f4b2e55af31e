"""What the proxy measured of each answered request, one row per request (schema v3, ``request_figures``).

The figures (occupancy, the provider's cache read and write, dollars against not compacting, the passes
applied) live only in a process's memory and its log otherwise; in the store, every ``serve`` process on
one PostgreSQL database shows the same conversation page. Rows are appended, never changed; a row is a
small JSON object of counts and identifiers, never transcript text.
"""

from __future__ import annotations

import json
from typing import Any

from .codec import _json
from .core import _SQLStore

MAX_ROWS = 5_000  # the newest rows a read returns for one session (a page draws no more)


class RequestFigures:
    """The ``request_figures`` rows of one store (SQLite or PostgreSQL)."""

    def __init__(self, store: _SQLStore) -> None:
        self.store = store

    def add(self, session_id: str, at: float, figures: dict[str, Any]) -> None:
        """Append one request's figures (the session must exist; a read-only store writes nothing)."""
        if self.store.read_only:
            return
        self.store._check_id(session_id)
        row = (session_id, float(at), _json(figures, "request figures"))
        sql = "INSERT INTO request_figures (session_id, at, figures) VALUES (?, ?, ?)"
        self.store._txn(lambda cur: self.store._exec(cur, sql, row), write=True, op="record a request's figures")

    def of(self, session_id: str, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
        """The session's rows, oldest first (its newest ``limit``): ``{"at": ..., **figures}`` each."""
        column = "figures" if self.store.backend == "sqlite" else "figures::text"
        sql = (
            f"SELECT at, {column} FROM (SELECT id, at, figures FROM request_figures WHERE session_id = ? "
            "ORDER BY id DESC LIMIT ?) newest ORDER BY id"
        )
        rows = self.store._txn(
            lambda cur: self.store._exec(cur, sql, (session_id, int(limit))).fetchall(),
            write=False,
            op="read a session's request figures",
        )
        return [{**_loads(r[1]), "at": float(r[0])} for r in rows]

    def since(self, session_id: str, after: int) -> list[tuple[int, dict[str, Any]]]:
        """The session's rows past row id ``after``, oldest first, each with its id (a running total reads
        only what was appended since it last looked: a conversation's rows are appended one at a time,
        under its key's lock, so its ids grow in the order they commit)."""
        column = "figures" if self.store.backend == "sqlite" else "figures::text"
        sql = f"SELECT id, {column} FROM request_figures WHERE session_id = ? AND id > ? ORDER BY id"
        rows = self.store._txn(
            lambda cur: self.store._exec(cur, sql, (session_id, int(after))).fetchall(),
            write=False,
            op="read a session's newer request figures",
        )
        return [(int(r[0]), _loads(r[1])) for r in rows]

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per session with rows: how many requests, and the last one's time."""
        sql = "SELECT session_id, COUNT(*), MAX(at) FROM request_figures GROUP BY session_id"
        rows = self.store._txn(
            lambda cur: self.store._exec(cur, sql).fetchall(), write=False, op="summarize the request figures"
        )
        return {r[0]: {"requests": int(r[1]), "last_at": float(r[2])} for r in rows}


def _loads(text: Any) -> dict[str, Any]:
    value = json.loads(text) if isinstance(text, str) else text
    return value if isinstance(value, dict) else {}
