"""SQLite's DDL and migrations, its FTS5 search index and the lease table (no query code here)."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from .base import _SQLBase
from .errors import StoreError
from .schema import check_not_newer, migrate

log = logging.getLogger("microcompact.store")

_SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

_SQLITE_MIGRATIONS: list[list[str]] = [
    [  # 1: the initial schema
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        f"""CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL DEFAULT ({_SQLITE_NOW}),
            updated_at TEXT NOT NULL DEFAULT ({_SQLITE_NOW}),
            meta TEXT NOT NULL DEFAULT '{{}}'
        )""",
        f"""CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT,
            extra TEXT NOT NULL DEFAULT '{{}}',
            body TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'absorbed', 'superseded')),
            is_marker INTEGER NOT NULL DEFAULT 0 CHECK (is_marker IN (0, 1)),
            marker_kind TEXT CHECK (marker_kind IN ('micro', 'batch')),
            absorbed_by INTEGER REFERENCES messages(id),
            created_at TEXT NOT NULL DEFAULT ({_SQLITE_NOW}),
            updated_at TEXT NOT NULL DEFAULT ({_SQLITE_NOW}),
            CHECK (is_marker = (marker_kind IS NOT NULL))
        )""",
        "CREATE UNIQUE INDEX messages_active_position ON messages (session_id, position) WHERE state = 'active'",
        "CREATE INDEX messages_session_position ON messages (session_id, position)",
        "CREATE INDEX messages_absorbed_by ON messages (absorbed_by) WHERE absorbed_by IS NOT NULL",
        f"""CREATE TABLE skipped_exchanges (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            created_at TEXT NOT NULL DEFAULT ({_SQLITE_NOW}),
            PRIMARY KEY (session_id, key)
        )""",
    ],
    [  # 2: a write counter per session (processes sharing the store see whether a session changed)
        "ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
    ],
    [  # 3: one row per answered proxy request (its occupancy, cache and cost: the conversation page)
        """CREATE TABLE request_figures (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            at REAL NOT NULL,
            figures TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX request_figures_session ON request_figures (session_id, id)",
    ],
]
_FTS_DDL = "CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='messages', content_rowid='id')"
_OUR_TABLES = {"schema_version", "sessions", "messages", "skipped_exchanges", "request_figures"}
# Writer leases (added to existing stores on their first writable open; no schema version change: older
# versions ignore the table, readers never need it).
_LEASES_DDL = """CREATE TABLE IF NOT EXISTS session_leases (
    session_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_start TEXT NOT NULL DEFAULT '',
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)"""

_fts5_checked: bool | None = None


def sqlite_has_fts5() -> bool:
    """Whether this Python's SQLite library was built with FTS5."""
    global _fts5_checked
    if _fts5_checked is None:
        probe = sqlite3.connect(":memory:")
        try:
            probe.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
            _fts5_checked = True
        except sqlite3.Error:
            _fts5_checked = False
        finally:
            probe.close()
    return _fts5_checked


class _SQLiteSchema(_SQLBase):
    """Reading the schema version, migrating, and setting up the FTS5 index of a SQLite store."""

    path: str
    _fts: bool

    def _version(self, cur: Any, names: set[str]) -> int:
        if "schema_version" in names:
            try:
                row = cur.execute("SELECT MAX(version) FROM schema_version").fetchone()
            except sqlite3.Error as exc:
                raise self._translate(exc, "read the schema version") from None
            version = int(row[0] or 0)
        elif names & _OUR_TABLES:
            raise StoreError(
                f"{self.path}: a SQLite database but not a microcompact store (it has tables "
                f"{', '.join(sorted(names & _OUR_TABLES))} but no schema_version)"
            )
        else:
            version = 0
        check_not_newer(version, self.path)
        return version

    def _migrate(self, cur: Any) -> None:
        names = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        version = self._version(cur, names)  # re-read under the write lock: another process may have migrated
        migrate(cur, version, _SQLITE_MIGRATIONS, "?", self.path)

    def _setup_fts(self, want: bool, exists: bool) -> None:
        available = sqlite_has_fts5()
        if exists and not available:
            raise StoreError(
                f"{self.path}: the store has an FTS5 search index but this Python's SQLite "
                f"({sqlite3.sqlite_version}) was built without FTS5"
            )
        if not exists and available and want and not self.read_only:

            def build(cur: Any) -> None:
                if not cur.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchone():
                    cur.execute(_FTS_DDL)
                    cur.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")

            self._txn(build, write=True, op="build the search index")
            exists = True
        self._fts = exists
        self.search_backend = "fts5" if exists else "like"
        if not exists:
            why = (
                "this SQLite was built without FTS5"
                if not available
                else "the store was created without it" + (" and is opened read-only" if self.read_only else "")
            )
            log.warning(
                "%s: full-text search index unavailable (%s); search() falls back to LIKE "
                "(substring match, no ranking, slower)",
                self.path,
                why,
            )
