"""Many callers' full histories, each to the session it continues: what a proxy or a framework hook needs.

A *key* names a caller's conversation (its own session id, or a digest of its opening). One key may hold
several *branches*: a coding agent interleaves side requests and sub-agents under one session id, and a
client that compacts on its own, or edits a message, starts a new history. Each history goes to the branch
it continues (:meth:`Session.sync_history`); one that continues none is forked from the branch it shares
the longest prefix with (:meth:`Session.fork`). Branch ids are ``KEY``, ``KEY~2``, ``KEY~3``, ...; the
first branch's store metadata counts them, so another process (or a restart) finds them all.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import Config
from .messages import Message
from .session import Convert, HistorySync, Session
from .summarizers import Summarizer

if TYPE_CHECKING:
    from .store import SessionStore

log = logging.getLogger("microcompact")

BRANCH_SEPARATOR = "~"


def branch_id(key: str, number: int) -> str:
    return key if number <= 1 else f"{key}{BRANCH_SEPARATOR}{number}"


@dataclass(frozen=True)
class Routed:
    """Where a history went: the session to send through, what syncing did, and the fork's parent if any."""

    session: Session
    sync: HistorySync
    forked_from: str | None = None


class SessionRouter:
    """Routes full histories to sessions, keeping the most recently used ones open (each holds its store
    writer lease while open). Thread-safe: calls for one key are serialized, other keys go on meanwhile."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: SessionStore | None = None,
        summarizer: Summarizer | None = None,
        max_open: int = 256,
        session_factory: Callable[[str], Session] | None = None,
    ) -> None:
        self.config = config or Config()
        self.store = store
        self.summarizer = summarizer
        self.max_open = max_open
        self._new_session = session_factory or self._default_session
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._open: OrderedDict[str, Session] = OrderedDict()  # session id -> session, least recent first
        self._branches: dict[str, list[str]] = {}  # key -> branch ids, most recently used first

    # ------------------------------------------------------------------ sessions

    def _default_session(self, session_id: str) -> Session:
        if self.store is not None:
            return Session.open(self.store, session_id, self.config, self.summarizer)
        return Session(self.config, self.summarizer, session_id=session_id)

    def _session(self, session_id: str) -> Session:
        with self._lock:
            session = self._open.get(session_id)
            if session is not None:
                self._open.move_to_end(session_id)
                return session
        session = self._new_session(session_id)
        with self._lock:
            self._open[session_id] = session
            evicted = []
            while len(self._open) > self.max_open:
                _, old = self._open.popitem(last=False)
                evicted.append(old)
        for old in evicted:
            self._close(old)
        return session

    @staticmethod
    def _close(session: Session) -> None:
        try:
            session.close()
        except Exception as exc:
            log.warning("Closing session %s failed (%s: %s)", session.session_id, type(exc).__name__, exc)

    def _known_branches(self, key: str) -> list[str]:
        with self._lock:
            known = self._branches.get(key)
            if known is not None:
                return list(known)
        count = 0
        if self.store is not None:
            meta = self.store.session_meta(key)
            if meta or self.store.load_active(key):
                count = max(1, int(meta.get("branches", 1)))
        found = [branch_id(key, n) for n in range(count, 0, -1)]  # the newest first
        with self._lock:
            return list(self._branches.setdefault(key, found))

    def _used(self, key: str, session_id: str) -> None:
        with self._lock:
            branches = self._branches.setdefault(key, [])
            if session_id in branches:
                branches.remove(session_id)
            branches.insert(0, session_id)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold ``key`` (in this process): a request's sync, forward and follow-up run without another
        request of the same conversation in between."""
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            yield

    # ------------------------------------------------------------------ routing

    def route(self, key: str, history: Sequence[Message], convert: Convert | None = None) -> Routed:
        """The session ``history`` continues under ``key`` (its new messages appended), forking or starting
        one when none does. Call under :meth:`lock` when the caller goes on using the session."""
        best: tuple[int, Session] | None = None
        branches = self._known_branches(key)
        for sid in branches:
            session = self._session(sid)
            result = session.sync_history(history, convert)
            if result.diverged is None:
                self._used(key, sid)
                return Routed(session, result)
            if best is None or result.diverged.at > best[0]:
                best = (result.diverged.at, session)
        if best is None:
            session = self._session(branch_id(key, 1))
            self._used(key, session.session_id)
            if self.store is not None:
                self.store.update_meta(session.session_id, {"key": key, "branches": 1})
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
            except ValueError as exc:
                if "already exists" in str(exc):
                    continue
                raise
            break
        else:  # pragma: no cover - a hundred concurrent forks of one conversation
            raise RuntimeError(f"no free branch id for {key!r}")
        if self.store is not None:
            self.store.update_meta(key, {"key": key, "branches": n})
            child.flush()
        log.info(
            "Session %s: the client's history left it at message %d; continuing in fork %s", parent.session_id, at, sid
        )
        with self._lock:
            self._open[sid] = child
        self._used(key, sid)
        return child

    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._open.values())

    def close(self) -> None:
        """Close every open session (finishing background passes, releasing leases)."""
        with self._lock:
            sessions = list(self._open.values())
            self._open.clear()
        for s in sessions:
            self._close(s)
