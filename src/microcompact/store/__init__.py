"""Durable session storage: every message written once, every compaction pass one small transaction.

Two backends share one schema design and one behaviour:

- :class:`SQLiteStore` (stdlib ``sqlite3``; the embedded default at ``$MICROCOMPACT_HOME/sessions.db``),
- :class:`PostgresStore` (``psycopg`` 3, imported only when this backend is used).

The package, one module per job (each imports only from modules above it in this list)::

    errors           StoreError and its subclasses; what a driver error may say
    schema           the schema (version, states, tables) both backends implement
    codec            message <-> row values, UTF-8 sanitizing, search text, query terms, snippets
    protocol         SessionStore: what Session needs from a store, and the contract
    base             a SQL store's state, dialect hooks, helpers, lease bookkeeping, lifecycle
    compaction       archive_and_compact: checking and writing compaction events
    core             _SQLStore: the shared, backend-neutral SQL implementation
    lease            writer leases: process identity, SQLite's lease rows, PostgreSQL's advisory locks
    sqlite_schema    SQLite DDL, migrations, FTS5
    sqlite           SQLiteStore
    postgres_schema  PostgreSQL DDL, migrations
    postgres         PostgresStore

The contract (what is stored, the ``_pos``/``_row`` keys, one writer per session, errors that never quote
the database) is in :mod:`microcompact.store.protocol`; the schema in :mod:`microcompact.store.schema`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import DEFAULT_BUSY_TIMEOUT
from .codec import ABSORBED_BY_KEY, BODY_HEAD_CHARS, BODY_TAIL_CHARS, POS_KEY, ROW_KEY, STATE_KEY, search_text
from .core import _SQLStore
from .errors import (
    SessionBusy,
    StoreConflict,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
)
from .lease import DEFAULT_LEASE_TTL
from .postgres import PostgresStore
from .protocol import SessionStore
from .schema import SCHEMA_VERSION, STATES
from .sqlite import SQLiteStore, default_store_path
from .sqlite_schema import sqlite_has_fts5


def open_store(url_or_path: str | Path | None = None, **options: Any) -> SQLiteStore | PostgresStore:
    """``postgresql://...`` (or ``postgres://``) opens a :class:`PostgresStore`; anything else is a SQLite
    path (``sqlite:///`` prefix allowed); None is :func:`default_store_path`. ``options`` go to the backend.
    """
    if url_or_path is None:
        return SQLiteStore(None, **options)
    text = str(url_or_path)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresStore(text, **options)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :] if text.startswith("sqlite:////") else text[len("sqlite://") :]
    return SQLiteStore(text, **options)


__all__ = [
    "ABSORBED_BY_KEY",
    "BODY_HEAD_CHARS",
    "BODY_TAIL_CHARS",
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_LEASE_TTL",
    "POS_KEY",
    "ROW_KEY",
    "SCHEMA_VERSION",
    "STATE_KEY",
    "STATES",
    "PostgresStore",
    "SessionBusy",
    "SessionStore",
    "SQLiteStore",
    "StoreConflict",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreLocked",
    "StoreReadOnly",
    "_SQLStore",
    "default_store_path",
    "open_store",
    "search_text",
    "sqlite_has_fts5",
]
