"""Many callers' full histories, each to the session it continues: what a proxy or a framework hook needs.

A *key* names a caller's conversation (its own session id, or a digest of its opening). One key may hold
several *branches*: a coding agent interleaves side requests and sub-agents under one session id, and a
client that compacts on its own, or edits a message, starts a new history. Each history goes to the branch
it continues (:meth:`Session.sync_history`); one that continues none is forked from the branch it shares
the longest prefix with (:meth:`Session.fork`). Branch ids are ``KEY``, ``KEY~2``, ``KEY~3``, ... (a ``~``
inside KEY doubled); the first branch's store metadata counts them, so another process (or a restart) finds
them all.

Several processes on one store (``shared=True``: several ``serve`` processes, one PostgreSQL database or one
SQLite file): :meth:`SessionRouter.lock` then also takes a lock on the key in the store, so one
conversation's requests run one at a time across processes. Each process keeps its sessions in memory
(the single-process path stays fast); on taking the key it compares each cached branch's store version
(bumped by every write) with the one it saw when it last let go, and reopens from the store any branch
another process wrote meanwhile. On letting go it finishes the branch's background pass (or abandons it:
see :meth:`SessionRouter.lock`), writes what is pending and the engine memory the store would not
otherwise hold (:mod:`microcompact.carry`), and gives up the writer lease, so the next process continues
exactly where this one stopped. A process killed while holding a key frees it as a crashed writer frees
its lease: PostgreSQL drops its locks with the connection; SQLite sees the dead pid on this host, or the
missed heartbeats of another host after the lease time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import Config
from .keys import BRANCHES_META, ROUTER_KEY_META
from .messages import Message
from .session import Convert, HistorySync, Session
from .session.store_writer import SessionExists
from .store import StoreLocked
from .summarizers import Summarizer, summarizer_for

if TYPE_CHECKING:
    from .store import SessionStore

log = logging.getLogger("microcompact")

BRANCH_SEPARATOR = "~"


def branch_id(key: str, number: int) -> str:
    """The session id of ``key``'s branch ``number``. A separator inside the key is doubled, so no key's
    branch is another key's (key ``abc~2`` is session ``abc~~2``, never branch 2 of ``abc``)."""
    base = key.replace(BRANCH_SEPARATOR, BRANCH_SEPARATOR * 2)
    return base if number <= 1 else f"{base}{BRANCH_SEPARATOR}{number}"


@dataclass(frozen=True)
class Routed:
    """Where a history went: the session to send through, what syncing did, and the fork's parent if any."""

    session: Session
    sync: HistorySync
    forked_from: str | None = None


@dataclass(eq=False)
class _Conversation:
    """What this process holds of one key, in one place (changed only under the router's lock, except
    ``owner``, which only the holder of ``lock`` changes)."""

    key: str
    lock: threading.Lock = field(default_factory=threading.Lock)  # this process's lock on the key
    owner: int | None = None  # the thread holding ``lock``
    branches: list[str] | None = None  # branch ids, most recently used first (None: read them at next use)
    sessions: dict[str, Session] = field(default_factory=dict)  # its sessions open in this process, by id
    versions: dict[str, int] = field(default_factory=dict)  # session id -> its store version when let go

    def drop(self, session_id: str) -> Session | None:
        """Forget an open session (and the version it was let go at)."""
        self.versions.pop(session_id, None)
        return self.sessions.pop(session_id, None)


