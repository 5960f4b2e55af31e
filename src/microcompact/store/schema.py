"""The store's schema, shared by both backends (their DDL and migrations: ``sqlite_schema``,
``postgres_schema``).

Schema (version :data:`SCHEMA_VERSION`)::

    schema_version(version)
    sessions(id TEXT PK, created_at, updated_at, meta JSON,
             version BIGINT  -- bumped by every write of the session (v2): tells another process it changed)
    messages(id INTEGER PK AUTOINCREMENT | BIGSERIAL, session_id FK, position BIGINT, role TEXT,
             content JSON NULL  -- NULL: the message had no content key; else str, null or parts as JSON
             extra JSON         -- every other key except _tokens/_pos/_row: tool_calls, tool_call_id, name, _mc
             body TEXT          -- plain text for full-text search (content, tool call names and arguments)
             state TEXT CHECK IN ('active','absorbed','superseded'), is_marker BOOL,
             marker_kind TEXT NULL CHECK IN ('micro','batch'), absorbed_by BIGINT NULL FK messages(id),
             created_at, updated_at)
    UNIQUE (session_id, position) WHERE state = 'active'
    skipped_exchanges(session_id FK, key, created_at, PK (session_id, key))
    session_leases(session_id PK, token, host, pid, pid_start, acquired_at, expires_at)  -- SQLite only;
               created on a writable open when missing (readers never need it, older versions ignore it)
    request_figures(id PK, session_id FK, at  -- epoch seconds the request was answered (v3)
                    figures JSON)   -- what the proxy measured of one request: occupancy, cache, cost, passes
    full text: SQLite FTS5 external-content table messages_fts(body) (LIKE when FTS5 is missing),
               PostgreSQL GIN index on to_tsvector('simple', body)

``absorbed_by`` is the row that replaced a row: the marker that summarized an absorbed message, or the
marker that superseded an older marker, so the rolling summary's history is a chain that ``expand`` walks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .errors import StoreError

log = logging.getLogger("microcompact.store")

SCHEMA_VERSION = 3
STATES = ("active", "absorbed", "superseded")


def check_not_newer(version: int, where: str) -> None:
    """Refuse a store written by a newer microcompact: its schema may mean what this one cannot read."""
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: store schema version {version} is newer than this microcompact "
            f"supports (version {SCHEMA_VERSION}); upgrade microcompact to open it"
        )


def migrate(cur: Any, version: int, migrations: Sequence[Sequence[str]], placeholder: str, where: str) -> None:
    """Bring a store at ``version`` to :data:`SCHEMA_VERSION`, one version at a time, each recorded in
    ``schema_version`` as it is reached; ``migrations[n - 1]`` leads to version n, ``placeholder`` is the
    driver's parameter mark (``?``, ``%s``)."""
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in migrations[target - 1]:
            cur.execute(stmt)
        cur.execute("DELETE FROM schema_version")
        cur.execute(f"INSERT INTO schema_version (version) VALUES ({placeholder})", (target,))
        log.info("%s: store schema migrated to version %d", where, target)
