"""The embedded SQLite backend: one file, WAL mode, one connection shared by threads under a lock."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..config import home_dir
from . import errors
from .base import DEFAULT_BUSY_TIMEOUT, Backoff, T
from .codec import _Encoded, _snippet
from .core import _SQLStore
from .errors import _driver_error
from .lease import DEFAULT_LEASE_TTL, _SQLiteLeases
from .schema import SCHEMA_VERSION
from .sqlite_schema import _LEASES_DDL, _SQLITE_NOW, _SQLiteSchema

log = logging.getLogger("microcompact.store")


def default_store_path() -> Path:
    """``$MICROCOMPACT_HOME/sessions.db`` (``~/.microcompact/sessions.db`` by default)."""
    return home_dir() / "sessions.db"


class SQLiteStore(_SQLiteLeases, _SQLiteSchema, _SQLStore):
    """The embedded store: one SQLite file (WAL mode, foreign keys, busy timeout).

    ``busy_timeout`` (seconds) is how long a write waits for another connection's lock before
    :class:`StoreLocked`. ``read_only`` opens the file read-only (``mode=ro``): every write raises
    :class:`StoreReadOnly`. ``fts=False`` does not create the FTS5 index on a new database (search then
    uses LIKE, as it does when SQLite lacks FTS5). One connection, shared by threads under a lock.

    A new database file is created readable by its owner only (0600; SQLite gives its WAL and shared-memory
    files the same mode). A session's writer lease is a row of ``session_leases`` (token, host, pid,
    process start, expiry), renewed by a heartbeat thread every ``lease_ttl / 3`` seconds while held.
    """

    backend = "sqlite"
    NOW = _SQLITE_NOW
    META_MERGE = "json_patch(meta, ?)"
    COLS = "m.id, m.position, m.role, m.content, m.extra, m.is_marker, m.marker_kind"
    META_TEXT = "json_extract(meta, '$.' || ?)"
    ILIKE = "LIKE"  # SQLite's LIKE ignores ASCII case

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        read_only: bool = False,
        fts: bool = True,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        super().__init__()
        self.path = str(path) if path is not None else str(default_store_path())
        self.busy_timeout = float(busy_timeout)
        self.read_only = read_only
        self.lease_ttl = float(lease_ttl)
        self._conn: sqlite3.Connection | None = None
        self._fts = False
        self._has_leases = False
        self._heartbeat: threading.Thread | None = None
        self._stop_heartbeat = threading.Event()
        memory = self.path == ":memory:"
        if not memory and not read_only:
            self._create_private(Path(self.path))
        try:
            if read_only:
                target = "file:" + quote(str(Path(self.path).resolve())) + "?mode=ro"
                conn = sqlite3.connect(
                    target, uri=True, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
                )
            else:
                conn = sqlite3.connect(
                    self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
                )
        except sqlite3.Error as exc:
            raise self._translate(exc, "open the database") from None
        self._conn = conn
        try:
            self._setup(fts)
        except BaseException:
            conn.close()
            self._conn = None
            self._closed = True
            raise

    def describe(self) -> str:
        return self.path

    # -------------------------------------------------------------- setup

    def _create_private(self, path: Path) -> None:
        """Create the directory (0700) and an empty database file (0600) when missing: sessions hold
        whatever the agent saw, so other users of the machine must not read them."""
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise errors.StoreError(f"{self.path}: cannot create its directory: {exc.strerror or exc}") from None
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass  # an existing database keeps its mode
        except OSError as exc:
            raise errors.StoreError(f"{self.path}: cannot create the database file: {exc.strerror or exc}") from None

    def _pragmas(self, conn: sqlite3.Connection) -> set[str]:
        """The connection's settings (busy timeout, foreign keys, WAL); the tables and views that exist."""
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if not self.read_only and self.path != ":memory:":
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("%s: WAL journal mode unavailable (got %s); concurrent readers will block", self.path, mode)
            conn.execute("PRAGMA synchronous = NORMAL")
        return names

    def _setup(self, want_fts: bool) -> None:
        conn = self._conn
        assert conn is not None
        # Processes opening one database at once: switching it to WAL (and WAL recovery) can answer "locked"
        # at once, without the busy handler, so setup itself retries until the busy timeout.
        deadline = time.monotonic() + self.busy_timeout
        names: set[str] = set()
        while True:
            try:
                names = self._pragmas(conn)
                break
            except sqlite3.OperationalError as exc:
                if _locked(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise self._translate(exc, "set up the connection") from None
            except sqlite3.Error as exc:
                raise self._translate(exc, "set up the connection") from None
        version = self._version(conn, names)
        if version < SCHEMA_VERSION:
            if self.read_only:
                raise errors.StoreReadOnly(
                    f"{self.path}: the store is opened read-only but its schema needs "
                    f"{'creating' if version == 0 else 'migrating'} (version {version} -> "
                    f"{SCHEMA_VERSION})"
                )
            self._txn(self._migrate, write=True, op="create or migrate the schema")
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        self._setup_fts(want_fts, "messages_fts" in names)
        self._has_leases = "session_leases" in names
        if not self._has_leases and not self.read_only:
            self._txn(lambda cur: cur.execute(_LEASES_DDL), write=True, op="create the lease table")
            self._has_leases = True

    # -------------------------------------------------------------- transactions and errors

    def _txn(self, fn: Callable[[Any], T], write: bool, op: str = "access the store") -> T:
        """Run ``fn(cursor)`` in one transaction. A database still locked after the busy timeout (another
        process's long write, a checkpoint) is tried again with doubling pauses for up to the busy timeout
        more before StoreLocked reaches the caller: nothing was written by the failed try (it rolled back)."""
        with self._lock:
            self._require_open()
            if write and self.read_only:
                raise errors.StoreReadOnly(f"{self.path}: the store is opened read-only; writes are refused")
            backoff: Backoff | None = None
            while True:
                try:
                    return self._run_txn(fn, write)
                except sqlite3.Error as exc:
                    if not _locked(exc):
                        raise self._translate(exc, op) from None
                    backoff = backoff or Backoff(self.busy_timeout)
                    if not backoff.wait():
                        raise self._translate(exc, op) from None
                    if backoff.tries == 1:
                        log.warning("%s: %s: the database is locked past the busy timeout; retrying", self.path, op)

    def _run_txn(self, fn: Callable[[Any], T], write: bool) -> T:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = fn(conn.cursor())
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        return result

    def _translate(self, exc: Exception, op: str) -> errors.StoreError:
        """A user-facing error naming the database, the operation and the error class (never its text)."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        low = str(exc).lower()
        text = _driver_error(exc)
        p = f"{self.path}: {op} failed"
        if primary in (5, 6) or "database is locked" in low:
            return errors.StoreLocked(
                f"{p}: the database is locked by another connection (waited "
                f"{self.busy_timeout:g} s, the busy timeout): {text}"
            )
        if primary == 8 or "readonly" in low or "read-only" in low:
            return errors.StoreReadOnly(
                f"{p}: the database is read-only (file permissions, a read-only mount or read_only=True): {text}"
            )
        if primary == 13 or "disk is full" in low:
            return errors.StoreFull(f"{p}: the disk or the database size limit is full: {text}")
        if primary == 26 or "not a database" in low:
            return errors.StoreCorrupt(f"{p}: not a SQLite database ({text})")
        if primary == 11 or "malformed" in low:
            return errors.StoreCorrupt(f"{p}: the database file is corrupt ({text})")
        if primary == 19:
            return errors.StoreConflict(
                f"{p}: a write conflicts with the stored session ({text}): two writers on one session?"
            )
        if primary == 14:
            return errors.StoreError(f"{p}: cannot open the database file ({text})")
        if primary == 10:
            return errors.StoreError(f"{p}: disk I/O error ({text})")
        return errors.StoreError(f"{p}: {text}")

    # -------------------------------------------------------------- dialect

    def _ids(self, column: str) -> str:
        return f"{column} IN (SELECT value FROM json_each(?))"

    def _ids_param(self, ids: Sequence[Any]) -> Any:
        return json.dumps([int(i) for i in ids])

    def _by_id_only(self, column: str) -> str:
        return "+" + column  # unary plus: SQLite will not use an index for this term

    def _insert_rows(self, cur: Any, session_id: str, items: Sequence[tuple[int, _Encoded]]) -> list[int]:
        sql = (
            "INSERT INTO messages (session_id, position, role, content, extra, body, is_marker, marker_kind) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        ids = []
        for pos, e in items:
            cur.execute(sql, (session_id, pos, e.role, e.content, e.extra, e.body, int(e.is_marker), e.kind))
            ids.append(int(cur.lastrowid))
        if self._fts and ids:
            cur.executemany(
                "INSERT INTO messages_fts (rowid, body) VALUES (?, ?)",
                [(i, e.body) for i, (_, e) in zip(ids, items, strict=True)],
            )
        return ids

    def _search(
        self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...], limit: int
    ) -> list[tuple[Any, ...]]:
        state_sql = "m.state IN (SELECT value FROM json_each(?))"
        if self._fts:
            match = " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)
            sql = f"""
                SELECT m.id, m.position, m.role, m.state, snippet(messages_fts, 0, '[', ']', '…', 16),
                       m.absorbed_by, m.is_marker
                FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                WHERE messages_fts MATCH ? AND m.session_id = ? AND {state_sql}
                ORDER BY bm25(messages_fts), m.position
                LIMIT ?"""
            hits: list[tuple[Any, ...]] = cur.execute(sql, (match, session_id, json.dumps(states), limit)).fetchall()
            return hits
        likes = " AND ".join("m.body LIKE ? ESCAPE '\\'" for _ in terms)
        patterns = ["%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t in terms]
        sql = f"""
            SELECT m.id, m.position, m.role, m.state, m.body, m.absorbed_by, m.is_marker
            FROM messages m WHERE m.session_id = ? AND {state_sql} AND {likes}
            ORDER BY m.position LIMIT ?"""
        rows = cur.execute(sql, (session_id, json.dumps(states), *patterns, limit)).fetchall()
        return [(r[0], r[1], r[2], r[3], _snippet(r[4], terms), r[5], r[6]) for r in rows]

    def close(self) -> None:
        self._stop_heartbeat.set()
        beat = self._heartbeat
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=self.busy_timeout + 1)
        with self._lock:
            if self._conn is not None and self._leases and not self._closed:
                for session_id in list(self._leases):
                    self.release_lease(session_id)
            self._leases.clear()
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
                self._conn = None
            self._closed = True


def _locked(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc).lower() or "busy" in str(exc).lower()
