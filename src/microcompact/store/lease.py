"""Writer leases: one writer per stored session.

SQLite keeps a lease as a row of ``session_leases`` (token, host, pid, process start, expiry): a dead holder
on this host is detected by its pid and process start, others by a heartbeat expiry. PostgreSQL uses a
session-level advisory lock on the writer's connection, which the server drops with the connection.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

from .base import _SQLBase
from .codec import _timestamp
from .errors import StoreError

log = logging.getLogger("microcompact.store")

# A writer's lease on a session lapses this many seconds after its last heartbeat (sent every third of it)
# when its process cannot be checked (another host); a writer on this host that died loses it at once.
DEFAULT_LEASE_TTL = 30.0


def _process_start(pid: int) -> str:
    """When process ``pid`` started (Linux: clock ticks since boot), '' when unknown: tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return ""
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else ""


def _process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` of this host still runs and is the one that started at ``start`` (when known).

    A zombie (killed, not yet reaped) counts as dead: it can no longer write.
    """
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False  # Linux: no such process
        return _signal_zero(pid)
    except OSError:
        return _signal_zero(pid)
    fields = data[data.rfind(b")") + 2 :].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return False
    return not start or len(fields) <= 19 or fields[19].decode("ascii", "replace") == start


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True


_WRITER: dict[int, tuple[str, int, str]] = {}


def _this_writer() -> tuple[str, int, str]:
    """(host, pid, process start) of this process, as recorded with a lease; read once per process (a
    shared router takes a lease per request: reading /proc for it each time showed in the profile)."""
    pid = os.getpid()
    known = _WRITER.get(pid)
    if known is None:
        known = _WRITER[pid] = (socket.gethostname(), pid, _process_start(pid))
    return known


class _SQLiteLeases(_SQLBase):
    """Leases as rows of ``session_leases``, renewed by a heartbeat thread every ``lease_ttl / 3`` seconds."""

    path: str
    lease_ttl: float
    _has_leases: bool
    _heartbeat: threading.Thread | None
    _stop_heartbeat: threading.Event

    def _lease_row(self, cur: Any, session_id: str) -> tuple[Any, ...] | None:
        if not self._has_leases:
            return None
        row: tuple[Any, ...] | None = cur.execute(  # DB-API cursors are untyped
            "SELECT token, host, pid, pid_start, expires_at FROM session_leases WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row

    @staticmethod
    def _holder(row: tuple[Any, ...]) -> str:
        return f"pid {row[2]} on host {row[1]}"

    @staticmethod
    def _lapsed(row: tuple[Any, ...]) -> str:
        """Why a lease row no longer protects anyone ('' while its holder may still write)."""
        host, pid, start, expires = row[1], int(row[2]), str(row[3] or ""), float(row[4])
        if host == socket.gethostname() and not _process_alive(pid, start):
            return "its process is gone"
        if time.time() > expires:
            return "no heartbeat within the lease time"
        return ""

    def _take_lease(self, session_id: str, token: str) -> None:
        host, pid, start = _this_writer()

        def txn(cur: Any) -> str:
            row = self._lease_row(cur, session_id)
            why = self._lapsed(row) if row is not None else ""
            if row is not None and not why:
                raise self._busy(session_id, self._holder(row))
            now = time.time()
            cur.execute(
                "INSERT INTO session_leases (session_id, token, host, pid, pid_start, acquired_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, "
                "host = excluded.host, pid = excluded.pid, pid_start = excluded.pid_start, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                (session_id, token, host, pid, start, now, now + self.lease_ttl),
            )
            return f"{self._holder(row)}: {why}" if row is not None else ""

        taken_over = self._txn(txn, write=True, op="take the session's writer lease")
        if taken_over:
            log.warning("%s: took over the writer lease of session %r from %s", self.path, session_id, taken_over)
        self._start_heartbeat()

    def _drop_lease(self, session_id: str, token: str) -> None:
        self._txn(
            lambda cur: cur.execute(
                "DELETE FROM session_leases WHERE session_id = ? AND token = ?", (session_id, token)
            ),
            write=True,
            op="release the session's writer lease",
        )

    def _fence(self, cur: Any, session_id: str) -> None:
        row = self._lease_row(cur, session_id)
        mine = self._leases.get(session_id)
        if mine is not None:
            if row is None or row[0] != mine:
                self._lost.add(session_id)
                raise self._lost_lease(session_id)
        elif row is not None and not self._lapsed(row):
            raise self._busy(session_id, self._holder(row))

    def _start_heartbeat(self) -> None:
        if self._heartbeat is not None and self._heartbeat.is_alive():
            return
        self._stop_heartbeat.clear()
        self._heartbeat = threading.Thread(
            target=_heartbeat_loop,
            args=(weakref.ref(self), self._stop_heartbeat, self.lease_ttl / 3),
            name="microcompact-lease",
            daemon=True,
        )
        self._heartbeat.start()

    def renew_leases(self) -> None:
        """Push back the expiry of every lease this store holds (the heartbeat thread calls it); a lease
        found taken over is marked lost, so this store's writes to that session are refused."""
        with self._lock:
            if self._closed or not self._leases:
                return
            held = dict(self._leases)

            def txn(cur: Any) -> list[str]:
                lost = []
                for session_id, token in held.items():
                    cur.execute(
                        "UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND token = ?",
                        (time.time() + self.lease_ttl, session_id, token),
                    )
                    if cur.rowcount != 1:
                        lost.append(session_id)
                return lost

            try:
                lost = self._txn(txn, write=True, op="renew the session leases")
            except StoreError as exc:
                log.warning("%s: lease heartbeat failed (%s); retrying", self.path, exc)
                return
            for session_id in lost:
                if session_id not in self._lost:
                    self._lost.add(session_id)
                    log.error(
                        "%s: the writer lease of session %r was taken over by another writer; this "
                        "store's writes to it are refused from now on",
                        self.path,
                        session_id,
                    )


def _heartbeat_loop(store_ref: weakref.ref[_SQLiteLeases], stop: threading.Event, every: float) -> None:
    """Renew the store's leases until it is closed or garbage-collected (a weak reference: the thread
    never keeps a forgotten store alive)."""
    while not stop.wait(every):
        store = store_ref()
        if store is None:
            return
        store.renew_leases()
        del store


class _AdvisoryLeases(_SQLBase):
    """Leases as PostgreSQL session-level advisory locks held on the store's connection."""

    _conn: Any
    _schema: str

    def _lease_key(self, session_id: str) -> int:
        """The session's advisory lock key: 64 bits of a hash of the schema and the session id."""
        digest = hashlib.sha256(f"microcompact-lease\0{self._schema}\0{session_id}".encode("utf-8", "replace"))
        return int.from_bytes(digest.digest()[:8], "big", signed=True)

    def _take_lease(self, session_id: str, token: str) -> None:
        key = self._lease_key(session_id)

        def txn(cur: Any) -> tuple[Any, ...] | None:
            cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            if cur.fetchone()[0]:
                return None
            cur.execute(
                "SELECT a.application_name, a.client_addr::text, a.backend_start FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 "
                "AND l.pid <> pg_backend_pid() LIMIT 1",
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            )
            return cur.fetchone() or ()

        holder = self._txn(txn, write=False, op="take the session's writer lease")
        if holder is not None:
            name, addr, since = (*holder, None, None, None)[:3]
            where = f" from {addr}" if addr else ""
            when = f" since {_timestamp(since):%Y-%m-%d %H:%M:%S} UTC" if since else ""
            raise self._busy(session_id, f"{name or 'a connection'}{where}{when}")

    def _drop_lease(self, session_id: str, token: str) -> None:
        key = self._lease_key(session_id)
        if self._conn is None or self._conn.closed:
            return  # the server released it with the connection
        self._txn(
            lambda cur: cur.execute("SELECT pg_advisory_unlock(%s)", (key,)),
            write=False,
            op="release the session's writer lease",
        )

    def _fence(self, cur: Any, session_id: str) -> None:
        if session_id in self._leases:
            if session_id in self._lost:
                raise self._lost_lease(session_id)
            return  # held on this very connection (taken again after any reconnect)
        cur.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", (self._lease_key(session_id),))
        if not cur.fetchone()[0]:
            raise self._busy(session_id, "a writer holding its lease")
