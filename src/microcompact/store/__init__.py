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
    request_figures  RequestFigures: one row of figures per answered proxy request (the conversation page)

The contract (what is stored, the ``_pos``/``_row`` keys, one writer per session, errors that never quote
the database) is in :mod:`microcompact.store.protocol`; the schema in :mod:`microcompact.store.schema`.
"""

from __future__ import annotations

import re
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

# A scheme the store does not speak (``mysql://``, ``sqlite:/x``), read as a file name it would create.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONNINFO = re.compile(r"^\s*(?:host|hostaddr|dbname|user|port|password|service)\s*=", re.IGNORECASE)


def check_location(url_or_path: str | Path) -> None:
    """Raise StoreError when ``url_or_path`` cannot name a store: empty or blank, a control character (a
    newline pasted in), a URL scheme other than ``postgresql://``/``postgres://``/``sqlite:///``, or
    ``sqlite://`` without a path. Each of these used to become a SQLite file of that odd name."""
    text = str(url_or_path)
    if not text.strip():
        raise StoreError("the store location is empty: give a SQLite file or a postgresql:// DSN")
    if _CONTROL.search(text):
        raise StoreError(f"the store location {text[:60]!r} holds a control character (a newline?)")
    if text.startswith(("postgresql://", "postgres://")):
        return
    if text.startswith("sqlite:"):
        if not text.startswith("sqlite:///") or not text[len("sqlite:///") :].strip("/"):
            raise StoreError(f"{text[:60]!r}: a SQLite URL is sqlite:///RELATIVE/FILE or sqlite:////ABSOLUTE/FILE")
        return
    if _CONNINFO.match(text):
        return  # libpq's key=value form (``host=... dbname=...``): PostgreSQL, as psql reads it
    if _SCHEME.match(text):
        raise StoreError(
            f"{text.split(':', 1)[0]!r} is not a store this speaks: give a SQLite file or a postgresql:// DSN"
        )


def is_postgres(url_or_path: str | Path) -> bool:
    """True when ``url_or_path`` names a PostgreSQL store (a ``postgresql://``/``postgres://`` URL or libpq's
    ``host=... dbname=...`` form), as :func:`open_store` reads it; anything else is a SQLite file."""
    text = str(url_or_path)
    return text.startswith(("postgresql://", "postgres://")) or bool(_CONNINFO.match(text))


def sqlite_path(url_or_path: str | Path) -> str | None:
    """The file a SQLite location names: ``sqlite:///RELATIVE/FILE``, ``sqlite:////ABSOLUTE/FILE`` or a plain
    path (``:memory:`` as it is); None for PostgreSQL."""
    text = str(url_or_path)
    if is_postgres(text):
        return None
    return text[len("sqlite:///") :] if text.startswith("sqlite:///") else text


def open_store(url_or_path: str | Path | None = None, **options: Any) -> SQLiteStore | PostgresStore:
    """``postgresql://...`` (or ``postgres://``, or libpq's ``host=... dbname=...`` form) opens a
    :class:`PostgresStore`; anything else is a SQLite
    path (``sqlite:///`` prefix allowed); None is :func:`default_store_path`. ``options`` go to the backend.
    A location :func:`check_location` refuses raises StoreError.
    """
    if url_or_path is None:
        return SQLiteStore(None, **options)
    check_location(url_or_path)
    text = str(url_or_path)
    if is_postgres(text):
        return PostgresStore(text, **options)
    return SQLiteStore(sqlite_path(text) or text, **options)


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
    "check_location",
    "is_postgres",
    "sqlite_path",
    "default_store_path",
    "open_store",
    "search_text",
    "sqlite_has_fts5",
]
