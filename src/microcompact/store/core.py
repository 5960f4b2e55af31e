"""Durable session storage: every message written once, every compaction pass one small transaction.

Two backends share one schema design and one behaviour:

- :class:`SQLiteStore` (stdlib ``sqlite3``; the embedded default at ``$MICROCOMPACT_HOME/sessions.db``),
- :class:`PostgresStore` (``psycopg`` 3, imported only when this backend is used).

Nothing is ever deleted. A pass marks the rows it summarizes ``absorbed`` (pointing at the marker row that
replaced them), marks the micro marker it replaces ``superseded``, and inserts the new marker as an
``active`` row at the position of the last message it absorbed. ``load_active`` (rows in position order)
is the transcript; the absorbed originals stay searchable (``search``) and recoverable (``expand``).

Stored message dicts handed to callers carry two metadata keys (library metadata starts with ``_`` and is
stripped by :func:`microcompact.messages.to_api`): ``_pos``, the message's position, and ``_row``, its row
id. ``append`` and ``archive_and_compact`` set them on the dicts they are given (the library's own copies),
so a caller always knows what is persisted. Markers are identified by the ``is_marker``/``marker_kind``
columns and their ``_mc`` metadata is restored on load; message text never decides.

Schema (version :data:`SCHEMA_VERSION`)::

    schema_version(version)
    sessions(id TEXT PK, created_at, updated_at, meta JSON)
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
    full text: SQLite FTS5 external-content table messages_fts(body) (LIKE when FTS5 is missing),
               PostgreSQL GIN index on to_tsvector('simple', body)

``absorbed_by`` is the row that replaced a row: the marker that summarized an absorbed message, or the
marker that superseded an older marker, so the rolling summary's history is a chain that ``expand`` walks.

One writer per session: :meth:`~_SQLStore.acquire_lease` (taken by ``Session.open``) makes a store the
session's only writer until it releases the lease or closes; every write transaction of a session checks
the lease first (a write by another writer, or by one that lost its lease, raises :class:`SessionBusy`).
SQLite keeps leases in ``session_leases`` (dead holders on this host are detected by pid and process start,
others by a heartbeat expiry); PostgreSQL uses a session-level advisory lock on the writer's connection.

Errors never carry the database's own text (it can quote parameters: message content, secrets): a
:class:`StoreError` names the database, the operation that failed and the driver's error class and code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import quote

from ..config import home_dir
from ..messages import META_KEY, Message, content_text, marker_kind
from ..batch import BatchCompact, Prune
from ..micro import Absorb, Event, Rewrite

log = logging.getLogger("microcompact.store")

SCHEMA_VERSION = 1
STATES = ("active", "absorbed", "superseded")
POS_KEY = "_pos"
ROW_KEY = "_row"
STATE_KEY = "_state"  # only on export(include_absorbed=True)
ABSORBED_BY_KEY = "_absorbed_by"  # only on export(include_absorbed=True)
# Keys never written to ``extra``: stored in their own columns, or the store's own bookkeeping.
_NOT_EXTRA = frozenset({"role", "content", "_tokens", POS_KEY, ROW_KEY, STATE_KEY, ABSORBED_BY_KEY})
# Search text kept per message: head and tail of very large outputs (PostgreSQL caps a tsvector at 1 MB).
BODY_HEAD_CHARS = 60_000
BODY_TAIL_CHARS = 40_000
DEFAULT_BUSY_TIMEOUT = 5.0
# A writer's lease on a session lapses this many seconds after its last heartbeat (sent every third of it)
# when its process cannot be checked (another host); a writer on this host that died loses it at once.
DEFAULT_LEASE_TTL = 30.0

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """A store problem, phrased for the user (names the database and what is wrong)."""


class StoreConflict(StoreError):
    """The store changed under this writer: another writer on the session, or a stale in-memory view."""


class StoreLocked(StoreError):
    """Another connection held the database (or the session) for longer than the busy timeout."""


class SessionBusy(StoreError):
    """Another writer holds the session's lease (or this writer lost it): two writers would mix the session."""


class StoreReadOnly(StoreError):
    """A write to a store opened read-only or living on a read-only file or server."""


class StoreFull(StoreError):
    """The disk (or the database's size limit) is full."""


class StoreCorrupt(StoreError):
    """The file is not a SQLite database, or its contents are damaged."""


# --------------------------------------------------------------------------- the protocol


@runtime_checkable
class SessionStore(Protocol):
    """What :class:`~microcompact.session.Session` needs from a store (both backends implement it)."""

    search_backend: str

    def create_session(self, session_id: str, meta: dict[str, Any] | None = None) -> bool: ...
    def list_sessions(self) -> list[dict[str, Any]]: ...
    def load_active(self, session_id: str) -> list[Message]: ...
    def append(self, session_id: str, messages: Sequence[Message]) -> None: ...
    def archive_and_compact(self, session_id: str, event: Event, messages: Sequence[Message]) -> int: ...
    def remember_skip(self, session_id: str, key: str) -> None: ...
    def skipped(self, session_id: str) -> set[str]: ...
    def acquire_lease(self, session_id: str) -> str | None: ...
    def release_lease(self, session_id: str, token: str | None = None) -> None: ...
    def update_meta(self, session_id: str, values: dict[str, Any]) -> None: ...
    def session_meta(self, session_id: str) -> dict[str, Any]: ...
    def search(self, session_id: str, query: str, limit: int = 20, include_active: bool = False
               ) -> list[dict[str, Any]]: ...
    def expand(self, session_id: str, marker_row: int) -> list[Message]: ...
    def export(self, session_id: str, include_absorbed: bool = False) -> list[Message]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "SessionStore": ...
    def __exit__(self, *exc: Any) -> None: ...


def default_store_path() -> Path:
    """``$MICROCOMPACT_HOME/sessions.db`` (``~/.microcompact/sessions.db`` by default)."""
    return home_dir() / "sessions.db"


def open_store(url_or_path: str | Path | None = None, **options: Any) -> "SQLiteStore | PostgresStore":
    """``postgresql://...`` (or ``postgres://``) opens a :class:`PostgresStore`; anything else is a SQLite
    path (``sqlite:///`` prefix allowed); None is :func:`default_store_path`. ``options`` go to the backend.
    """
    if url_or_path is None:
        return SQLiteStore(None, **options)
    text = str(url_or_path)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresStore(text, **options)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):] if text.startswith("sqlite:////") else text[len("sqlite://"):]
    return SQLiteStore(text, **options)


