"""The PostgreSQL backend (psycopg 3, imported only when this backend is used)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from . import errors
from .base import DEFAULT_BUSY_TIMEOUT, DEFAULT_RETRY_SECONDS, Backoff, T
from .codec import _clean_text, _Encoded
from .core import _SQLStore
from .errors import _driver_error
from .lease import _AdvisoryLeases, _this_writer
from .postgres_schema import _PostgresSchema

log = logging.getLogger("microcompact.store")


# SQLSTATEs of a server going away or coming back (admin/crash shutdown, starting up, too many connections,
# connection exceptions): a later try can succeed.
TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "08000", "08001", "08003", "08004", "08006"})
# What a server that is starting, stopping or recovering says before it has a session to give an SQLSTATE.
_TRANSIENT_TEXT = ("starting up", "shutting down", "in recovery mode", "not yet accepting connections")


class _Transient(errors.StoreError):
    """A connection attempt that may succeed later (the server restarting): retried within the budget."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise errors.StoreError("the PostgreSQL store needs psycopg 3: pip install 'microcompact[postgres]'") from None
    return psycopg


class PostgresStore(_AdvisoryLeases, _PostgresSchema, _SQLStore):
    """The PostgreSQL store (psycopg 3, autocommit off, explicit transactions).

    Writers on one session are serialized by a row lock on the session (taken first in every write), so a
    concurrent conflicting archive raises :class:`StoreConflict`. ``busy_timeout`` (seconds) becomes the
    connection's ``lock_timeout`` (:class:`StoreLocked` after it). A dropped connection (server restart) is
    reconnected and the transaction retried, unless it dropped during COMMIT (outcome unknown: a
    :class:`StoreError` says so): a server that is restarting (connection refused, "the database system is
    starting up") is tried again with a doubling pause for up to ``retry_seconds`` before the error goes
    to the caller. A first connection is retried only while the server says it is starting up (a wrong
    host or port fails at once). ``read_only`` sets ``default_transaction_read_only``.

    A session's writer lease is a session-level advisory lock held on this store's connection: the server
    drops it when the connection ends (process exit, SIGKILL; a vanished host after the TCP keepalives set
    on the connection give up). After a reconnect the lease is taken again, or, if another writer took it
    meanwhile, marked lost (writes to that session refused).
    """

    backend = "postgres"
    search_backend = "postgres"
    NOW = "now()"
    META_MERGE = "(meta::jsonb || ?::jsonb)::json"
    COLS = "m.id, m.position, m.role, m.content::text, m.extra::text, m.is_marker, m.marker_kind"
    META_TEXT = "(meta ->> ?)"
    ILIKE = "ILIKE"

    def __init__(
        self,
        dsn: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        read_only: bool = False,
        connect_timeout: int = 10,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        super().__init__()
        self.retry_seconds = float(retry_seconds)
        self._connected_once = False
        # Set when a retry budget was spent: the server is down, so later operations try once and fail at
        # once (the session degrades without a wait per hook) until one succeeds again.
        self._down = False
        self._pg = _psycopg()
        self.dsn = dsn
        self.busy_timeout = float(busy_timeout)
        self.read_only = read_only
        self.connect_timeout = int(connect_timeout)
        self._conn: Any = None
        self._qcache: dict[str, str] = {}
        self._where = self._safe_dsn(dsn)
        self._schema = ""
        try:
            self._reconnect(None)
            self._txn(self._migrate, write=True, check_read_only=False, op="create or migrate the schema")
        except BaseException:
            self.close()
            raise

    def _safe_dsn(self, dsn: str) -> str:
        try:
            parts = self._pg.conninfo.conninfo_to_dict(dsn)
        except Exception:
            return "PostgreSQL"
        host = parts.get("host") or parts.get("hostaddr") or "localhost"
        port = parts.get("port") or "5432"
        return (
            f"postgresql://{parts.get('user') or ''}{'@' if parts.get('user') else ''}{host}:{port}/"
            f"{parts.get('dbname') or ''}"
        )

    def describe(self) -> str:
        return self._where

    # -------------------------------------------------------------- connection

    def _connect(self) -> Any:
        pg = self._pg
        try:
            conn = pg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout)
        except pg.Error as exc:
            message = f"{self._where}: cannot connect to PostgreSQL: {' '.join(str(exc).split())}"  # one line
            if self._retryable_connect(exc):
                raise _Transient(message) from None
            raise errors.StoreError(message) from None
        try:
            self._set_up(conn)
        except pg.Error as exc:
            broken = bool(conn.closed or getattr(conn, "broken", False))
            with contextlib.suppress(Exception):
                conn.close()
            if broken or getattr(exc, "sqlstate", None) in TRANSIENT_STATES:
                raise _Transient(
                    f"{self._where}: the connection dropped while being set up ({_driver_error(exc)})"
                ) from None
            raise self._translate(exc, "set up the connection") from None
        self._connected_once = True
        return conn

    def _retryable_connect(self, exc: Exception) -> bool:
        """Whether a failed connection attempt may succeed later: the server says it is starting or stopping,
        or a store that was connected before cannot reach its server (a restart: refused for a moment)."""
        state = getattr(exc, "sqlstate", None)
        if state:
            return state in TRANSIENT_STATES
        text = str(exc).lower()
        if any(t in text for t in _TRANSIENT_TEXT):
            return True
        return self._connected_once and isinstance(exc, self._pg.OperationalError) and "authentication" not in text

    def _set_up(self, conn: Any) -> None:
        """The connection's settings, and the leases this store held taken again (after a reconnect)."""
        host, pid, _ = _this_writer()
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), set_config('application_name', %s, false)",
            (f"{int(self.busy_timeout * 1000)}ms", f"microcompact pid {pid}@{host}"[:63]),
        )
        # A writer's host that vanishes without closing its connection releases its leases within ~1 min.
        conn.execute(
            "SELECT set_config('tcp_keepalives_idle', '30', false), "
            "set_config('tcp_keepalives_interval', '10', false), "
            "set_config('tcp_keepalives_count', '3', false)"
        )
        if self.read_only:
            conn.execute("SELECT set_config('default_transaction_read_only', 'on', false)")
        row = conn.execute("SELECT current_schema()").fetchone()
        self._schema = str(row[0] or "") if row else ""
        for session_id in [s for s in self._leases if s not in self._lost]:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lease_key(session_id),)).fetchone()[0]:
                self._lost.add(session_id)
                log.error(
                    "%s: reconnected, but another writer took session %r meanwhile; this store's writes "
                    "to it are refused from now on",
                    self._where,
                    session_id,
                )
        conn.commit()

    def _reconnect(self, backoff: Backoff | None) -> Backoff | None:
        """Open the connection, retrying transient failures within ``backoff`` (started here at the first
        one); returns the backoff in use, so one outage has one budget however many times it is met."""
        while True:
            try:
                self._conn = self._connect()
                return backoff
            except _Transient as exc:
                backoff = backoff or Backoff(0.0 if self._down else self.retry_seconds)
                if not backoff.wait():
                    self._down = True
                    raise errors.StoreError(f"{exc}; gave up after retrying for {self.retry_seconds:g} s") from None

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def _txn(
        self, fn: Callable[[Any], T], write: bool, op: str = "access the store", check_read_only: bool = True
    ) -> T:
        pg = self._pg
        with self._lock:
            self._require_open()
            if write and check_read_only and self.read_only:
                raise errors.StoreReadOnly(f"{self._where}: the store is opened read-only; writes are refused")
            backoff: Backoff | None = None
            while True:
                if self._conn is None or self._conn.closed:
                    self._drop_connection()
                    backoff = self._reconnect(backoff)
                conn = self._conn
                committing, xid = False, None
                try:
                    with conn.cursor() as cur:
                        result = fn(cur)
                        if write:
                            xid = self._assigned_xid(cur)
                    committing = True
                    conn.commit()
                    self._down = False
                    return result
                except pg.Error as exc:
                    if committing and self._connection_lost(conn, exc):
                        backoff = backoff or Backoff(0.0 if self._down else self.retry_seconds)
                        if self._committed(xid, op, exc, backoff):
                            return result  # it was applied before the connection died
                        continue  # it was not: run it again on the new connection
                    backoff = self._after_error(conn, exc, op, committing, backoff)
                except BaseException:
                    self._rollback(conn)
                    raise

    def _connection_lost(self, conn: Any, exc: Exception) -> bool:
        """Whether ``exc`` is the connection failing (a server restart, a dropped link), not a SQL error: the
        connection is marked broken, or the error has no SQLSTATE (raised by the client, not the server), or
        the server said it is going away."""
        if not isinstance(exc, self._pg.OperationalError):
            return False
        state = getattr(exc, "sqlstate", None)
        return bool(conn.closed or getattr(conn, "broken", False)) or not state or state in TRANSIENT_STATES

    @staticmethod
    def _assigned_xid(cur: Any) -> int | None:
        """The transaction's id if it wrote anything (None: nothing to lose), asked before COMMIT so a COMMIT
        whose answer is lost can be looked up afterwards."""
        cur.execute("SELECT txid_current_if_assigned()")
        row = cur.fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _committed(self, xid: int | None, op: str, exc: Exception, backoff: Backoff) -> bool:
        """After the connection died during COMMIT: whether transaction ``xid`` was applied, asked on a new
        connection (``txid_status``). A transaction that wrote nothing (``xid`` None) was not."""
        pg = self._pg
        self._drop_connection()
        if xid is None:
            return False
        while True:
            self._reconnect(backoff)
            try:
                row = self._conn.execute("SELECT txid_status(%s)", (xid,)).fetchone()
                self._conn.rollback()
            except pg.OperationalError:
                self._drop_connection()
            except pg.Error:  # "transaction ID is in the future": it never reached the log
                self._rollback(self._conn)
                return False
            else:
                status = row[0] if row else None
                if status in ("committed", "aborted"):
                    log.warning("%s: %s: the connection was lost during COMMIT; it had %s", self._where, op, status)
                    return bool(status == "committed")
            if not backoff.wait():
                raise errors.StoreError(
                    f"{self._where}: {op}: the connection was lost while committing; the "
                    f"outcome of this write is unknown ({_driver_error(exc)})"
                ) from None

    def _after_error(self, conn: Any, exc: Exception, op: str, committing: bool, backoff: Backoff | None) -> Backoff:
        """After a failed transaction: the backoff to retry it with, or the error to raise. A connection lost
        outside COMMIT is retried (at once the first time, then with pauses) until the budget is spent."""
        lost = self._connection_lost(conn, exc)
        broken = lost or bool(conn.closed or getattr(conn, "broken", False))
        if broken:
            self._drop_connection()  # a connection that failed once is not used again
        else:
            self._rollback(conn)
        if broken and committing:
            raise errors.StoreError(
                f"{self._where}: {op}: the connection was lost while committing; the "
                f"outcome of this write is unknown ({_driver_error(exc)})"
            ) from None
        # Never retried once COMMIT was sent: it may have been applied (a retry would write twice).
        if committing or not lost:
            raise self._translate(exc, op) from None
        if backoff is None:
            log.warning(
                "%s: %s: connection lost (%s); reconnecting once the server answers (retrying for up to %g s)",
                self._where,
                op,
                _driver_error(exc),
                self.retry_seconds,
            )
            return Backoff(0.0 if self._down else self.retry_seconds)
        if backoff.wait():
            return backoff
        self._down = True
        raise errors.StoreError(
            f"{self._where}: {op}: the connection stayed lost after retrying for {self.retry_seconds:g} s "
            f"({_driver_error(exc)})"
        ) from None

    def _rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:
            self._drop_connection()

    def _translate(self, exc: Exception, op: str) -> errors.StoreError:
        """A user-facing error naming the server, the operation, the error class and SQLSTATE; never the
        server's text, which can quote the statement's parameters (message content, secrets)."""
        state = getattr(exc, "sqlstate", None) or ""
        text = _driver_error(exc)
        w = f"{self._where}: {op} failed"
        if state in ("55P03", "57014"):
            return errors.StoreLocked(
                f"{w}: the session or table is locked by another connection (waited "
                f"{self.busy_timeout:g} s, the lock timeout): {text}"
            )
        if state == "25006":
            return errors.StoreReadOnly(
                f"{w}: the database is read-only (read_only=True, a standby, or default_transaction_read_only): {text}"
            )
        if state == "53100":
            return errors.StoreFull(f"{w}: the PostgreSQL server's disk is full: {text}")
        if state in ("23505", "40001", "40P01"):
            return errors.StoreConflict(
                f"{w}: a write conflicts with the stored session ({text}): two writers on one session?"
            )
        if isinstance(exc, self._pg.OperationalError) and not state:
            return errors.StoreError(f"{w}: lost the connection to PostgreSQL: {text}")
        return errors.StoreError(f"{w}: {text}")

    # -------------------------------------------------------------- dialect

    def _q(self, sql: str) -> str:
        out = self._qcache.get(sql)
        if out is None:
            out = self._qcache[sql] = sql.replace("%", "%%").replace("?", "%s")
        return out

    def _ids(self, column: str) -> str:
        return f"{column} = ANY(?)"

    def _ids_param(self, ids: Sequence[Any]) -> Any:
        return [int(i) for i in ids]

    def _by_id_only(self, column: str) -> str:
        # An expression no index covers: with fresh rows (statistics not yet analyzed) the planner otherwise
        # picks the (session_id, position) WHERE state = 'active' index and scans the whole session.
        return f"({column} || '')"

    def _insert_rows(self, cur: Any, session_id: str, items: Sequence[tuple[int, _Encoded]]) -> list[int]:
        if not items:
            return []
        sql = (
            "INSERT INTO messages (session_id, position, role, content, extra, body, is_marker, marker_kind) "
            "VALUES (%s, %s, %s, %s::json, %s::json, %s, %s, %s) RETURNING id"
        )
        params = [(session_id, pos, e.role, e.content, e.extra, e.body, e.is_marker, e.kind) for pos, e in items]
        if len(params) == 1:
            cur.execute(sql, params[0])
            return [int(cur.fetchone()[0])]
        cur.executemany(sql, params, returning=True)
        ids = []
        while True:
            ids.append(int(cur.fetchone()[0]))
            if not cur.nextset():
                break
        return ids

    def _search(
        self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...], limit: int
    ) -> list[tuple[Any, ...]]:
        sql = """
            SELECT m.id, m.position, m.role, m.state,
                   ts_headline('simple', m.body, q, 'StartSel=[, StopSel=], MaxWords=24, MinWords=8, MaxFragments=2'),
                   m.absorbed_by, m.is_marker
            FROM messages m, websearch_to_tsquery('simple', %s) AS q
            WHERE m.session_id = %s AND m.state = ANY(%s) AND to_tsvector('simple', m.body) @@ q
            ORDER BY ts_rank(to_tsvector('simple', m.body), q) DESC, m.position
            LIMIT %s"""
        cur.execute(sql, (_clean_text(query), session_id, list(states), limit))
        hits: list[tuple[Any, ...]] = cur.fetchall()  # DB-API cursors are untyped
        return hits

    def close(self) -> None:
        with self._lock:
            self._leases.clear()  # the server releases them with the connection
            self._drop_connection()
            self._closed = True
