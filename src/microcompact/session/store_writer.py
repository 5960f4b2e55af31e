"""The store side of a :class:`~microcompact.session.Session`: every message written once, and one writer.

A :class:`StoreWriter` belongs to one stored session. It holds the writer lease (taken when the session
starts or is opened, given back by ``release``), the messages appended but not yet written (each written
once, in order, at the next flush), and what the store keeps beside the transcript: the skipped exchanges,
the turn counter and the last finalized row, the engine memory another process needs (:mod:`carry`), and
where a fork came from. A failed write is retried at the next flush; before the retry, messages the failed
write did commit (its acknowledgement was lost) take their stored rows instead of being written twice.

The writer knows the store, never the engines: the session hands it the transcript and the engine values
to save, and applies what it reads back. It is not thread-safe on its own: the session calls it under its
lock. A session without a store has a :class:`NoStore` instead, with the same moments (a turn ended, a
hand-over, a close) and nothing written, so the session's hooks are one path for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..keys import (
    CARRIED_META,
    FINALIZED_ROW_META,
    FORK_AT_META,
    FORK_PREFIX_META,
    FORKED_FROM_META,
    MICRO_TURNS_META,
    POS_KEY,
    ROW_KEY,
    SECRETS_META,
)
from ..messages import Message, to_api, validate_message
from ..redact.secret_memory import SecretMemory
from ..store import StoreError, StoreReadOnly
from ..tokens import Ledger, TokenCounter

if TYPE_CHECKING:
    from ..store import SessionStore

log = logging.getLogger("microcompact")


class SessionExists(ValueError):
    """A new session was asked for under an id the store already holds: resume it with ``Session.open``.

    A ValueError, as before this type existed, so callers that caught that still do."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} already exists in the store: resume it with Session.open(store, session_id)"
        )
        self.session_id = session_id


def _take_lease(store: SessionStore, session_id: str) -> str | None:
    """Become the session's only writer (None: a read-only store, or a store without leases)."""
    acquire = getattr(store, "acquire_lease", None)
    return acquire(session_id) if acquire is not None else None


def _give_back_lease(store: SessionStore, session_id: str, lease: str | None) -> None:
    release = getattr(store, "release_lease", None)
    if lease is not None and release is not None:
        release(session_id, lease)


@dataclass(frozen=True)
class Saved:
    """What a stored session keeps beside its transcript, read back when it is opened."""

    skipped: set[str]  # exchanges skipped after repeated failures
    turns: int  # the micro engine's turn counter
    finalized_row: int | None  # the last message's row when finalize_turn last completed
    carried: Any  # the engine memory another process left (carry.snapshot), None when there is none
    secrets: Any = None  # the secret memory (SecretMemory.export), None when none was stored