# --------------------------------------------------------------------------- writer identity (leases)


def _process_start(pid: int) -> str:
    """When process ``pid`` started (Linux: clock ticks since boot), '' when unknown: tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return ""
    fields = data[data.rfind(b")") + 2:].split()
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
    fields = data[data.rfind(b")") + 2:].split()
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


def _this_writer() -> tuple[str, int, str]:
    """(host, pid, process start) of this process, as recorded with a lease."""
    pid = os.getpid()
    return socket.gethostname(), pid, _process_start(pid)


def _driver_error(exc: BaseException) -> str:
    """What a driver error may say in our messages and logs: its class and code, never its text (a database's
    error text can quote the statement's parameters: message content, secrets)."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "sqlite_errorname", None) or \
        getattr(exc, "sqlite_errorcode", None)
    return f"{type(exc).__module__.split('.')[0]}.{type(exc).__name__}" + (f" {code}" if code else "")


# --------------------------------------------------------------------------- encoding


def _json(value: Any, what: str) -> str:
    """Compact JSON; text that is not valid Unicode (lone surrogates) is stored with '?' in their place."""
    try:
        out = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serializable: {exc}") from None
    return _valid_utf8(out)


def _valid_utf8(text: str) -> str:
    """``text`` with lone surrogates (not encodable, so not storable) replaced by ``?``."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _clean_text(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", " ")  # PostgreSQL text cannot hold NUL
    return _valid_utf8(text)


def search_text(message: Message) -> str:
    """What full-text search sees of a message: content text, tool call names and arguments, ``name``."""
    parts = [content_text(message)]
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if isinstance(fn, dict):
            parts.append(str(fn.get("name") or ""))
            args = fn.get("arguments")
            parts.append(args if isinstance(args, str) else json.dumps(args, default=str) if args else "")
    if isinstance(message.get("name"), str):
        parts.append(message["name"])
    text = "\n".join(p for p in parts if p)
    if len(text) > BODY_HEAD_CHARS + BODY_TAIL_CHARS:
        text = text[:BODY_HEAD_CHARS] + "\n…\n" + text[-BODY_TAIL_CHARS:]
    return _clean_text(text)


class _Encoded:
    """One message as column values."""

    __slots__ = ("role", "content", "extra", "body", "is_marker", "kind")

    def __init__(self, message: Message, where: str) -> None:
        if not isinstance(message, dict):
            raise ValueError(f"{where}: expected a message dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where}: a message needs a role")
        self.role = role
        self.content = _json(message["content"], f"{where}: content") if "content" in message else None
        extra = {k: v for k, v in message.items() if k not in _NOT_EXTRA}
        self.extra = _json(extra, f"{where}: metadata") if extra else "{}"
        self.body = search_text(message)
        self.kind = marker_kind(message)
        self.is_marker = self.kind is not None


def _decode(row_id: int, position: int, role: str, content: str | None, extra: str | None, is_marker: Any,
            kind: str | None) -> Message:
    msg: Message = {"role": role}
    if content is not None:
        msg["content"] = json.loads(content)
    if extra and extra != "{}":
        msg.update(json.loads(extra))
    if is_marker:
        meta = msg.get(META_KEY)
        msg[META_KEY] = {**meta, "marker": kind} if isinstance(meta, dict) else {"marker": kind}
    msg[POS_KEY] = int(position)
    msg[ROW_KEY] = int(row_id)
    return msg


def _row_of(message: Any, where: str) -> int:
    row = message.get(ROW_KEY) if isinstance(message, dict) else None
    if not isinstance(row, int) or isinstance(row, bool):
        raise ValueError(f"{where} was never stored (it has no {ROW_KEY}): flush it with append() first")
    return row


def _timestamp(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    text = str(value)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORD = re.compile(r"\w", re.UNICODE)


def _query_terms(query: str) -> list[str]:
    """Search terms: "quoted phrases" and bare words; terms without a letter or digit are dropped."""
    out = []
    for phrase, word in _TERM.findall(query or ""):
        term = (phrase or word).strip()
        if term and _WORD.search(term):
            out.append(term)
    return out


def _snippet(body: str, terms: Sequence[str], width: int = 80) -> str:
    """A window of ``body`` around the first term found, the term in brackets (LIKE fallback)."""
    low = body.lower()
    for t in terms:
        i = low.find(t.lower())
        if i >= 0:
            start, end = max(0, i - width // 2), min(len(body), i + len(t) + width // 2)
            text = body[start:i] + "[" + body[i:i + len(t)] + "]" + body[i + len(t):end]
            return ("…" if start else "") + " ".join(text.split()) + ("…" if end < len(body) else "")
    return " ".join(body[:width].split())


# --------------------------------------------------------------------------- shared implementation


class _SQLStore:
    """Everything both backends do the same way; subclasses supply the connection and dialect."""

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

    def _search(self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...],
                limit: int) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    # -------------------------------------------------------------- small helpers

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._q(sql), tuple(params))
        return cur

    def _touch_session(self, cur: Any, session_id: str, create: bool) -> bool:
        """Check the session's lease, then lock its row for this transaction (creating it if asked); False
        when it does not exist. Every write of a session's messages, passes and progress starts here."""
        self._fence(cur, session_id)
        if create:
            self._exec(cur, f"INSERT INTO sessions (id) VALUES (?) ON CONFLICT (id) DO UPDATE "
                            f"SET updated_at = {self.NOW}", (session_id,))
            return True
        self._exec(cur, f"UPDATE sessions SET updated_at = {self.NOW} WHERE id = ?", (session_id,))
        return cur.rowcount == 1

    def _busy(self, session_id: str, holder: str) -> SessionBusy:
        return SessionBusy(f"{self.describe()}: session {session_id!r} is being written by another writer "
                           f"({holder}); a second writer is refused so the two cannot mix. Wait for it to "
                           "finish, or use another session id (a crashed writer's lease is taken over "
                           "automatically)")

    def _lost_lease(self, session_id: str) -> SessionBusy:
        return SessionBusy(f"{self.describe()}: this writer lost its lease on session {session_id!r} (it was "
                           "taken over after missed heartbeats or a lost connection); its writes are refused "
                           "so the two writers cannot mix. Reopen the session to continue from the store")

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
            token = uuid.uuid4().hex
            self._take_lease(session_id, token)
            self._leases[session_id] = token
            self._lost.discard(session_id)
            return token

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
                log.warning("%s: could not release the lease on session %r (%s); it lapses when this process "
                            "exits", self.describe(), session_id, exc)

    @staticmethod
    def _check_id(session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id or "\x00" in session_id:
            raise ValueError(f"session id must be a non-empty string, got {session_id!r}")

    # -------------------------------------------------------------- sessions

    def create_session(self, session_id: str, meta: dict[str, Any] | None = None) -> bool:
        """Create the session if it does not exist (idempotent; an existing session keeps its meta).

        Returns True when it was created.
        """
        self._check_id(session_id)
        meta_json = _json(meta or {}, "session meta")

        def txn(cur: Any) -> bool:
            self._exec(cur, "INSERT INTO sessions (id, meta) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                       (session_id, meta_json))
            return cur.rowcount == 1

        return self._txn(txn, write=True, op="create the session")

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every session, oldest first: id, created_at, updated_at, meta, counts by state, active markers."""
        meta = "s.meta" if self.backend == "sqlite" else "s.meta::text"
        sql = f"""
            SELECT s.id, s.created_at, s.updated_at, {meta},
                   COALESCE(SUM(CASE WHEN m.state = 'active' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'absorbed' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'superseded' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN m.state = 'active' AND m.is_marker THEN 1 ELSE 0 END), 0)
            FROM sessions s LEFT JOIN messages m ON m.session_id = s.id
            GROUP BY s.id
            ORDER BY s.created_at, s.id"""
        rows = self._txn(lambda cur: self._exec(cur, sql).fetchall(), write=False, op="list the sessions")
        return [{"id": r[0], "created_at": _timestamp(r[1]), "updated_at": _timestamp(r[2]),
                 "meta": json.loads(r[3]) if r[3] else {},
                 "counts": {"active": int(r[4]), "absorbed": int(r[5]), "superseded": int(r[6])},
                 "markers": int(r[7])} for r in rows]

    # -------------------------------------------------------------- messages

    def load_active(self, session_id: str) -> list[Message]:
        """The session's transcript: its active rows in position order (empty for an unknown session)."""
        sql = f"SELECT {self.COLS} FROM messages m WHERE m.session_id = ? AND m.state = 'active' ORDER BY m.position"
        rows = self._txn(lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False, op="load the session")
        return [_decode(*r) for r in rows]

    def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Write ``messages`` after the session's last position, in one transaction (creates the session).

        Sets ``_pos`` and ``_row`` on each given dict once the transaction has committed (a documented
        mutation: these are the library's own copies). A message that already has ``_row`` is rejected
        with ValueError, before anything is written: each message is written once.
        """
        self._check_id(session_id)
        msgs = list(messages)
        if not msgs:
            return
        seen: set[int] = set()
        for i, m in enumerate(msgs):
            if isinstance(m, dict) and ROW_KEY in m:
                raise ValueError(f"message {i} is already stored (row {m[ROW_KEY]}); each message is "
                                 "written once")
            if id(m) in seen:
                raise ValueError(f"message {i} appears twice in one append")
            seen.add(id(m))
        encoded = [_Encoded(m, f"message {i}") for i, m in enumerate(msgs)]

        def txn(cur: Any) -> tuple[int, list[int]]:
            self._touch_session(cur, session_id, create=True)
            top = self._exec(cur, "SELECT MAX(position) FROM messages WHERE session_id = ?",
                             (session_id,)).fetchone()[0]
            start = 0 if top is None else int(top) + 1
            ids = self._insert_rows(cur, session_id, [(start + i, e) for i, e in enumerate(encoded)])
            return start, ids

        start, ids = self._txn(txn, write=True, op="append messages")
        for i, (m, row) in enumerate(zip(msgs, ids)):
            m[POS_KEY] = start + i
            m[ROW_KEY] = row

    # -------------------------------------------------------------- compaction events

    def archive_and_compact(self, session_id: str, event: Event, messages: Sequence[Message]) -> int:
        """Persist a compaction event in one transaction, before the caller applies it in memory.

        ``Absorb``: ``messages[i]`` for i in ``event.absorbed`` become 'absorbed' (pointing at the new
        marker), the replaced micro marker (``messages[event.removed_marker]``) becomes 'superseded', and
        ``event.marker`` is inserted as an active row at the position of the last absorbed message (kept
        user messages inside the span have smaller positions and stay before it). ``Rewrite``: the marker
        at ``messages[event.index]`` is superseded by ``event.marker`` at the same position.

        Raises ValueError when a referenced message was never stored (flush with :meth:`append` first) or
        the marker was already stored, and :class:`StoreConflict` when a referenced row is no longer active
        (another writer on this session, or a stale in-memory view); nothing is written then. On success
        ``_pos`` and ``_row`` are set on ``event.marker``. Returns the number of message rows written
        (updated or inserted): proportional to the event, never to the transcript.
        """
        self._check_id(session_id)
        if isinstance(event, (Prune, BatchCompact)):
            return self._archive_batch(session_id, event, messages)
        if isinstance(event, Absorb):
            if not event.absorbed:
                raise ValueError("Absorb event absorbs no message")
            absorbed = [messages[i] for i in event.absorbed]
            replaced = [messages[event.removed_marker]] if event.removed_marker is not None else []
            absorb_rows = [_row_of(m, f"message {i}") for i, m in zip(event.absorbed, absorbed)]
            supersede_rows = [_row_of(m, f"marker {event.removed_marker}") for m in replaced]
            anchor = absorb_rows[-1]
            expect = absorbed + replaced
        elif isinstance(event, Rewrite):
            replaced = [messages[event.index]]
            absorb_rows = []
            supersede_rows = [_row_of(replaced[0], f"marker {event.index}")]
            anchor = supersede_rows[0]
            expect = replaced
        else:
            raise TypeError(f"unknown compaction event {type(event).__name__}")
        marker = event.marker
        if not isinstance(marker, dict) or ROW_KEY in marker:
            raise ValueError("the event's marker is already stored; build a new marker message")
        rows = absorb_rows + supersede_rows
        if len(set(rows)) != len(rows):
            raise ValueError("the event references the same stored row twice")
        expected_pos = {_row_of(m, "message"): m.get(POS_KEY) for m in expect}

        def txn(cur: Any) -> tuple[int, int, list[int]]:
            if not self._touch_session(cur, session_id, create=False):
                raise StoreConflict(f"{self.describe()}: session {session_id!r} does not exist")
            found = self._lock_rows(cur, session_id, rows, expected_pos, markers=supersede_rows)
            position = found[anchor]
            written, ids = self._apply(cur, session_id, absorb=absorb_rows,
                                       supersede=[(r, 0) for r in supersede_rows], insert=[(position, marker)])
            return written, position, ids

        written, position, ids = self._txn(txn, write=True, op="store a micro-compaction pass")
        marker[POS_KEY] = position
        marker[ROW_KEY] = ids[0]
        return written

    def _archive_batch(self, session_id: str, event: Prune | BatchCompact, messages: Sequence[Message]) -> int:
        """Batch compaction's events, through the same generic write.

        ``Prune``: each replaced message (an old tool output, a call with oversized arguments) is absorbed by
        its stub, inserted at the same position, so the original stays searchable and expandable.
        ``BatchCompact``: the middle's non-user rows (old markers included) are absorbed by the new batch
        marker; its user rows are superseded by the joined user message; the new rows take the lowest
        positions the middle frees, in order.
        """
        if isinstance(event, Prune):
            pairs = [(_row_of(messages[i], f"message {i}"), new) for i, new in event.replacements]
            rows = [r for r, _ in pairs]
            inserted = [new for _, new in pairs]
        else:
            absorb_rows = [_row_of(messages[i], f"message {i}") for i in event.absorbed]
            user_rows = [_row_of(messages[i], f"message {i}") for i in event.superseded]
            rows = absorb_rows + user_rows
            inserted = list(event.new)
        if any(not isinstance(m, dict) or ROW_KEY in m for m in inserted):
            raise ValueError("the event's new messages are already stored; build new message dicts")
        if len(set(rows)) != len(rows):
            raise ValueError("the event references the same stored row twice")
        indexes = [i for i, _ in event.replacements] if isinstance(event, Prune) else \
            list(event.absorbed) + list(event.superseded)
        expected_pos = {_row_of(messages[i], "message"): messages[i].get(POS_KEY) for i in indexes}

        def txn(cur: Any) -> tuple[int, list[int], list[int]]:
            if not self._touch_session(cur, session_id, create=False):
                raise StoreConflict(f"{self.describe()}: session {session_id!r} does not exist")
            found = self._lock_rows(cur, session_id, rows, expected_pos)
            if isinstance(event, Prune):
                written, ids, positions = 0, [], []
                for row, new in pairs:
                    n, new_ids = self._apply(cur, session_id, absorb=[row], insert=[(found[row], new)])
                    written, ids, positions = written + n, ids + new_ids, positions + [found[row]]
                return written, ids, positions
            positions = sorted(found.values())[:len(inserted)]
            marker_at = len(inserted) - 1
            written, ids = self._apply(cur, session_id, absorb=absorb_rows,
                                       supersede=[(r, 0) for r in user_rows] if user_rows else [],
                                       insert=list(zip(positions, inserted)), absorbed_by=marker_at)
            return written, ids, positions

        written, ids, positions = self._txn(txn, write=True, op="store a batch compaction")
        for m, row, pos in zip(inserted, ids, positions):
            m[POS_KEY], m[ROW_KEY] = pos, row
        return written

    def _lock_rows(self, cur: Any, session_id: str, rows: Sequence[int], expected_pos: dict[int, Any],
                   markers: Sequence[int] = ()) -> dict[int, int]:
        """Check (inside the writer's transaction) that ``rows`` are active rows of the session at the
        positions the caller believes; ``markers`` must be marker rows. Returns row -> position."""
        sql = f"SELECT id, session_id, position, state, is_marker FROM messages WHERE {self._ids('id')}"
        found = {int(r[0]): r for r in self._exec(cur, sql, (self._ids_param(rows),)).fetchall()}
        where = self.describe()
        for row in rows:
            r = found.get(row)
            if r is None or r[1] != session_id:
                raise StoreConflict(f"{where}: row {row} is not a message of session {session_id!r} "
                                    "(stale in-memory view?)")
            if r[3] != "active":
                raise StoreConflict(f"{where}: row {row} of session {session_id!r} is already {r[3]}: another "
                                    "writer compacted this session, or the in-memory transcript is stale")
            exp = expected_pos.get(row)
            if exp is not None and int(exp) != int(r[2]):
                raise StoreConflict(f"{where}: row {row} is at position {r[2]} in the store but {exp} in memory "
                                    "(stale in-memory view)")
        for row in markers:
            if not found[row][4]:
                raise StoreConflict(f"{where}: row {row} is not a marker; refusing to supersede it")
        return {row: int(found[row][2]) for row in rows}

    def _apply(self, cur: Any, session_id: str, *, absorb: Sequence[int] = (),
               supersede: Sequence[tuple[int, int]] = (), insert: Sequence[tuple[int, Message]] = (),
               absorbed_by: int = 0) -> tuple[int, list[int]]:
        """The generic write of any compaction event, inside the caller's transaction.

        ``absorb``: rows summarized away ('absorbed', ``absorbed_by`` -> the inserted row ``insert[absorbed_by]``).
        ``supersede``: (row, i) pairs, rows replaced by the inserted row ``insert[i]`` ('superseded'): old
        markers, or user rows replaced by one joined user message in a future batch event.
        ``insert``: (position, message) pairs inserted as active rows (the positions must be free once the
        rows above left the active state). The caller has locked the session and validated the rows.
        Statements: one UPDATE per target state, one INSERT per new row, one UPDATE per replacing row.
        Returns (message rows written, ids of the inserted rows in ``insert`` order).
        """
        encoded = [(pos, _Encoded(m, f"inserted message {i}")) for i, (pos, m) in enumerate(insert)]
        for state, ids in (("absorbed", list(absorb)), ("superseded", [r for r, _ in supersede])):
            if not ids:
                continue
            self._exec(cur, f"UPDATE messages SET state = ?, updated_at = {self.NOW} WHERE {self._ids('id')} "
                            f"AND {self._by_id_only('session_id')} = ? AND {self._by_id_only('state')} = 'active'",
                       (state, self._ids_param(ids), session_id))
            if cur.rowcount != len(ids):
                raise StoreConflict(f"{self.describe()}: rows of session {session_id!r} changed during the "
                                    "transaction")
        new_ids = self._insert_rows(cur, session_id, encoded)
        links: dict[int, list[int]] = {}
        if absorb:
            links.setdefault(new_ids[absorbed_by], []).extend(absorb)
        for row, i in supersede:
            links.setdefault(new_ids[i], []).append(row)
        for new_id, rows in links.items():
            self._exec(cur, f"UPDATE messages SET absorbed_by = ? WHERE {self._ids('id')}",
                       (new_id, self._ids_param(rows)))
        return len(absorb) + len(supersede) + len(encoded), new_ids

    # -------------------------------------------------------------- skip memory

    def remember_skip(self, session_id: str, key: str) -> None:
        """Remember that the exchange ``key`` was skipped (idempotent; creates the session)."""
        self._check_id(session_id)

        def txn(cur: Any) -> None:
            self._touch_session(cur, session_id, create=True)
            self._exec(cur, "INSERT INTO skipped_exchanges (session_id, key) VALUES (?, ?) "
                            "ON CONFLICT (session_id, key) DO NOTHING", (session_id, _clean_text(str(key))))

        self._txn(txn, write=True, op="remember a skipped exchange")

    def skipped(self, session_id: str) -> set[str]:
        sql = "SELECT key FROM skipped_exchanges WHERE session_id = ?"
        rows = self._txn(lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False,
                         op="read the skipped exchanges")
        return {r[0] for r in rows}

    # -------------------------------------------------------------- session progress (meta)

    META_MERGE = ""  # SQL merging a JSON object parameter into sessions.meta

    def update_meta(self, session_id: str, values: dict[str, Any]) -> None:
        """Merge ``values`` into the session's meta (creates the session): one small UPDATE."""
        self._check_id(session_id)
        patch = _json(values, "session meta")

        def txn(cur: Any) -> None:
            self._touch_session(cur, session_id, create=True)
            self._exec(cur, f"UPDATE sessions SET meta = {self.META_MERGE} WHERE id = ?", (patch, session_id))

        self._txn(txn, write=True, op="update the session's progress")

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The session's meta ({} for an unknown session)."""
        sql = f"SELECT {'meta' if self.backend == 'sqlite' else 'meta::text'} FROM sessions WHERE id = ?"
        rows = self._txn(lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False,
                         op="read the session's progress")
        return json.loads(rows[0][0]) if rows and rows[0][0] else {}

    # -------------------------------------------------------------- recall

    def search(self, session_id: str, query: str, limit: int = 20, include_active: bool = False
               ) -> list[dict[str, Any]]:
        """Full-text search over the session's absorbed originals (plus active rows with ``include_active``).

        Terms are words and "quoted phrases"; a hit contains all of them. Each hit: ``row``, ``position``,
        ``role``, ``state``, ``snippet`` (matches in [brackets]), ``absorbed_by``, ``is_marker``. Best
        matches first. Superseded markers are never returned.
        """
        query = _clean_text(query or "")
        terms = _query_terms(query)
        if not terms or limit <= 0:
            return []
        states = ("absorbed", "active") if include_active else ("absorbed",)
        rows = self._txn(lambda cur: self._search(cur, session_id, terms, query, states, int(limit)), write=False,
                         op="search the session")
        return [{"row": int(r[0]), "position": int(r[1]), "role": r[2], "state": r[3], "snippet": r[4],
                 "absorbed_by": None if r[5] is None else int(r[5]), "is_marker": bool(r[6])} for r in rows]

    def expand(self, session_id: str, marker_row: int) -> list[Message]:
        """The originals a marker stands for, in position order: what it absorbed, and what every marker
        it superseded (transitively) absorbed. For the latest micro marker that is everything the rolling
        summary covers. Raises ValueError when ``marker_row`` is not a marker of the session."""
        check = "SELECT is_marker FROM messages WHERE id = ? AND session_id = ?"
        sql = f"""
            WITH RECURSIVE chain(id) AS (
                SELECT CAST(? AS BIGINT)
                UNION
                SELECT c.id FROM messages c JOIN chain ON c.absorbed_by = chain.id
                WHERE c.is_marker AND c.session_id = ?
            )
            SELECT {self.COLS} FROM chain JOIN messages m ON m.absorbed_by = chain.id
            WHERE m.session_id = ? AND m.state = 'absorbed' AND NOT m.is_marker
            ORDER BY m.position, m.id"""

        def txn(cur: Any) -> list[tuple[Any, ...]] | None:
            r = self._exec(cur, check, (int(marker_row), session_id)).fetchone()
            if r is None or not r[0]:
                return None
            return self._exec(cur, sql, (int(marker_row), session_id, session_id)).fetchall()

        rows = self._txn(txn, write=False, op="expand a marker")
        if rows is None:
            raise ValueError(f"row {marker_row} is not a marker of session {session_id!r}")
        return [_decode(*r) for r in rows]

    def export(self, session_id: str, include_absorbed: bool = False) -> list[Message]:
        """The active transcript; with ``include_absorbed`` every row ever written, in position order (an
        absorbed message comes before the marker placed at its position), each with ``_state`` and, when
        replaced, ``_absorbed_by``."""
        if not include_absorbed:
            return self.load_active(session_id)
        sql = (f"SELECT {self.COLS}, m.state, m.absorbed_by FROM messages m WHERE m.session_id = ? "
               "ORDER BY m.position, m.id")
        out = []
        rows = self._txn(lambda cur: self._exec(cur, sql, (session_id,)).fetchall(), write=False,
                         op="export the session")
        for r in rows:
            msg = _decode(*r[:7])
            msg[STATE_KEY] = r[7]
            if r[8] is not None:
                msg[ABSORBED_BY_KEY] = int(r[8])
            out.append(msg)
        return out

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


# --------------------------------------------------------------------------- SQLite

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
]
_FTS_DDL = "CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='messages', content_rowid='id')"
_OUR_TABLES = {"schema_version", "sessions", "messages", "skipped_exchanges"}
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


class SQLiteStore(_SQLStore):
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

    def __init__(self, path: str | Path | None = None, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
                 read_only: bool = False, fts: bool = True, lease_ttl: float = DEFAULT_LEASE_TTL) -> None:
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
                conn = sqlite3.connect(target, uri=True, timeout=self.busy_timeout, isolation_level=None,
                                       check_same_thread=False)
            else:
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                       check_same_thread=False)
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
            raise StoreError(f"{self.path}: cannot create its directory: {exc.strerror or exc}") from None
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass  # an existing database keeps its mode
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the database file: {exc.strerror or exc}") from None

    def _setup(self, want_fts: bool) -> None:
        conn = self._conn
        assert conn is not None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            if not self.read_only and self.path != ":memory:":
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    log.warning("%s: WAL journal mode unavailable (got %s); concurrent readers will block",
                                self.path, mode)
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise self._translate(exc, "set up the connection") from None
        version = self._version(conn, names)
        if version < SCHEMA_VERSION:
            if self.read_only:
                raise StoreReadOnly(f"{self.path}: the store is opened read-only but its schema needs "
                                    f"{'creating' if version == 0 else 'migrating'} (version {version} -> "
                                    f"{SCHEMA_VERSION})")
            self._txn(self._migrate, write=True, op="create or migrate the schema")
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        self._setup_fts(want_fts, "messages_fts" in names)
        self._has_leases = "session_leases" in names
        if not self._has_leases and not self.read_only:
            self._txn(lambda cur: cur.execute(_LEASES_DDL), write=True, op="create the lease table")
            self._has_leases = True

    def _version(self, cur: Any, names: set[str]) -> int:
        if "schema_version" in names:
            try:
                row = cur.execute("SELECT MAX(version) FROM schema_version").fetchone()
            except sqlite3.Error as exc:
                raise self._translate(exc, "read the schema version") from None
            version = int(row[0] or 0)
        elif names & _OUR_TABLES:
            raise StoreError(f"{self.path}: a SQLite database but not a microcompact store (it has tables "
                             f"{', '.join(sorted(names & _OUR_TABLES))} but no schema_version)")
        else:
            version = 0
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema version {version} is newer than this microcompact "
                             f"supports (version {SCHEMA_VERSION}); upgrade microcompact to open it")
        return version

    def _migrate(self, cur: Any) -> None:
        names = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        version = self._version(cur, names)  # re-read under the write lock: another process may have migrated
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in _SQLITE_MIGRATIONS[target - 1]:
                cur.execute(stmt)
            cur.execute("DELETE FROM schema_version")
            cur.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))
            log.info("%s: store schema migrated to version %d", self.path, target)

    def _setup_fts(self, want: bool, exists: bool) -> None:
        available = sqlite_has_fts5()
        if exists and not available:
            raise StoreError(f"{self.path}: the store has an FTS5 search index but this Python's SQLite "
                             f"({sqlite3.sqlite_version}) was built without FTS5")
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
            why = ("this SQLite was built without FTS5" if not available else
                   "the store was created without it" + (" and is opened read-only" if self.read_only else ""))
            log.warning("%s: full-text search index unavailable (%s); search() falls back to LIKE "
                        "(substring match, no ranking, slower)", self.path, why)

    # -------------------------------------------------------------- transactions and errors

    def _txn(self, fn: Callable[[Any], T], write: bool, op: str = "access the store") -> T:
        with self._lock:
            self._require_open()
            if write and self.read_only:
                raise StoreReadOnly(f"{self.path}: the store is opened read-only; writes are refused")
            conn = self._conn
            assert conn is not None
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = fn(conn.cursor())
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            except sqlite3.Error as exc:
                raise self._translate(exc, op) from None
            return result

    def _translate(self, exc: sqlite3.Error, op: str) -> StoreError:
        """A user-facing error naming the database, the operation and the error class (never its text)."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        low = str(exc).lower()
        text = _driver_error(exc)
        p = f"{self.path}: {op} failed"
        if primary in (5, 6) or "database is locked" in low:
            return StoreLocked(f"{p}: the database is locked by another connection (waited "
                               f"{self.busy_timeout:g} s, the busy timeout): {text}")
        if primary == 8 or "readonly" in low or "read-only" in low:
            return StoreReadOnly(f"{p}: the database is read-only (file permissions, a read-only mount or "
                                 f"read_only=True): {text}")
        if primary == 13 or "disk is full" in low:
            return StoreFull(f"{p}: the disk or the database size limit is full: {text}")
        if primary == 26 or "not a database" in low:
            return StoreCorrupt(f"{p}: not a SQLite database ({text})")
        if primary == 11 or "malformed" in low:
            return StoreCorrupt(f"{p}: the database file is corrupt ({text})")
        if primary == 19:
            return StoreConflict(f"{p}: a write conflicts with the stored session ({text}): two writers on "
                                 "one session?")
        if primary == 14:
            return StoreError(f"{p}: cannot open the database file ({text})")
        if primary == 10:
            return StoreError(f"{p}: disk I/O error ({text})")
        return StoreError(f"{p}: {text}")

    # -------------------------------------------------------------- dialect

    def _ids(self, column: str) -> str:
        return f"{column} IN (SELECT value FROM json_each(?))"

    def _ids_param(self, ids: Sequence[Any]) -> Any:
        return json.dumps([int(i) for i in ids])

    def _by_id_only(self, column: str) -> str:
        return "+" + column  # unary plus: SQLite will not use an index for this term

    def _insert_rows(self, cur: Any, session_id: str, items: Sequence[tuple[int, _Encoded]]) -> list[int]:
        sql = ("INSERT INTO messages (session_id, position, role, content, extra, body, is_marker, marker_kind) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        ids = []
        for pos, e in items:
            cur.execute(sql, (session_id, pos, e.role, e.content, e.extra, e.body, int(e.is_marker), e.kind))
            ids.append(int(cur.lastrowid))
        if self._fts and ids:
            cur.executemany("INSERT INTO messages_fts (rowid, body) VALUES (?, ?)",
                            [(i, e.body) for i, (_, e) in zip(ids, items)])
        return ids

    def _search(self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...],
                limit: int) -> list[tuple[Any, ...]]:
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
            return cur.execute(sql, (match, session_id, json.dumps(states), limit)).fetchall()
        likes = " AND ".join("m.body LIKE ? ESCAPE '\\'" for _ in terms)
        patterns = ["%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t in terms]
        sql = f"""
            SELECT m.id, m.position, m.role, m.state, m.body, m.absorbed_by, m.is_marker
            FROM messages m WHERE m.session_id = ? AND {state_sql} AND {likes}
            ORDER BY m.position LIMIT ?"""
        rows = cur.execute(sql, (session_id, json.dumps(states), *patterns, limit)).fetchall()
        return [(r[0], r[1], r[2], r[3], _snippet(r[4], terms), r[5], r[6]) for r in rows]

    # -------------------------------------------------------------- leases

    def _lease_row(self, cur: Any, session_id: str) -> tuple[Any, ...] | None:
        if not self._has_leases:
            return None
        return cur.execute("SELECT token, host, pid, pid_start, expires_at FROM session_leases WHERE session_id = ?",
                           (session_id,)).fetchone()

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
            cur.execute("INSERT INTO session_leases (session_id, token, host, pid, pid_start, acquired_at, expires_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, "
                        "host = excluded.host, pid = excluded.pid, pid_start = excluded.pid_start, "
                        "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                        (session_id, token, host, pid, start, now, now + self.lease_ttl))
            return f"{self._holder(row)}: {why}" if row is not None else ""

        taken_over = self._txn(txn, write=True, op="take the session's writer lease")
        if taken_over:
            log.warning("%s: took over the writer lease of session %r from %s", self.path, session_id, taken_over)
        self._start_heartbeat()

    def _drop_lease(self, session_id: str, token: str) -> None:
        self._txn(lambda cur: cur.execute("DELETE FROM session_leases WHERE session_id = ? AND token = ?",
                                          (session_id, token)), write=True, op="release the session's writer lease")

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
        self._heartbeat = threading.Thread(target=_heartbeat_loop, args=(weakref.ref(self), self._stop_heartbeat,
                                                                          self.lease_ttl / 3),
                                           name="microcompact-lease", daemon=True)
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
                    cur.execute("UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND token = ?",
                                (time.time() + self.lease_ttl, session_id, token))
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
                    log.error("%s: the writer lease of session %r was taken over by another writer; this "
                              "store's writes to it are refused from now on", self.path, session_id)

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
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
                self._conn = None
            self._closed = True


def _heartbeat_loop(store_ref: "weakref.ref[SQLiteStore]", stop: threading.Event, every: float) -> None:
    """Renew the store's leases until it is closed or garbage-collected (a weak reference: the thread
    never keeps a forgotten store alive)."""
    while not stop.wait(every):
        store = store_ref()
        if store is None:
            return
        store.renew_leases()
        del store


# --------------------------------------------------------------------------- PostgreSQL

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
]
_PG_MIGRATION_LOCK = 0x6D6963726F  # pg_advisory_xact_lock key: one migrator at a time


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("the PostgreSQL store needs psycopg 3: pip install 'microcompact[postgres]'") from None
    return psycopg


class PostgresStore(_SQLStore):
    """The PostgreSQL store (psycopg 3, autocommit off, explicit transactions).

    Writers on one session are serialized by a row lock on the session (taken first in every write), so a
    concurrent conflicting archive raises :class:`StoreConflict`. ``busy_timeout`` (seconds) becomes the
    connection's ``lock_timeout`` (:class:`StoreLocked` after it). A dropped connection (server restart) is
    reconnected once and the transaction retried, unless it dropped during COMMIT (outcome unknown: a
    :class:`StoreError` says so). ``read_only`` sets ``default_transaction_read_only``.

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

    def __init__(self, dsn: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, read_only: bool = False,
                 connect_timeout: int = 10) -> None:
        super().__init__()
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
            self._conn = self._connect()
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
        return f"postgresql://{parts.get('user') or ''}{'@' if parts.get('user') else ''}{host}:{port}/" \
               f"{parts.get('dbname') or ''}"

    def describe(self) -> str:
        return self._where

    # -------------------------------------------------------------- connection

    def _connect(self) -> Any:
        pg = self._pg
        try:
            conn = pg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout)
        except pg.Error as exc:
            raise StoreError(f"{self._where}: cannot connect to PostgreSQL: {str(exc).strip()}") from None
        host, pid, _ = _this_writer()
        try:
            conn.execute("SELECT set_config('lock_timeout', %s, false), set_config('application_name', %s, false)",
                         (f"{int(self.busy_timeout * 1000)}ms", f"microcompact pid {pid}@{host}"[:63]))
            # A writer's host that vanishes without closing its connection releases its leases within ~1 min.
            conn.execute("SELECT set_config('tcp_keepalives_idle', '30', false), "
                         "set_config('tcp_keepalives_interval', '10', false), "
                         "set_config('tcp_keepalives_count', '3', false)")
            if self.read_only:
                conn.execute("SELECT set_config('default_transaction_read_only', 'on', false)")
            row = conn.execute("SELECT current_schema()").fetchone()
            self._schema = str(row[0] or "") if row else ""
            for session_id in [s for s in self._leases if s not in self._lost]:
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lease_key(session_id),)).fetchone()[0]:
                    self._lost.add(session_id)
                    log.error("%s: reconnected, but another writer took session %r meanwhile; this store's writes "
                              "to it are refused from now on", self._where, session_id)
            conn.commit()
        except pg.Error as exc:
            conn.close()
            raise self._translate(exc, "set up the connection") from None
        return conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None

    def _txn(self, fn: Callable[[Any], T], write: bool, op: str = "access the store",  # type: ignore[override]
             check_read_only: bool = True) -> T:
        pg = self._pg
        with self._lock:
            self._require_open()
            if write and check_read_only and self.read_only:
                raise StoreReadOnly(f"{self._where}: the store is opened read-only; writes are refused")
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._drop_connection()
                    self._conn = self._connect()
                conn = self._conn
                committing = False
                try:
                    with conn.cursor() as cur:
                        result = fn(cur)
                    committing = True
                    conn.commit()
                    return result
                except pg.Error as exc:
                    broken = bool(conn.closed or getattr(conn, "broken", False))
                    if broken:
                        self._drop_connection()
                    else:
                        self._rollback(conn)
                    if broken and committing:
                        raise StoreError(f"{self._where}: {op}: the connection was lost while committing; the "
                                         f"outcome of this write is unknown ({_driver_error(exc)})") from None
                    if broken and attempt == 1 and isinstance(exc, pg.OperationalError):
                        log.warning("%s: %s: connection lost (%s); reconnecting once", self._where, op,
                                    _driver_error(exc))
                        continue
                    raise self._translate(exc, op) from None
                except BaseException:
                    self._rollback(conn)
                    raise
        raise AssertionError("unreachable")

    def _rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:
            self._drop_connection()

    def _translate(self, exc: Exception, op: str) -> StoreError:
        """A user-facing error naming the server, the operation, the error class and SQLSTATE; never the
        server's text, which can quote the statement's parameters (message content, secrets)."""
        state = getattr(exc, "sqlstate", None) or ""
        text = _driver_error(exc)
        w = f"{self._where}: {op} failed"
        if state in ("55P03", "57014"):
            return StoreLocked(f"{w}: the session or table is locked by another connection (waited "
                               f"{self.busy_timeout:g} s, the lock timeout): {text}")
        if state == "25006":
            return StoreReadOnly(f"{w}: the database is read-only (read_only=True, a standby, or "
                                 f"default_transaction_read_only): {text}")
        if state == "53100":
            return StoreFull(f"{w}: the PostgreSQL server's disk is full: {text}")
        if state in ("23505", "40001", "40P01"):
            return StoreConflict(f"{w}: a write conflicts with the stored session ({text}): two writers on "
                                 "one session?")
        if isinstance(exc, self._pg.OperationalError) and not state:
            return StoreError(f"{w}: lost the connection to PostgreSQL: {text}")
        return StoreError(f"{w}: {text}")

    # -------------------------------------------------------------- schema

    def _migrate(self, cur: Any) -> None:
        if not self.read_only:
            # One migrator at a time, and the lock comes before any catalog lookup: a lookup made before
            # waiting would leave this connection a cached "no such table" after the other one created it.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_MIGRATION_LOCK,))
        cur.execute("SELECT to_regclass('schema_version') IS NOT NULL, to_regclass('sessions') IS NOT NULL, "
                    "to_regclass('messages') IS NOT NULL")
        has_version, has_sessions, has_messages = cur.fetchone()
        version = 0
        if has_version:
            cur.execute("SELECT MAX(version) FROM schema_version")
            version = int(cur.fetchone()[0] or 0)
        elif has_sessions or has_messages:
            raise StoreError(f"{self._where}: the database has sessions/messages tables that are not a "
                             "microcompact store (no schema_version)")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self._where}: store schema version {version} is newer than this microcompact "
                             f"supports (version {SCHEMA_VERSION}); upgrade microcompact to open it")
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreReadOnly(f"{self._where}: the store is opened read-only but its schema needs "
                                f"{'creating' if version == 0 else 'migrating'} (version {version} -> "
                                f"{SCHEMA_VERSION})")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in _PG_MIGRATIONS[target - 1]:
                cur.execute(stmt)
            cur.execute("DELETE FROM schema_version")
            cur.execute("INSERT INTO schema_version (version) VALUES (%s)", (target,))
            log.info("%s: store schema migrated to version %d", self._where, target)

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
        sql = ("INSERT INTO messages (session_id, position, role, content, extra, body, is_marker, marker_kind) "
               "VALUES (%s, %s, %s, %s::json, %s::json, %s, %s, %s) RETURNING id")
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

    def _search(self, cur: Any, session_id: str, terms: list[str], query: str, states: tuple[str, ...],
                limit: int) -> list[tuple[Any, ...]]:
        sql = """
            SELECT m.id, m.position, m.role, m.state,
                   ts_headline('simple', m.body, q, 'StartSel=[, StopSel=], MaxWords=24, MinWords=8, MaxFragments=2'),
                   m.absorbed_by, m.is_marker
            FROM messages m, websearch_to_tsquery('simple', %s) AS q
            WHERE m.session_id = %s AND m.state = ANY(%s) AND to_tsvector('simple', m.body) @@ q
            ORDER BY ts_rank(to_tsvector('simple', m.body), q) DESC, m.position
            LIMIT %s"""
        cur.execute(sql, (_clean_text(query), session_id, list(states), limit))
        return cur.fetchall()

    # -------------------------------------------------------------- leases

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
            cur.execute("SELECT a.application_name, a.client_addr::text, a.backend_start FROM pg_locks l "
                        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                        "AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 "
                        "AND l.pid <> pg_backend_pid() LIMIT 1", ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF))
            return cur.fetchone() or ()

        holder = self._txn(txn, write=False, op="take the session's writer lease")
        if holder is not None:
            name, addr, since = (tuple(holder) + (None, None, None))[:3]
            where = f" from {addr}" if addr else ""
            when = f" since {_timestamp(since):%Y-%m-%d %H:%M:%S} UTC" if since else ""
            raise self._busy(session_id, f"{name or 'a connection'}{where}{when}")

    def _drop_lease(self, session_id: str, token: str) -> None:
        key = self._lease_key(session_id)
        if self._conn is None or self._conn.closed:
            return  # the server released it with the connection
        self._txn(lambda cur: cur.execute("SELECT pg_advisory_unlock(%s)", (key,)), write=False,
                  op="release the session's writer lease")

    def _fence(self, cur: Any, session_id: str) -> None:
        if session_id in self._leases:
            if session_id in self._lost:
                raise self._lost_lease(session_id)
            return  # held on this very connection (taken again after any reconnect)
        cur.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", (self._lease_key(session_id),))
        if not cur.fetchone()[0]:
            raise self._busy(session_id, "a writer holding its lease")

    def close(self) -> None:
        with self._lock:
            self._leases.clear()  # the server releases them with the connection
            self._drop_connection()
            self._closed = True
