"""The object agent loops use: a transcript, the compaction engine and its summarizer, tied together.

Typical loop::

    session = Session(load_config())
    session.append({"role": "user", "content": prompt})
    while True:
        session.before_request()
        reply = client.chat.completions.create(model=..., messages=session.messages)
        session.record_usage(reply.usage.prompt_tokens)
        session.append(reply.choices[0].message.model_dump(exclude_none=True))
        ...  # run tools, append their results
    session.finalize_turn()

Replay drives this same object, so what replay measures is what an agent gets.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..batch import BatchResult
from ..bill.cache_usage import CacheTotals
from ..config import Config, home_dir
from ..identity import digests
from ..keys import ROW_KEY
from ..messages import Message, caller_message, to_api, validate_message
from ..micro import CommitHook, PassResult
from ..redact import remember_secrets
from ..redact.secret_memory import SecretMemory, hides_secrets
from ..store import StoreConflict
from ..summarizers import Summarizer, summarizer_for
from ..telemetry import occupancy_pct
from ..tokens import Ledger, TokenCounter, make_text_counter
from .engines import SessionEngines
from .history import ClientHistory, Convert, HistoryDiverged, HistorySync, as_is, fork_messages
from .runners import PassRunner
from .store_writer import NoStore, SessionWrites, StoreWriter

if TYPE_CHECKING:
    from ..store import SessionStore
    from .background import BackgroundPasses

__all__ = ["Convert", "HistoryDiverged", "HistorySync", "Session"]

log = logging.getLogger("microcompact")


class Session:
    """One conversation: append messages, send ``messages``, call the hooks; compaction happens inside.

    Sharing a session between threads is safe: every method and property runs under one re-entrant lock,
    so appends from several threads are each kept exactly once (in the order they took the lock),
    ``flush`` writes each message to the store once however many threads call it, and ``messages``,
    ``transcript`` and ``tokens`` return a consistent snapshot (a list of copies that later calls never
    change). An inline pass holds the lock while its summarizer runs (other threads' appends wait); a
    background pass (``micro_compact_background``) runs it outside the lock. The order of messages appended
    concurrently by different threads is the order they got the lock: an agent that needs a particular
    order must append from one thread.

    With a store, the session holds the store's writer lease on its id from construction (or ``open``)
    until ``close``: a second writer on the same session, in this or another process, is refused with
    :class:`~microcompact.store.SessionBusy`. Reading the store (list, search, export) needs no lease.
    :meth:`hand_over` gives the lease up so another process can continue the session (a shared
    :class:`~microcompact.router.SessionRouter` does it at the end of every request), :meth:`take_lease`
    takes it back.
    """

    def __init__(
        self,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        *,
        session_id: str | None = None,
        counter: TokenCounter | None = None,
        messages: Iterable[Message] = (),
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.time,
        store: SessionStore | None = None,
    ) -> None:
        sid = session_id or uuid.uuid4().hex[:12]

        def begin() -> tuple[list[Message], StoreWriter | None]:
            # The caller's messages are written as new (and, like append, a caller's text that starts like a
            # marker does not become one); a store that already holds the id is refused before any write.
            initial = [caller_message(m) for m in messages]
            for i, m in enumerate(initial):
                validate_message(m, f"message {i}")
            return initial, StoreWriter.start(store, sid) if store is not None else None

        self._build(config, summarizer, sid, store, begin, counter=counter, commit=commit, clock=clock)
        remember_secrets(self.secrets, self.ledger.messages)

    def _build(
        self,
        config: Config | None,
        summarizer: Summarizer | None,
        session_id: str,
        store: SessionStore | None,
        begin: Callable[[], tuple[list[Message], StoreWriter | None]],
        *,
        counter: TokenCounter | None = None,
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the session; ``begin`` (called once the summarizer exists) gives the initial transcript and
        the store writer: the caller's messages for a new session, the stored rows for :meth:`open`."""
        self._lock = threading.RLock()
        self.config = config or Config()
        self.session_id = session_id
        self.store = store
        if store is not None:
            if commit is not None:
                raise ValueError("give either a store or a commit hook, not both")
            commit = self._commit_to_store
        self.counter = counter or TokenCounter(make_text_counter(self.config.compression.tokenizer))
        self.secrets = SecretMemory(home_dir() if store is not None else None)  # values redacted so far
        self.summarizer = summarizer or summarizer_for(self.config, self.counter)
        initial, writer = begin()
        # What the session writes at each moment: to its store, or nothing (one path for both).
        self._writer: SessionWrites = writer if writer is not None else NoStore(lambda: self.ledger.messages)
        self.ledger = Ledger(self.counter, initial)
        self._engines = SessionEngines(
            self.config,
            self.summarizer,
            self.counter,
            session_id=session_id,
            commit=commit,
            clock=clock,
            lock=self._lock,
            ledger=lambda: self.ledger,
        )
        # The engines' parts, by the names callers read them under (never reassigned).
        self.micro, self.batch, self.cache = self._engines.micro, self._engines.batch, self._engines.cache
        self._runner: PassRunner = self._engines.runner
        self._writer.write_later([m for m in self.ledger.messages if ROW_KEY not in m])  # a new session's
        self._history = ClientHistory(self._writer.client_rows)  # the client messages held, by digest (sync_history)
        if not self.micro.active and not self.config.threshold_tokens():
            log.warning(
                "Session %s: compaction is inactive (compression.micro_compact is off and "
                "model.context_length is unknown, so batch compaction never triggers)",
                self.session_id,
            )

    @classmethod
    def open(
        cls,
        store: SessionStore,
        session_id: str,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        **kwargs: Any,
    ) -> Session:
        """Resume ``session_id`` from ``store`` (or start it): active messages are loaded, and the engine
        recovers its cursor and rolling summary from the last marker, so no work is redone. Exchanges
        skipped after repeated failures stay skipped.

        Takes the session's writer lease first (released by ``close``): raises
        :class:`~microcompact.store.SessionBusy` when another writer has the session open. ``kwargs``:
        ``counter``, ``clock`` as for the constructor."""
        writer = StoreWriter.resume(store, session_id)
        session = cls.__new__(cls)
        try:
            session._build(config, summarizer, session_id, store, lambda: (writer.load(), writer), **kwargs)
            saved = writer.saved()
        except BaseException:
            writer.abandon()
            raise
        session._engines.resume(saved, session.ledger)
        if not session.secrets.restore(saved.secrets):  # stored before the memory existed: learn it now
            remember_secrets(session.secrets, session.ledger.messages)
        return session

    @property
    def background(self) -> BackgroundPasses | None:
        """The background worker's passes (``micro_compact_background``; None inline), for inspection: the
        session calls them only through its runner (:mod:`microcompact.session.runners`)."""
        return self._runner.passes

    @property
    def finalized_row(self) -> int | None:
        """Row of the last message when finalize_turn last completed (restored by open): tells a resumed
        replay whether the turn that ends the stored transcript was finalized before the interruption."""
        return self._writer.finalized_row

    # ------------------------------------------------------------------ the transcript

    def append(self, message: Message) -> None:
        """Add a message (a copy is kept; the caller's dict is never changed). Raises TranscriptError for a
        message that is not a chat message or holds a value JSON cannot (NaN, Infinity)."""
        with self._lock:
            validate_message(message, f"message {len(self.ledger)}")
            self._take(message)

    def _take(self, message: Message) -> None:
        """Append a message already validated (under the lock)."""
        owned = self.ledger.append(caller_message(message))
        remember_secrets(self.secrets, [owned])
        self._writer.write_later([owned])

    def flush(self) -> bool:
        """Write appended messages to the store (append-only; each once). False when the store failed:
        they stay pending and are retried at the next flush, and the session goes on."""
        with self._lock:
            return self._writer.save(self.ledger.messages, self.secrets)

    def _commit_to_store(self, event: Any, messages: list[Message]) -> None:
        """The engines' commit hook: flush first, then write the event in one transaction (raises on failure,
        so the engine rolls the pass back in memory and reports ``store_failed``)."""
        with self._lock:
            assert isinstance(self._writer, StoreWriter)  # the hook is the store's only
            try:
                self._writer.commit(event, messages, self.ledger.messages)
            except StoreConflict:
                self._resync()  # this pass still reports store_failed; the next one starts from the stored state
                raise

    def _resync(self) -> None:
        """Memory disagrees with the store: adopt the stored transcript plus what is pending; recover the
        engine's cursor and summary."""
        assert isinstance(self._writer, StoreWriter)
        self.ledger = self._writer.reload(self.counter)
        self._history.forget()  # reloaded from the store at the next sync_history
        self.micro.recover(self.ledger.messages)

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages, kept together (no other thread's message lands between them)."""
        with self._lock:
            for m in messages:
                self.append(m)

    @property
    def messages(self) -> list[Message]:
        """What to send to the provider: library metadata stripped (a finished background pass applied)."""
        with self._lock:
            self._runner.collect(self.ledger)
            return to_api(self.ledger.messages)

    @property
    def transcript(self) -> list[Message]:
        """The transcript with library metadata (markers are recognisable), e.g. for export: copies of the
        messages, so a later flush or pass never changes what the caller holds."""
        with self._lock:
            return [dict(m) for m in self.ledger.messages]

    @property
    def tokens(self) -> int:
        with self._lock:
            return self.ledger.total

    def occupancy_pct(self) -> float | None:
        with self._lock:
            return occupancy_pct(self.counter.estimate_prompt(self.ledger.total), self.config.threshold_tokens())

    def record_usage(
        self,
        prompt_tokens: int | None,
        counted_tokens: int | None = None,
        *,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> None:
        """Calibrate token estimates with the provider's ``usage.prompt_tokens`` for the last request
        (``counted_tokens``: what was counted when that request was sent, if the transcript grew since), and
        note what its cache did: ``cache_read_tokens`` (Anthropic ``cache_read_input_tokens``, OpenAI
        ``prompt_tokens_details.cached_tokens``) and ``cache_write_tokens`` (Anthropic
        ``cache_creation_input_tokens``), whole prompt included (``prompt_tokens`` = input + read + written).
        A figure that is not a count or exceeds the prompt is ignored with one log line."""
        if not prompt_tokens:
            return
        where = f"session {self.session_id} record_usage"
        with self._lock:
            counted = self.ledger.total if counted_tokens is None else counted_tokens
            self._engines.record_usage(counted, int(prompt_tokens), cache_read_tokens, cache_write_tokens, where)

    def note_fold(self) -> None:
        """The view the provider caches was just switched (a fold): call before that request's
        ``record_usage``, whose cache figures then tell whether the fold was paid for."""
        self.cache.note_fold()

    def cache_totals(self) -> CacheTotals:
        """What the provider's cache did for this session so far, as ``record_usage`` was told."""
        return self.cache.totals()

    def take_spent(self) -> list[PassResult]:
        """Passes computed and discarded since the last call (background folds never applied): their
        summarizer calls were made all the same, so whoever bills the summarizer counts them too."""
        return self._runner.take_spent()

    # ------------------------------------------------------------------ full history in, compacted view out

    def sync_history(self, history: Sequence[Message], convert: Convert | None = None) -> HistorySync:
        """Take the caller's *full*, uncompacted history (what frameworks and proxies hold) and append only
        what is new; send ``messages`` afterwards for the compacted view. A history that does not continue
        this session's appends nothing, and the result's ``diverged`` says where (:meth:`fork` it; see
        :mod:`microcompact.session.history`). ``convert`` turns one client message into the session messages
        that stand for it (default: itself). Raises TranscriptError for an invalid new message."""
        incoming = digests(history)
        with self._lock:
            return self._history.sync(history, incoming, convert or as_is, len(self.ledger), self._take)

    def compacted(self, history: Sequence[Message], convert: Convert | None = None) -> list[Message]:
        """The one call a framework hook needs: take the full history (:meth:`sync_history`), end the
        previous turn when a person spoke (``finalize_turn``), run ``before_request`` and return the
        compacted view to send. Raises :class:`HistoryDiverged` when the history is not this session's."""
        result = self.sync_history(history, convert)
        if result.diverged is not None:
            raise HistoryDiverged(self.session_id, result.diverged)
        if result.ends_turn:
            self.finalize_turn()
        self.before_request()
        return self.messages

    def fork(
        self,
        session_id: str,
        history: Sequence[Message],
        at: int,
        convert: Convert | None = None,
        store: SessionStore | None = None,
    ) -> Session:
        """A new session for a history that shares only its first ``at`` client messages with this one.

        It starts from this session's compacted form of that prefix when no summary here covers a later
        message (an edited last message, a retry), else from the client's raw messages (compacted anew),
        and then takes the rest of ``history``. The fork gets the same config and summarizer; with a store
        (this session's by default) it is written there, its metadata naming where it came from."""
        incoming = digests(history)
        store = store if store is not None else self.store
        with self._lock:
            at, prefix = self._history.fork_start(self.ledger.messages, incoming, at)
        start = at if prefix is not None else 0
        messages = fork_messages(history, incoming, start, prefix or [], convert or as_is)
        child = Session(self.config, self.summarizer, session_id=session_id, messages=messages, store=store)
        child._history.adopt(incoming)
        child.secrets.restore(self.secrets.export(), stored=False)  # what the parent saw before the fork point
        child._writer.record_fork(self.session_id, at, incoming[:start])
        return child

    # ------------------------------------------------------------------ hooks

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True when the prompt (the provider's figure when given, else counted) reaches the threshold."""
        with self._lock:
            return self.batch.should_compress(self.ledger, prompt_tokens)

    @hides_secrets
    def before_request(self, prompt_tokens: int | None = None) -> list[PassResult | BatchResult]:
        """Call before every model request: batch compaction when over the threshold, then absorption of
        long-turn iterations that left the tail. Never raises."""
        results: list[PassResult | BatchResult] = []
        with self._lock:
            try:
                self._writer.save(self.ledger.messages, self.secrets)
                results += self._engines.before_request(self.ledger, prompt_tokens)
            except Exception:
                log.exception("before_request failed unexpectedly; the session goes on uncompacted")
        return results

    @hides_secrets
    def fold_ahead(self) -> None:
        """The client's turn is over (an idle gap may follow): in background mode, start on the worker the
        fold the policy would make at the next request, so that it is ready then (inline: nothing). Never
        raises."""
        with self._lock:
            try:
                self._runner.fold_ahead(self.ledger)
            except Exception:
                log.exception("fold_ahead failed unexpectedly; the session goes on as it was")

    @hides_secrets
    def compact(self, focus: str | None = None) -> BatchResult:
        """Batch compaction on demand (``force``), optionally favouring ``focus`` in the summary."""
        with self._lock:
            return self._engines.compact(self.ledger, reason="on_demand", force=True, focus=focus)

    @hides_secrets
    def finalize_turn(self, completed: bool = True) -> list[PassResult]:
        """Call after each turn; ``completed=False`` for an interrupted or failed turn. Never raises.

        In background mode it returns at once: the pass runs on a worker thread and its result is applied
        at the next call (or ``messages`` read) if the transcript under it did not change.
        """
        results: list[PassResult] = []
        with self._lock:
            try:
                self._writer.save(self.ledger.messages, self.secrets)
                results = self._runner.turn_passes(self.ledger, completed)
                self._writer.end_turn(self.ledger.messages, self.micro.state.skipped, self.micro.state.turns)
            except Exception:
                log.exception("finalize_turn failed unexpectedly; the session goes on uncompacted")
        return results

    @hides_secrets
    def drain(self, timeout: float = 60.0) -> list[PassResult]:
        """Wait for a background pass to finish and apply it (tests, replays, shutdown; ``0``: apply one that
        finished, as the proxy does after a response; inline: nothing). The wait holds no lock: appends go on
        meanwhile."""
        return self._runner.drain(timeout)

    def hand_over(self, wait: float = 0.0) -> bool:
        """Leave the session so that another process can continue it exactly as this one would: apply a
        finished background pass (waiting up to ``wait`` seconds for a running one), write what is pending
        and the engine memory the store does not otherwise hold (:mod:`microcompact.carry`), and give up the
        writer lease. :meth:`take_lease` resumes it.

        A pass still running stays pending on this object: it computes and never writes, so it is applied
        (and written) only if this object takes the lease again with the store unchanged. False when a
        store write failed: the caller must then drop this object and reopen the session from the store."""
        if wait > 0:
            self._runner.drain(wait)
        with self._lock:
            self._runner.collect(self.ledger)
            carried = functools.partial(self._engines.carried, self.ledger)
            return self._writer.hand_over(self.ledger.messages, self.secrets, self.micro.state.skipped, carried)

    def take_lease(self) -> None:
        """Become the session's writer again after :meth:`hand_over` (raises SessionBusy while another
        writer holds it)."""
        with self._lock:
            self._writer.take_lease()

    def close(self) -> None:
        """Finish background work, write what is pending and give up the store's writer lease (the store
        itself stays open: the caller owns it)."""
        self._runner.finish()
        with self._lock:
            self._writer.close(self.ledger.messages, self.secrets, self.micro.state.skipped)

    def abandon(self) -> None:
        """Drop this object without writing: a background pass still running is stopped and never applied
        (a shared router lets go of a session another process may have written since). Writes nothing, and
        the object is not used again."""
        self._runner.abandon()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
