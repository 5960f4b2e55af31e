"""The skeleton of a SQL store: its state, the dialect hooks a backend fills in, the helpers every
transaction uses, the writer-lease bookkeeping and the lifecycle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .codec import _Encoded
from .errors import SessionBusy, StoreError

log = logging.getLogger("microcompact.store")

DEFAULT_BUSY_TIMEOUT = 5.0
# Named locks live in the lease namespace under this prefix, which no session id a caller chooses starts
# with (a control character), so a lock never collides with a session's writer lease.
LOCK_PREFIX = "\x1block:"

T = TypeVar("T")

# Transient store errors (a PostgreSQL server restarting, a dropped connection, a SQLite database locked past
# the busy timeout) are retried with a doubling pause, from the first to the longest, for at most the store's
# ``retry_seconds`` (PostgreSQL; SQLite: its busy timeout again) before the error reaches the session, which
# then keeps its messages pending and goes on (see session_store.StoreWriter.flush).
RETRY_FIRST_PAUSE = 0.05
RETRY_LONGEST_PAUSE = 1.0
DEFAULT_RETRY_SECONDS = 30.0


class Backoff:
    """The pauses of one run of retries: doubling from RETRY_FIRST_PAUSE, never past ``seconds`` in all."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + max(0.0, seconds)
        self.pause = RETRY_FIRST_PAUSE
        self.tries = 0

    def wait(self) -> bool:
        """Sleep before the next try and return True, or return False when the budget is spent."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self.pause, left))
        self.pause = min(self.pause * 2, RETRY_LONGEST_PAUSE)
        self.tries += 1
        return True


class _SQLBase:
    """State and hooks shared by both backends; :class:`~.core._SQLStore` builds the store's API on it."""

    backend = ""
    search_backend = ""
    read_only = False
    NOW = ""
    COLS = ""  # id, position, role, content, extra, is_marker, marker_kind (of alias m)

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._leases: dict[str, str] = {}  # session id -> token of the lease this store holds
        self._lost: set[str] = set()  # leased sessions another writer took over (writes refused)
        self._token_pid, self._token_base, self._token_count = 0, "", 0

    # -------------------------------------------------------------- dialect hooks

    def _txn(self, fn: Callable[[Any], T], write: bool, op: str = "access the store") -> T:
        """Run ``fn(cursor)`` in one transaction; driver errors become StoreErrors naming ``op``."""
        raise NotImplementedError

    def _take_lease(self, session_id: str, token: str) -> None:
        """Make ``token`` the session's lease, or raise SessionBusy naming the live holder."""
        raise NotImplementedError

    def _drop_lease(self, session_id: str, token: str) -> None:
        raise NotImplementedError

    def _fence(self, cur: Any, session_id: str) -> None:
        """Inside a write transaction: refuse it when another writer holds the session's lease, or when this
        store held the lease and lost it."""
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        return sql

    def _ids(self, column: str) -> str:
        """SQL matching ``column`` against one list parameter (see :meth:`_ids_param`)."""
        raise NotImplementedError

    def _ids_param(self, ids: Sequence[Any]) -> Any:
        raise NotImplementedError

    def _by_id_only(self, column: str) -> str:
        """``column`` in a WHERE clause whose rows are found by id: the planner must not pick an index on it
        (that would scan the whole session and make a pass cost O(transcript))."""
        return column

    def _insert_rows(self, cur: Any, session_id: str, items: Sequence[tuple[int, _Encoded]]) -> list[int]:
        raise NotImplementedError

    def _search(
        self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...], limit: int
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def _translate(self, exc: Exception, op: str) -> StoreError:
        """A user-facing error for a driver error: names the database, ``op`` and the error class, never its text."""
        raise NotImplementedError

    # -------------------------------------------------------------- small helpers

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._q(sql), tuple(params))
        return cur

    def _touch_session(self, cur: Any, session_id: str, create: bool) -> bool:
        """Check the session's lease, then lock its row for this transaction (creating it if asked) and bump
        its version; False when it does not exist. Every write of a session's messages, passes and progress
        starts here, so an unchanged version means an unchanged session."""
        self._fence(cur, session_id)
        bump = f"updated_at = {self.NOW}, version = sessions.version + 1"
        if create:
            self._exec(
                cur,
                f"INSERT INTO sessions (id, version) VALUES (?, 1) ON CONFLICT (id) DO UPDATE SET {bump}",
                (session_id,),
            )
            return True
        self._exec(cur, f"UPDATE sessions SET {bump} WHERE id = ?", (session_id,))
        changed: int = cur.rowcount  # DB-API cursors are untyped; rowcount is an int in both drivers
        return changed == 1

    def _busy(self, session_id: str, holder: str) -> SessionBusy:
        return SessionBusy(
            f"{self.describe()}: session {session_id!r} is being written by another writer "
            f"({holder}); a second writer is refused so the two cannot mix. Wait for it to "
            "finish, or use another session id (a crashed writer's lease is taken over "
            "automatically)"
        )

    def _lost_lease(self, session_id: str) -> SessionBusy:
        return SessionBusy(
            f"{self.describe()}: this writer lost its lease on session {session_id!r} (it was "
            "taken over after missed heartbeats or a lost connection); its writes are refused "
            "so the two writers cannot mix. Reopen the session to continue from the store"
        )

    # -------------------------------------------------------------- leases (one writer per session)

    def acquire_lease(self, session_id: str) -> str | None:
        """Make this store the only writer of ``session_id`` until :meth:`release_lease` or :meth:`close`.

        Returns the lease's token (None on a read-only store: it writes nothing). Raises
        :class:`SessionBusy` when a live writer holds the session, including another Session on this same
        store. A lease dies with its holder: a writer process that exits or is killed loses it at once (on
        this host; PostgreSQL: with its connection); a writer on another host after ``lease_ttl`` seconds
        without a heartbeat. Readers (load, search, export) never need it.
        """
        self._check_id(session_id)
        with self._lock:
            self._require_open()
            if self.read_only:
                return None
            if session_id in self._leases:
                raise self._busy(session_id, "another Session on this same store object; close it first")
            token = self._new_token()
            self._take_lease(session_id, token)
            self._leases[session_id] = token
            self._lost.discard(session_id)
            return token

    def _new_token(self) -> str:
        """A lease token no other lease shares: random per store and process, then a counter (a random
        token per lease cost a getrandom call per request on a loaded machine)."""
        pid = os.getpid()
        if self._token_pid != pid:
            self._token_pid, self._token_base = pid, uuid.uuid4().hex[:16]
        self._token_count += 1
        return f"{self._token_base}-{self._token_count}"

    def release_lease(self, session_id: str, token: str | None = None) -> None:
        """Give up the lease (``token``: only that one); never raises: an unreleased lease lapses anyway."""
        with self._lock:
            held = self._leases.get(session_id)
            if held is None or (token is not None and token != held):
                return
            del self._leases[session_id]
            self._lost.discard(session_id)
            if self._closed:
                return
            try:
                self._drop_lease(session_id, held)
            except StoreError as exc:
                log.warning(
                    "%s: could not release the lease on session %r (%s); it lapses when this process exits",
                    self.describe(),
                    session_id,
                    exc,
                )

    # -------------------------------------------------------------- named locks (between processes)

    def try_lock(self, name: str) -> str | None:
        """Take the cross-process mutex ``name`` without waiting: its token, or None while a live holder
        (another process, or another thread of this store) has it.

        It is a writer lease on a name apart from every session id, so it dies with its holder as a lease
        does (SQLite: a dead process on this host at once, another host after ``lease_ttl``; PostgreSQL:
        with the connection) and is renewed and re-taken after a reconnect like one. A read-only store
        writes nothing and needs no lock: it returns a token at once."""
        lease_name = LOCK_PREFIX + name
        if self.read_only:
            return "read-only"
        try:
            token = self.acquire_lease(lease_name)
        except SessionBusy:
            return None
        return token

    def unlock(self, name: str, token: str | None) -> None:
        """Give up the mutex ``name`` taken with ``token`` (never raises: an unreleased one lapses)."""
        self.release_lease(LOCK_PREFIX + name, token)

    @staticmethod
    def _check_id(session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id or "\x00" in session_id:
            raise ValueError(f"session id must be a non-empty string, got {session_id!r}")

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _require_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.describe()}: the store is closed")