class SessionRouter:
    """Routes full histories to sessions, keeping the most recently used ones open. Thread-safe: calls for
    one key are serialized, other keys go on meanwhile.

    Alone on its store, an open session holds its store writer lease while open. With ``shared=True``
    (other processes use the same store) a session is leased only inside :meth:`lock`; ``lock_timeout``
    bounds the wait for a key another process holds, ``pass_wait`` the wait for a running background pass
    when letting a key go (0: never wait, see :meth:`lock`)."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: SessionStore | None = None,
        summarizer: Summarizer | None = None,
        max_open: int = 256,
        session_factory: Callable[[str], Session] | None = None,
        shared: bool = False,
        lock_timeout: float = 120.0,
        pass_wait: float = 0.0,
    ) -> None:
        self.config = config or Config()
        self.store = store
        self.summarizer = summarizer
        self.max_open = max_open
        self.shared = shared and store is not None
        self.lock_timeout = lock_timeout
        self.pass_wait = pass_wait
        self._new_session = session_factory or self._default_session
        self._lock = threading.Lock()
        self._conversations: dict[str, _Conversation] = {}  # key -> its record
        # Open session id -> its conversation, least recently used first: the eviction order across keys.
        self._recency: OrderedDict[str, _Conversation] = OrderedDict()
        self._key_of: dict[str, str] = {}  # session id -> its key, for every session this process opened

    def _conversation(self, key: str) -> _Conversation:
        """The record of ``key`` (created at first use; call under ``self._lock``)."""
        record = self._conversations.get(key)
        if record is None:
            record = self._conversations[key] = _Conversation(key)
        return record

    def _open_session(self, key: str, session_id: str) -> Session | None:
        with self._lock:
            return self._conversation(key).sessions.get(session_id)

    # ------------------------------------------------------------------ sessions

    def warm(self) -> None:
        """Make once, now, what every session this router opens makes for itself at its conversation's first
        request: its summarizer (a model summarizer's SDK imported and its client made, most of a second the
        first time), so that no request waits for it. A summarizer the config cannot make is left for the
        sessions to report, as they did."""
        if self.summarizer is not None or self._new_session != self._default_session:
            return  # the caller's summarizer, or the caller's factory: nothing of ours to make
        try:
            summarizer_for(self.config)
        except Exception as exc:
            log.warning("Router: the summarizer was not prepared ahead (%s: %s)", type(exc).__name__, exc)

    def _default_session(self, session_id: str, config: Config | None = None) -> Session:
        if self.store is not None:
            return Session.open(self.store, session_id, config or self.config, self.summarizer)
        return Session(config or self.config, self.summarizer, session_id=session_id)

    def _session(self, key: str, session_id: str, config: Config | None = None) -> Session:
        with self._lock:
            session = self._conversation(key).sessions.get(session_id)
            if session is not None:
                self._recency.move_to_end(session_id)
        if session is not None:
            if self.shared:
                session.take_lease()  # let go at the end of the previous lock
            return session
        # A caller's own factory makes its sessions as it likes; the default one takes the per-request config.
        custom = self._new_session != self._default_session
        session = self._new_session(session_id) if custom else self._default_session(session_id, config)
        self._keep(key, session)
        return session

    def _keep(self, key: str, session: Session) -> None:
        """Cache ``session`` as open, closing the least recently used ones beyond ``max_open`` (never one
        whose key is held: another thread is using it)."""
        with self._lock:
            record = self._conversation(key)
            record.sessions[session.session_id] = session
            self._recency[session.session_id] = record
            self._key_of[session.session_id] = key
            evicted: list[Session | None] = []
            for sid, owner in list(self._recency.items()):
                if len(self._recency) <= self.max_open:
                    break
                if not owner.lock.locked():
                    evicted.append(self._forget(owner.key, sid))
        for old in evicted:
            if old is not None:
                self._close(old)

    def _forget(self, key: str, session_id: str) -> Session | None:
        """Drop a session from the cache (under ``self._lock``; its key stays known for :meth:`live`)."""
        self._recency.pop(session_id, None)
        return self._conversation(key).drop(session_id)

    def _close(self, session: Session) -> None:
        """Close a session dropped from the cache. Shared: it was handed over when its key was let go (its
        writes done, its lease given back) and another process may have written since, so a pass still
        pending on it is abandoned, never applied: closing must not write."""
        if self.shared:
            session.abandon()
            return
        try:
            session.close()
        except Exception as exc:
            log.warning("Closing session %s failed (%s: %s)", session.session_id, type(exc).__name__, exc)

    def _known_branches(self, key: str) -> list[str]:
        with self._lock:
            known = self._conversation(key).branches
            if known is not None:
                return list(known)
        count = 0
        if self.store is not None:
            first = branch_id(key, 1)
            meta = self.store.session_meta(first)
            if meta or self.store.load_active(first):
                count = max(1, int(meta.get(BRANCHES_META, 1)))
        found = [branch_id(key, n) for n in range(count, 0, -1)]  # the newest first
        with self._lock:
            record = self._conversation(key)
            if record.branches is None:
                record.branches = found
            return list(record.branches)

    def _used(self, key: str, session_id: str) -> None:
        with self._lock:
            record = self._conversation(key)
            if record.branches is None:
                record.branches = []
            branches = record.branches
            if session_id in branches:
                branches.remove(session_id)
            branches.insert(0, session_id)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold ``key``: a request's sync, forward and follow-up run without another request of the same
        conversation in between. Every use of a routed session belongs inside.

        With ``shared=True`` the key is also locked in the store (waiting up to ``lock_timeout`` seconds,
        then :class:`~microcompact.store.StoreLocked`), cached branches another process wrote are reloaded,
        and on leaving every branch is handed over (:meth:`Session.hand_over`).

        Background passes: a pass that finished is written before the key is let go. One still running
        (after ``pass_wait`` seconds, by default none: a request never waits on a summarizer here) stays
        pending on this process's session object, which only computes and never writes on its own. If
        this process takes the key again and the store has not moved, the pass is applied then, as in a
        single process; if another process wrote meanwhile, the object is dropped with its pass unapplied
        and whoever continues runs the pass again. So no pass ever reaches the store after its key was
        let go, and none is applied to a transcript it was not computed on."""
        with self._in_process(key):
            if not self.shared:
                yield
                return
            token = self._take_key(key)
            try:
                self._revalidate(key)
                yield
            finally:
                try:
                    self._hand_over(key)
                finally:
                    assert self.store is not None
                    self.store.unlock(key, token)

    @contextmanager
    def _in_process(self, key: str) -> Iterator[None]:
        """This process's lock on ``key``; a thread that already holds it goes on (route under lock)."""
        me = threading.get_ident()
        with self._lock:
            record = self._conversation(key)
            held = record.owner == me
        if held:
            yield
            return
        with record.lock:
            record.owner = me
            try:
                yield
            finally:
                record.owner = None

    def _take_key(self, key: str) -> str | None:
        """The store's lock on ``key``, polled with a growing pause (0.5 ms up to 50 ms): the holder is
        usually a request of the same conversation finishing on another process."""
        assert self.store is not None
        deadline = time.monotonic() + self.lock_timeout
        pause = 0.0005
        while True:
            token = self.store.try_lock(key)
            if token is not None:
                return token
            if time.monotonic() >= deadline:
                raise StoreLocked(
                    f"conversation {key!r} has been held by another process for over {self.lock_timeout:g} s "
                    "(lock_timeout); its requests are serialized across processes"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _cached(self, key: str) -> list[str]:
        with self._lock:
            return sorted(self._conversation(key).sessions)

    def _revalidate(self, key: str) -> None:
        """Drop cached branches of ``key`` that another process wrote since this one let go (reopened from
        the store at their next use), and the branch list when the first branch changed (it counts them)."""
        assert self.store is not None
        cached = self._cached(key)
        first = branch_id(key, 1)
        versions = self.store.session_versions([first, *cached])
        with self._lock:
            record = self._conversation(key)
            if first not in record.versions or versions.get(first) != record.versions.get(first):
                record.branches = None
            stale = [sid for sid in cached if sid not in versions or versions[sid] != record.versions.get(sid)]
            dropped = [self._forget(key, sid) for sid in stale]
        for session in dropped:
            if session is not None:
                session.abandon()
        if stale:
            log.info("Conversation %s: reloading %s, written by another process", key, ", ".join(stale))

    def _hand_over(self, key: str) -> None:
        """Let every branch of ``key`` go (see :meth:`lock`) and remember the store versions it leaves."""
        assert self.store is not None
        cached = self._cached(key)
        with self._lock:
            record = self._conversation(key)
            sessions = [record.sessions[sid] for sid in cached if sid in record.sessions]
        for session in sessions:
            if not session.hand_over(self.pass_wait):
                log.warning(
                    "Session %s: a store write failed when the conversation was let go; dropping the "
                    "in-memory session (it is reopened from the store, and the client resends its history)",
                    session.session_id,
                )
                with self._lock:
                    self._forget(key, session.session_id)
                session.abandon()
        first = branch_id(key, 1)
        versions = self.store.session_versions([first, *cached])
        with self._lock:
            for sid, version in versions.items():
                if sid == first or sid in record.sessions:
                    record.versions[sid] = version

    def _finish_passes(self, key: str, wait: float) -> None:
        try:
            with self.lock(key):
                for sid in self._cached(key):
                    session = self._open_session(key, sid)
                    if session is not None:
                        session.take_lease()
                        session.drain(wait)
        except Exception as exc:
            log.warning(
                "Conversation %s: could not finish its passes before closing (%s: %s)", key, type(exc).__name__, exc
            )

    def live(self, session: Session) -> Session:
        """The object to use now for a session routed earlier (e.g. a request's follow-up after the
        response): with ``shared=True`` the one :meth:`lock` left current, reopened from the store when
        another process wrote meanwhile, and leased. Call under :meth:`lock` of its key."""
        if not self.shared:
            return session
        with self._lock:
            key = self._key_of.get(session.session_id, session.session_id)
        return self._session(key, session.session_id)

    # ------------------------------------------------------------------ routing

    def route(
        self, key: str, history: Sequence[Message], convert: Convert | None = None, config: Config | None = None
    ) -> Routed:
        """The session ``history`` continues under ``key`` (its new messages appended), forking or starting
        one when none does. Call under :meth:`lock` when the caller goes on using the session (alone, it
        still runs one at a time per key in this process, so concurrent first requests share one session).
        ``config``: the one a session opened or started here gets (a proxy's per-model window; a session
        already open keeps its own, and a fork its parent's); default the router's."""
        with self._in_process(key):
            return self._route(key, history, convert, config)

    def _route(self, key: str, history: Sequence[Message], convert: Convert | None, config: Config | None) -> Routed:
        best: tuple[int, Session] | None = None
        branches = self._known_branches(key)
        for sid in branches:
            session = self._session(key, sid, config)
            result = session.sync_history(history, convert)
            if result.diverged is None:
                self._used(key, sid)
                return Routed(session, result)
            if best is None or result.diverged.at > best[0]:
                best = (result.diverged.at, session)
        if best is None:
            session = self._session(key, branch_id(key, 1), config)
            self._used(key, session.session_id)
            if self.store is not None:
                self.store.update_meta(session.session_id, {ROUTER_KEY_META: key, BRANCHES_META: 1})
            return Routed(session, session.sync_history(history, convert))
        at, parent = best
        child = self._fork(key, parent, history, at, convert, len(branches) + 1)
        return Routed(child, HistorySync(at, len(history) - at, True), forked_from=parent.session_id)

    def _fork(
        self, key: str, parent: Session, history: Sequence[Message], at: int, convert: Convert | None, number: int
    ) -> Session:
        """A new branch of ``key`` from ``parent``'s first ``at`` client messages (the next free number: a
        number another process took meanwhile is skipped)."""
        for n in range(number, number + 100):
            sid = branch_id(key, n)
            try:
                child = parent.fork(sid, history, at, convert)
            except SessionExists:
                continue
            break
        else:  # pragma: no cover - a hundred concurrent forks of one conversation
            raise RuntimeError(f"no free branch id for {key!r}")
        # Registered before anything is written: a store failure below fails this request, and the next
        # request of this history continues the fork (this object holds its lease) instead of colliding with it.
        self._keep(key, child)
        self._used(key, sid)
        if self.store is not None:
            self.store.update_meta(branch_id(key, 1), {ROUTER_KEY_META: key, BRANCHES_META: n})
            child.flush()
        log.info(
            "Session %s: the client's history left it at message %d; continuing in fork %s", parent.session_id, at, sid
        )
        return child

    def sessions(self) -> list[Session]:
        with self._lock:
            return [record.sessions[sid] for sid, record in self._recency.items()]

    def close(self, wait: float = 60.0) -> None:
        """Close every open session, finishing background passes (up to ``wait`` seconds each) and releasing
        leases. Shared: each key is taken once more, so a pending pass is applied where the store has not
        moved (and abandoned where another process wrote meanwhile)."""
        if self.shared:
            with self._lock:
                keys = sorted({record.key for record in self._recency.values()})
            for key in keys:
                self._finish_passes(key, wait)
        with self._lock:
            sessions = [record.sessions[sid] for sid, record in self._recency.items()]
            for record in self._conversations.values():  # their locks and branch lists stay
                record.sessions.clear()
                record.versions.clear()
            self._recency.clear()
            self._key_of.clear()
        for s in sessions:
            self._close(s)