class StoreWriter:
    """Writes one session to its store and holds its writer lease (see the module docstring)."""

    def __init__(self, store: SessionStore, session_id: str, lease: str | None) -> None:
        self.store = store
        self.session_id = session_id
        self.lease = lease
        self.pending: list[Message] = []  # appended, not yet written (each is written once, in order)
        self.finalized_row: int | None = None  # see Saved.finalized_row; None until a turn is saved
        self._skips_saved: set[str] = set()
        self._failed = False  # the last write failed: it may have committed, adopt before retrying
        self._error: str | None = None  # the last write failure logged (repeats are not logged again)
        self._carried_saved: Any = None  # the engine memory last written (hand_over)
        self._secrets_saved = 0  # the SecretMemory.version last written (0: what the store holds)

    # ------------------------------------------------------------------ becoming the writer

    @classmethod
    def start(cls, store: SessionStore, session_id: str) -> StoreWriter:
        """The writer of a new session: refuse an existing one (:class:`SessionExists`), take the lease."""
        if store.load_active(session_id):
            raise SessionExists(session_id)
        lease = _take_lease(store, session_id)
        try:
            if store.load_active(session_id):  # written between the check and the lease
                raise SessionExists(session_id)
        except BaseException:
            _give_back_lease(store, session_id, lease)
            raise
        return cls(store, session_id, lease)

    @classmethod
    def resume(cls, store: SessionStore, session_id: str) -> StoreWriter:
        """The writer of a session to open (created when the store does not hold it): takes the lease."""
        try:
            store.create_session(session_id)
        except StoreReadOnly:
            log.warning("Session store is read-only: session %s is loaded, but nothing will be written", session_id)
        return cls(store, session_id, _take_lease(store, session_id))

    def load(self) -> list[Message]:
        """The session's active rows, to open it with: the store's own (their bookkeeping kept), checked as
        they are."""
        stored = self.store.load_active(self.session_id)
        for i, m in enumerate(stored):
            validate_message(m, f"message {i}")
        return stored

    def saved(self) -> Saved:
        """What the store keeps beside the transcript (the skips read count as saved already)."""
        skipped = self.store.skipped(self.session_id)
        self._skips_saved = set(skipped)
        meta = self.store.session_meta(self.session_id)
        saved = Saved(
            skipped,
            int(meta.get(MICRO_TURNS_META, 0)),
            meta.get(FINALIZED_ROW_META),
            meta.get(CARRIED_META),
            meta.get(SECRETS_META),
        )
        self.finalized_row = saved.finalized_row
        self._carried_saved = saved.carried
        return saved

    def take_lease(self) -> None:
        """Become the writer again after :meth:`release` (raises SessionBusy while another writer holds it)."""
        if self.lease is None:
            self.lease = _take_lease(self.store, self.session_id)

    def release(self) -> None:
        """Give the writer lease back (a failure is logged: the lease expires on its own)."""
        if self.lease is not None:
            lease, self.lease = self.lease, None
            try:
                _give_back_lease(self.store, self.session_id, lease)
            except StoreError as exc:
                log.warning("Session store: could not release the writer lease (%s)", exc)

    def abandon(self) -> None:
        """Give the lease back after a failed open (errors propagate: the open is failing anyway)."""
        lease, self.lease = self.lease, None
        _give_back_lease(self.store, self.session_id, lease)

    # ------------------------------------------------------------------ the session's moments

    def write_later(self, messages: Sequence[Message]) -> None:
        """Messages the store does not hold yet, written (each once, in order) at the next :meth:`save`."""
        self.pending.extend(messages)

    def save(self, transcript: Sequence[Message], secrets: SecretMemory) -> bool:
        """The secret memory, then the pending messages (see :meth:`flush`); False when a write failed."""
        self.save_secrets(secrets)
        return self.flush(transcript)

    def end_turn(self, transcript: Sequence[Message], skipped: set[str], turns: int) -> None:
        """A turn was finalized: newly skipped exchanges, the turn counter and the row it ended at."""
        self.save_skips(skipped)
        self.save_progress(transcript, turns)

    def hand_over(
        self,
        transcript: Sequence[Message],
        secrets: SecretMemory,
        skipped: set[str],
        carried: Callable[[], dict[str, Any]],
    ) -> bool:
        """Everything another process needs to continue (``carried``: the engine memory), then the lease
        given back; False when a write failed."""
        written = self.save(transcript, secrets)
        self.save_skips(skipped)
        written = self.save_carried(carried()) and written
        self.release()
        return written

    def close(self, transcript: Sequence[Message], secrets: SecretMemory, skipped: set[str]) -> None:
        """What is pending written and the lease given back (the store stays open: the caller owns it)."""
        self.save(transcript, secrets)
        self.save_skips(skipped)
        self.release()

    # ------------------------------------------------------------------ the transcript

    def flush(self, transcript: Sequence[Message]) -> bool:
        """Write the pending messages (append-only; each once). False when the store failed: they stay
        pending for the next flush. ``transcript`` is the session's, to adopt what a failed write committed."""
        if not self.pending:
            return True
        try:
            if self._failed:
                self._adopt_committed(transcript)  # the failed write may have committed (lost during COMMIT)
            if self.pending:
                self.store.append(self.session_id, self.pending)
        except Exception as exc:
            self._write_failed(exc)
            return False
        if self._error is not None:
            log.warning("Session store: writes succeed again; %d pending message(s) stored", len(self.pending))
            self._error = None
        self._failed = False
        self.pending = []
        return True

    def _write_failed(self, exc: Exception) -> None:
        self._failed = True
        failure = f"{type(exc).__name__}: {exc}"
        if failure != self._error:  # a store that stays down (or a lost lease) is logged once
            log.error(
                "Session store: could not write %d message(s), will retry at every hook and log again "
                "only if the failure changes (%s)",
                len(self.pending),
                failure,
            )
            self._error = failure
        else:
            log.debug("Session store: write failed again (%s)", failure)

    def _adopt_committed(self, transcript: Sequence[Message]) -> None:
        """Before retrying a failed append: pending messages the store already holds (the COMMIT succeeded,
        its acknowledgement was lost) take their stored rows instead of being written twice.
        O(transcript), and only after a failed write."""
        known = {m.get(ROW_KEY) for m in transcript}
        extra = [m for m in self.store.load_active(self.session_id) if m[ROW_KEY] not in known]
        if not extra or len(extra) > len(self.pending) or to_api(extra) != to_api(self.pending[: len(extra)]):
            return
        for stored, pending in zip(extra, self.pending, strict=False):  # extra is a prefix
            pending[POS_KEY], pending[ROW_KEY] = stored[POS_KEY], stored[ROW_KEY]
        self.pending = self.pending[len(extra) :]

    def reload(self, counter: TokenCounter) -> Ledger:
        """Memory disagrees with the store (a pass committed whose acknowledgement was lost, or another
        writer): the stored transcript plus what is pending, as a new ledger for the session to adopt."""
        stored = self.store.load_active(self.session_id)
        ledger = Ledger(counter, stored + self.pending)
        self.pending = ledger.messages[len(stored) :]
        log.warning("Session store: the in-memory transcript was stale; reloaded %d stored message(s)", len(stored))
        return ledger

    def commit(self, event: Event, messages: list[Message], transcript: Sequence[Message]) -> None:
        """Write a pass's event in one transaction, pending messages first. Raises on failure (the engine
        rolls the pass back in memory); StoreConflict means the session must :meth:`reload`."""
        if not self.flush(transcript):
            raise RuntimeError("pending messages could not be written")
        self.store.archive_and_compact(self.session_id, event, messages)

    def client_rows(self) -> tuple[list[Message], list[str]]:
        """Every message this session took from its client (stored, absorbed ones included, then pending),
        and the digests of the prefix a fork started from (its rows are its parent's)."""
        rows = self.store.export(self.session_id, include_absorbed=True) + list(self.pending)
        saved = self.store.session_meta(self.session_id).get(FORK_PREFIX_META)
        prefix = saved if isinstance(saved, list) and all(isinstance(d, str) for d in saved) else []
        return rows, prefix

    # ------------------------------------------------------------------ beside the transcript

    def save_skips(self, skipped: set[str]) -> None:
        """Remember exchanges newly skipped after repeated failures (each once)."""
        new = skipped - self._skips_saved
        if not new:
            return
        try:
            for key in sorted(new):
                self.store.remember_skip(self.session_id, key)
            self._skips_saved |= new
        except Exception as exc:
            log.error("Session store: could not remember skipped exchanges (%s: %s)", type(exc).__name__, exc)

    def save_progress(self, transcript: Sequence[Message], turns: int) -> None:
        """Persist the turn counter and the turn just finalized (one small UPDATE per turn), once every
        message is written."""
        if self.pending or not transcript:
            return
        row = transcript[-1].get(ROW_KEY)
        try:
            self.store.update_meta(self.session_id, {MICRO_TURNS_META: turns, FINALIZED_ROW_META: row})
            self.finalized_row = row
        except Exception as exc:
            log.error("Session store: could not save the turn counter (%s: %s)", type(exc).__name__, exc)

    def save_carried(self, memory: dict[str, Any]) -> bool:
        """Write the engine memory (:func:`carry.snapshot`) when it changed; False when the write failed."""
        if memory == self._carried_saved:
            return True
        try:
            self.store.update_meta(self.session_id, {CARRIED_META: memory})
        except Exception as exc:
            log.error("Session store: could not save the engine memory (%s: %s)", type(exc).__name__, exc)
            return False
        self._carried_saved = memory
        return True

    def save_secrets(self, memory: SecretMemory) -> bool:
        """Write the secret memory when it learned a value since the last write (before the messages that
        hold the value are written, so a restart never finds one without the other); False on failure."""
        version = memory.version
        if version == self._secrets_saved:
            return True
        try:
            self.store.update_meta(self.session_id, {SECRETS_META: memory.export()})
        except StoreReadOnly:
            self._secrets_saved = version  # nothing is written to a read-only store (said once at open)
            return False
        except Exception as exc:
            if self._secrets_saved >= 0:  # a store that stays down is logged once
                log.error("Session store: could not save the secret memory (%s: %s)", type(exc).__name__, exc)
            self._secrets_saved = -1  # retried at every flush
            return False
        self._secrets_saved = version
        return True

    def record_fork(self, parent_id: str, at: int, prefix: list[str]) -> None:
        """Where this fork came from; a fork that starts compacted holds no rows for what its parent had
        absorbed, so the digests of that prefix are kept beside it for a reopened fork."""
        meta = {FORKED_FROM_META: parent_id, FORK_AT_META: at, FORK_PREFIX_META: prefix}
        try:
            self.store.update_meta(self.session_id, meta)
        except Exception as exc:
            log.warning("Session store: could not record where fork %s came from (%s)", self.session_id, exc)


class NoStore:
    """A session without a store: it takes what a :class:`StoreWriter` takes at each moment and writes
    nothing, holds no lease, and the client messages it holds are its transcript (``transcript``: the
    session's, read when asked)."""

    finalized_row: int | None = None

    def __init__(self, transcript: Callable[[], Sequence[Message]]) -> None:
        self._transcript = transcript

    def write_later(self, *_: object) -> None:
        pass

    def save(self, *_: object) -> bool:
        return True

    def end_turn(self, *_: object) -> None:
        pass

    def hand_over(self, *_: object) -> bool:
        return True  # the engine memory (its last argument) is never computed: nobody could read it

    def close(self, *_: object) -> None:
        pass

    def take_lease(self) -> None:
        pass

    def client_rows(self) -> tuple[list[Message], list[str]]:
        return list(self._transcript()), []

    def record_fork(self, *_: object) -> None:
        pass


# What a session writes at each of its moments: to its store, or nothing.
SessionWrites = StoreWriter | NoStore
