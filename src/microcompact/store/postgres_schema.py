"""PostgreSQL's DDL and migrations (no query code here)."""

from __future__ import annotations

from typing import Any

from .base import _SQLBase
from .errors import StoreError, StoreReadOnly
from .schema import SCHEMA_VERSION, check_not_newer, migrate

_PG_MIGRATIONS: list[list[str]] = [
    [  # 1: the initial schema
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            meta JSON NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE messages (
            id BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            position BIGINT NOT NULL,
            role TEXT NOT NULL,
            content JSON,
            extra JSON NOT NULL DEFAULT '{}',
            body TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'absorbed', 'superseded')),
            is_marker BOOLEAN NOT NULL DEFAULT FALSE,
            marker_kind TEXT CHECK (marker_kind IN ('micro', 'batch')),
            absorbed_by BIGINT REFERENCES messages(id),
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            CHECK (is_marker = (marker_kind IS NOT NULL))
        )""",
        "CREATE UNIQUE INDEX messages_active_position ON messages (session_id, position) WHERE state = 'active'",
        "CREATE INDEX messages_session_position ON messages (session_id, position)",
        "CREATE INDEX messages_absorbed_by ON messages (absorbed_by) WHERE absorbed_by IS NOT NULL",
        "CREATE INDEX messages_body_fts ON messages USING GIN (to_tsvector('simple', body))",
        """CREATE TABLE skipped_exchanges (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (session_id, key)
        )""",
    ],
    [  # 2: a write counter per session (processes sharing the store see whether a session changed)
        "ALTER TABLE sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0",
    ],
    [  # 3: one row per answered proxy request (its occupancy, cache and cost: the conversation page)
        """CREATE TABLE request_figures (
            id BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            at DOUBLE PRECISION NOT NULL,
            figures JSON NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX request_figures_session ON request_figures (session_id, id)",
    ],
]
_PG_MIGRATION_LOCK = 0x6D6963726F  # pg_advisory_xact_lock key: one migrator at a time


class _PostgresSchema(_SQLBase):
    """Creating or migrating a PostgreSQL store's schema, one migrator at a time."""

    _where: str

    def _migrate(self, cur: Any) -> None:
        if not self.read_only:
            # One migrator at a time, and the lock comes before any catalog lookup: a lookup made before
            # waiting would leave this connection a cached "no such table" after the other one created it.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_MIGRATION_LOCK,))
        cur.execute(
            "SELECT to_regclass('schema_version') IS NOT NULL, to_regclass('sessions') IS NOT NULL, "
            "to_regclass('messages') IS NOT NULL"
        )
        has_version, has_sessions, has_messages = cur.fetchone()
        version = 0
        if has_version:
            cur.execute("SELECT MAX(version) FROM schema_version")
            version = int(cur.fetchone()[0] or 0)
        elif has_sessions or has_messages:
            raise StoreError(
                f"{self._where}: the database has sessions/messages tables that are not a "
                "microcompact store (no schema_version)"
            )
        check_not_newer(version, self._where)
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreReadOnly(
                f"{self._where}: the store is opened read-only but its schema needs "
                f"{'creating' if version == 0 else 'migrating'} (version {version} -> "
                f"{SCHEMA_VERSION})"
            )
        migrate(cur, version, _PG_MIGRATIONS, "%s", self._where)
