"""Durable session storage (see :mod:`microcompact.store.core`)."""

from .core import (
    ABSORBED_BY_KEY,
    BODY_HEAD_CHARS,
    BODY_TAIL_CHARS,
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_LEASE_TTL,
    POS_KEY,
    ROW_KEY,
    SCHEMA_VERSION,
    STATE_KEY,
    STATES,
    PostgresStore,
    SessionBusy,
    SessionStore,
    SQLiteStore,
    StoreConflict,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    _SQLStore,
    default_store_path,
    open_store,
    search_text,
    sqlite_has_fts5,
)

__all__ = [
    "ABSORBED_BY_KEY", "BODY_HEAD_CHARS", "BODY_TAIL_CHARS", "DEFAULT_BUSY_TIMEOUT", "DEFAULT_LEASE_TTL",
    "POS_KEY", "ROW_KEY", "SCHEMA_VERSION", "STATE_KEY", "STATES", "PostgresStore", "SessionBusy",
    "SessionStore", "SQLiteStore", "StoreConflict", "StoreCorrupt", "StoreError", "StoreFull", "StoreLocked",
    "StoreReadOnly", "default_store_path", "open_store", "search_text", "sqlite_has_fts5",
]
