"""The shared SQL implementation of :class:`~.protocol.SessionStore`, backend-neutral.

:class:`_SQLStore` is everything both backends do the same way: sessions, appends, skip memory, progress
(meta), search, expand and export, on top of the compaction writes (:mod:`.compaction`) and the store's
skeleton (:mod:`.base`). A backend supplies the connection, transactions and SQL dialect.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..messages import Message
from .codec import (
    ABSORBED_BY_KEY,
    POS_KEY,
    ROW_KEY,
    STATE_KEY,
    _clean_text,
    _decode,
    _Encoded,
    _json,
    _query_terms,
    _timestamp,
)
from .compaction import _CompactionWrites


class _SQLStore(_CompactionWrites):
    """Everything both backends do the same way; subclasses supply the connection and dialect."""

    # -------------------------------------------------------------- sessions

    def create_session(self, session_id: str, meta: dict[str, Any] | None = None) -> bool:
        """Create the session if it does not exist (idempotent; an existing session keeps its meta).

        Returns True when it was created.
        """
        self._check_id(session_id)
        meta_json = _json(meta or {}, "session meta")

        def txn(cur: Any) -> bool:
            self._exec(
                cur,
                "INSERT INTO sessions (id, meta) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                (session_id, meta_json),
            )
            created: int = cur.rowcount  # DB-API cursors are untyped; rowcount is an int in both drivers
            return created == 1

        return self._txn(txn, write=True, op="create the session")

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every session, oldest first: id, created_at, updated_at, meta, counts by state, active markers."""
        meta = "s.meta" if self.backend == "sqlite" else "s.meta::text"
        sql = f"""
            SELECT s.id, s.created_at, s.updated_at, {meta},
                   COALESCE(SUM(CASE WHEN m.state = 'active' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'absorbed' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'superseded' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'active' AND m.is_marker THEN 1 ELSE 0 END), 0)
            FROM sessions s LEFT JOIN messages m ON m.session_id = s.id
            GROUP BY s.id
            ORDER BY s.created_at, s.id"""
        rows = self._txn(lambda cur: self._exec(cur, sql).fetchall(), write=False, op="list the sessions")
        return [
            {
                "id": r[0],
                "created_at": _timestamp(r[1]),
                "updated_at": _timestamp(r[2]),
                "meta": json.loads(r[3]) if r[3] else {},
                "counts": {"active": int(r[4]), "absorbed": int(r[5]), "superseded": int(r[6])},
                "markers": int(r[7]),
            }
            for r in rows
        ]

    # -------------------------------------------------------------- messages

    def load_active(self, session_id: str) -> list[Message]:
        """The session's transcript: its active rows in position order (empty for an unknown session)."""
        sql = f"SELECT {self.COLS} FROM messages m WHERE m.session_id = ? AND m.state = 'active' ORDER BY m.position"
        rows = self._txn(lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False, op="load the session")
        return [_decode(*r) for r in rows]

    def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Write ``messages`` after the session's last position, in one transaction (creates the session).

        Sets ``_pos`` and ``_row`` on each given dict once the transaction has committed (a documented
        mutation: these are the library's own copies). A message that already has ``_row`` is rejected
        with ValueError, before anything is written: each message is written once.
        """
        self._check_id(session_id)
        msgs = list(messages)
        if not msgs:
            return
        seen: set[int] = set()
        for i, m in enumerate(msgs):
            if isinstance(m, dict) and ROW_KEY in m:
                raise ValueError(f"message {i} is already stored (row {m[ROW_KEY]}); each message is written once")
            if id(m) in seen:
                raise ValueError(f"message {i} appears twice in one append")
            seen.add(id(m))
        encoded = [_Encoded(m, f"message {i}") for i, m in enumerate(msgs)]

        def txn(cur: Any) -> tuple[int, list[int]]:
            self._touch_session(cur, session_id, create=True)
            top = self._exec(cur, "SELECT MAX(position) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[
                0
            ]
            start = 0 if top is None else int(top) + 1
            ids = self._insert_rows(cur, session_id, [(start + i, e) for i, e in enumerate(encoded)])
            return start, ids

        start, ids = self._txn(txn, write=True, op="append messages")
        for i, (m, row) in enumerate(zip(msgs, ids, strict=True)):
            m[POS_KEY] = start + i
            m[ROW_KEY] = row

    # -------------------------------------------------------------- skip memory

    def remember_skip(self, session_id: str, key: str) -> None:
        """Remember that the exchange ``key`` was skipped (idempotent; creates the session)."""
        self._check_id(session_id)

        def txn(cur: Any) -> None:
            self._touch_session(cur, session_id, create=True)
            self._exec(
                cur,
                "INSERT INTO skipped_exchanges (session_id, key) VALUES (?, ?) "
                "ON CONFLICT (session_id, key) DO NOTHING",
                (session_id, _clean_text(str(key))),
            )

        self._txn(txn, write=True, op="remember a skipped exchange")

    def skipped(self, session_id: str) -> set[str]:
        sql = "SELECT key FROM skipped_exchanges WHERE session_id = ?"
        rows = self._txn(
            lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False, op="read the skipped exchanges"
        )
        return {r[0] for r in rows}

    # -------------------------------------------------------------- session progress (meta)

    META_MERGE = ""  # SQL merging a JSON object parameter into sessions.meta

    def update_meta(self, session_id: str, values: dict[str, Any]) -> None:
        """Merge ``values`` into the session's meta (creates the session): one small UPDATE."""
        self._check_id(session_id)
        patch = _json(values, "session meta")

        def txn(cur: Any) -> None:
            self._touch_session(cur, session_id, create=True)
            self._exec(cur, f"UPDATE sessions SET meta = {self.META_MERGE} WHERE id = ?", (patch, session_id))

        self._txn(txn, write=True, op="update the session's progress")

    def session_versions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Each existing session's version (bumped by every write of it): a process that cached a session
        reloads it only when the version moved. One small query for any number of sessions."""
        ids = list(dict.fromkeys(session_ids))
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        sql = f"SELECT id, version FROM sessions WHERE id IN ({marks})"
        rows = self._txn(lambda cur: self._exec(cur, sql, ids).fetchall(), write=False, op="read session versions")
        return {r[0]: int(r[1]) for r in rows}

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The session's meta ({} for an unknown session)."""
        sql = f"SELECT {'meta' if self.backend == 'sqlite' else 'meta::text'} FROM sessions WHERE id = ?"
        rows = self._txn(
            lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False, op="read the session's progress"
        )
        return json.loads(rows[0][0]) if rows and rows[0][0] else {}

    # -------------------------------------------------------------- recall

    def search(
        self, session_id: str, query: str, limit: int = 20, include_active: bool = False
    ) -> list[dict[str, Any]]:
        """Full-text search over the session's absorbed originals (plus active rows with ``include_active``).

        Terms are words and "quoted phrases"; a hit contains all of them. Each hit: ``row``, ``position``,
        ``role``, ``state``, ``snippet`` (matches in [brackets]), ``absorbed_by``, ``is_marker``. Best
        matches first. Superseded markers are never returned.
        """
        query = _clean_text(query or "")
        terms = _query_terms(query)
        if not terms or limit <= 0:
            return []
        states = ("absorbed", "active") if include_active else ("absorbed",)
        rows = self._txn(
            lambda cur: self._search(cur, session_id, terms, query, states, int(limit)),
            write=False,
            op="search the session",
        )
        return [
            {
                "row": int(r[0]),
                "position": int(r[1]),
                "role": r[2],
                "state": r[3],
                "snippet": r[4],
                "absorbed_by": None if r[5] is None else int(r[5]),
                "is_marker": bool(r[6]),
            }
            for r in rows
        ]

    def expand(self, session_id: str, marker_row: int) -> list[Message]:
        """The originals a marker stands for, in position order: what it absorbed, and what every marker
        it superseded (transitively) absorbed. For the latest micro marker that is everything the rolling
        summary covers. Raises ValueError when ``marker_row`` is not a marker of the session."""
        check = "SELECT is_marker FROM messages WHERE id = ? AND session_id = ?"
        sql = f"""
            WITH RECURSIVE chain(id) AS (
                SELECT CAST(? AS BIGINT)
                UNION
                SELECT c.id FROM messages c JOIN chain ON c.absorbed_by = chain.id
                WHERE c.is_marker AND c.session_id = ?
            )
            SELECT {self.COLS} FROM chain JOIN messages m ON m.absorbed_by = chain.id
            WHERE m.session_id = ? AND m.state = 'absorbed' AND NOT m.is_marker
            ORDER BY m.position, m.id"""

        def txn(cur: Any) -> list[tuple[Any, ...]] | None:
            r = self._exec(cur, check, (int(marker_row), session_id)).fetchone()
            if r is None or not r[0]:
                return None
            rows: list[tuple[Any, ...]] = self._exec(cur, sql, (int(marker_row), session_id, session_id)).fetchall()
            return rows

        rows = self._txn(txn, write=False, op="expand a marker")
        if rows is None:
            raise ValueError(f"row {marker_row} is not a marker of session {session_id!r}")
        return [_decode(*r) for r in rows]

    # -------------------------------------------------------------- reading one conversation's originals

    META_TEXT = ""  # SQL: the text of one top-level key of ``sessions.meta``, the key given as a parameter
    ILIKE = ""  # SQL: case-insensitive LIKE (``ESCAPE '\\'`` follows)

    def sessions_with_meta(self, key: str, value: str) -> list[str]:
        """The ids of the sessions whose meta holds the string ``value`` under the top-level ``key`` (at most
        two: a caller asking for one session can tell "none" and "not one" apart). ``key`` is a plain name."""
        if not _META_KEY_NAME.fullmatch(key):
            raise ValueError(f"meta key {key!r} is not a plain name (letters, digits, _)")
        sql = f"SELECT id FROM sessions WHERE {self.META_TEXT} = ? ORDER BY id LIMIT 2"
        rows = self._txn(
            lambda cur: self._exec(cur, sql, (key, _clean_text(value))).fetchall(),
            write=False,
            op="find a session by its meta",
        )
        return [str(r[0]) for r in rows]

    def rows_by_id(self, session_id: str, rows: Sequence[int]) -> list[Message]:
        """The messages of ``session_id`` among the row ids ``rows`` (any state; a row of another session is
        simply not returned), in position order, each with ``_state`` and, when replaced, ``_absorbed_by``."""
        ids = [int(r) for r in rows]
        if not ids:
            return []
        sql = (
            f"SELECT {self.COLS}, m.state, m.absorbed_by FROM messages m "
            f"WHERE {self._ids('m.id')} AND m.session_id = ? ORDER BY m.position, m.id"
        )
        found = self._txn(
            lambda cur: self._exec(cur, sql, (self._ids_param(ids), session_id)).fetchall(),
            write=False,
            op="read messages of the session",
        )
        return [_exported(r) for r in found]

    def rows_between(self, session_id: str, first: int, last: int) -> list[Message]:
        """The messages of ``session_id`` at positions ``first``..``last`` (any state), in position order, each
        with ``_state`` and ``_absorbed_by`` as :meth:`rows_by_id` gives them."""
        sql = (
            f"SELECT {self.COLS}, m.state, m.absorbed_by FROM messages m "
            "WHERE m.session_id = ? AND m.position BETWEEN ? AND ? ORDER BY m.position, m.id"
        )
        found = self._txn(
            lambda cur: self._exec(cur, sql, (session_id, int(first), int(last))).fetchall(),
            write=False,
            op="read messages of the session",
        )
        return [_exported(r) for r in found]

    def absorbed_matching(self, session_id: str, needles: Sequence[str], limit: int) -> list[Message]:
        """The session's absorbed originals (markers excluded) whose search text contains any of ``needles``
        (case-insensitive substrings), newest first, at most ``limit``; each with ``_state``/``_absorbed_by``.
        A scan of the session's absorbed rows: for a tool's one question, not for a request's hot path."""
        words = [_clean_text(n) for n in needles if n and n.strip()]
        if not words or limit <= 0:
            return []
        likes = " OR ".join(f"m.body {self.ILIKE} ? ESCAPE '\\'" for _ in words)
        patterns = ["%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for w in words]
        sql = (
            f"SELECT {self.COLS}, m.state, m.absorbed_by FROM messages m WHERE m.session_id = ? "
            f"AND m.state = 'absorbed' AND NOT m.is_marker AND ({likes}) ORDER BY m.position DESC, m.id DESC LIMIT ?"
        )
        found = self._txn(
            lambda cur: self._exec(cur, sql, (session_id, *patterns, int(limit))).fetchall(),
            write=False,
            op="search the session's originals",
        )
        return [_exported(r) for r in found]

    def export(self, session_id: str, include_absorbed: bool = False) -> list[Message]:
        """The active transcript; with ``include_absorbed`` every row ever written, in position order (an
        absorbed message comes before the marker placed at its position), each with ``_state`` and, when
        replaced, ``_absorbed_by``."""
        if not include_absorbed:
            return self.load_active(session_id)
        sql = (
            f"SELECT {self.COLS}, m.state, m.absorbed_by FROM messages m WHERE m.session_id = ? "
            "ORDER BY m.position, m.id"
        )
        rows = self._txn(
            lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False, op="export the session"
        )
        return [_exported(r) for r in rows]


_META_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _exported(row: Sequence[Any]) -> Message:
    """A row of ``COLS, state, absorbed_by`` as a message with ``_state`` and (when replaced) ``_absorbed_by``."""
    msg = _decode(*row[:7])
    msg[STATE_KEY] = row[7]
    if row[8] is not None:
        msg[ABSORBED_BY_KEY] = int(row[8])
    return msg
