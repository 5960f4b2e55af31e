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

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .background import BackgroundPasses
from .batch import BatchCompactor, BatchResult
from .config import Config
from .events import Outcome
from .messages import Message, disown_marker_text, to_api, validate_message
from .micro import CommitHook, MicroCompactor, PassResult
from .store import StoreConflict, StoreError, StoreReadOnly
from .summarizers import Summarizer, make_summarizer
from .telemetry import occupancy_pct
from .tokens import Ledger, TokenCounter, make_text_counter

if TYPE_CHECKING:
    from .store import SessionStore

log = logging.getLogger("microcompact")


def summarizer_for(config: Config, counter: TokenCounter | None = None) -> Summarizer:
    """The summarizer ``auxiliary.compression`` describes (the offline extractive one by default)."""
    aux = config.auxiliary.compression
    if aux.kind == "extractive":
        return make_summarizer("extractive", count_text=counter.count_text if counter else None)
    if not aux.model:
        from .config import ConfigError

        raise ConfigError(
            "auxiliary.compression.model: required when provider is "
            f"{aux.provider!r} (the model name the endpoint serves)"
        )
    timeout = aux.timeout_seconds()
    if aux.local and config.compression.micro_compact and not config.compression.micro_compact_background:
        log.warning(
            "Micro-compaction: the summarizer at %s is on this machine and background mode is off: a pass on a "
            "CPU model takes minutes and blocks finalize_turn (up to the %.0f s timeout); set "
            "compression.micro_compact_background: true",
            aux.base_url,
            timeout,
        )
    return make_summarizer(
        "openai",
        model=aux.model,
        base_url=aux.base_url,
        api_key_env=aux.api_key_env,
        timeout=timeout,
        max_output_tokens=config.summarizer_output_tokens(),
        temperature=aux.temperature,
        count_text=counter.count_text if counter else None,
    )


# The store's bookkeeping on a message: meaningful only on rows it handed out itself (Session.open).
_STORE_KEYS = ("_row", "_pos", "_tokens")


def _own(message: Message) -> Message:
    """The caller's message without store bookkeeping (a message copied from another session's transcript
    would otherwise pass for one already stored)."""
    if not any(k in message for k in _STORE_KEYS):
        return message
    return {k: v for k, v in message.items() if k not in _STORE_KEYS}


def _take_lease(store: SessionStore, session_id: str) -> str | None:
    """Become the session's only writer (None: a read-only store, or a store without leases)."""
    acquire = getattr(store, "acquire_lease", None)
    return acquire(session_id) if acquire is not None else None


def _give_back_lease(store: SessionStore, session_id: str, lease: str | None) -> None:
    release = getattr(store, "release_lease", None)
    if lease is not None and release is not None:
        release(session_id, lease)


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
        _stored: bool = False,
        _lease: str | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self.config = config or Config()
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.store = store
        self._lease = _lease
        if store is not None:
            if commit is not None:
                raise ValueError("give either a store or a commit hook, not both")
            commit = self._commit_to_store
        self.counter = counter or TokenCounter(make_text_counter(self.config.compression.tokenizer))
        self.summarizer = summarizer or summarizer_for(self.config, self.counter)
        # Only Session.open hands in stored rows; anything else is the caller's and gets written as new (and,
        # like append, a caller's text that starts like a marker does not become one).
        initial = list(messages) if _stored else [disown_marker_text(_own(m)) for m in messages]
        for i, m in enumerate(initial):
            validate_message(m, f"message {i}")
        if store is not None and not _stored:
            self._start_new(store)
        self.ledger = Ledger(self.counter, initial)
        self.micro = MicroCompactor(
            self.config, self.summarizer, self.counter, session_id=self.session_id, commit=commit, wall_clock=clock
        )
        self.batch = BatchCompactor(
            self.config, self.summarizer, self.counter, session_id=self.session_id, commit=commit
        )
        self._micro_passes_at_last_batch = 0
        self.background = BackgroundPasses(self.micro) if self.config.compression.micro_compact_background else None
        # Messages appended but not yet written to the store (each is written once, in order).
        self._unflushed: list[Message] = [m for m in self.ledger.messages if "_row" not in m] if store else []
        self._skips_saved: set[str] = set()
        self._flush_failed = False
        self._flush_error: str | None = None  # the last write failure logged (repeats are not logged again)
        # Row of the last message when finalize_turn last completed (restored by open): tells a resumed replay
        # whether the turn that ends the stored transcript was finalized before the interruption.
        self.finalized_row: int | None = None
        if not self.micro.active and not self.config.threshold_tokens():
            log.warning(
                "Session %s: compaction is inactive (compression.micro_compact is off and "
                "model.context_length is unknown, so batch compaction never triggers)",
                self.session_id,
            )

    def _start_new(self, store: SessionStore) -> None:
        """A new session in ``store``: refuse an existing one (resume it with ``open``), take the lease."""
        exists = ValueError(
            f"session {self.session_id!r} already exists in the store: resume it with Session.open(store, session_id)"
        )
        if store.load_active(self.session_id):
            raise exists
        self._lease = _take_lease(store, self.session_id)
        try:
            if store.load_active(self.session_id):  # written between the check and the lease
                raise exists
        except BaseException:
            _give_back_lease(store, self.session_id, self._lease)
            raise

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
        :class:`~microcompact.store.SessionBusy` when another writer has the session open."""
        try:
            store.create_session(session_id)
        except StoreReadOnly:
            log.warning("Session store is read-only: session %s is loaded, but nothing will be written", session_id)
        lease = _take_lease(store, session_id)
        try:
            session = cls(
                config,
                summarizer,
                session_id=session_id,
                messages=store.load_active(session_id),
                store=store,
                _stored=True,
                _lease=lease,
                **kwargs,
            )
            session.micro.state.skipped |= store.skipped(session_id)
            session._skips_saved = set(session.micro.state.skipped)
            meta = store.session_meta(session_id)
        except BaseException:
            _give_back_lease(store, session_id, lease)
            raise
        session.micro.state.turns = int(meta.get("micro_turns", 0))  # the every-N-turns cadence goes on
        session.finalized_row = meta.get("finalized_row")
        return session

    # ------------------------------------------------------------------ the transcript

    def append(self, message: Message) -> None:
        """Add a message (a copy is kept; the caller's dict is never changed). Raises TranscriptError for a
        message that is not a chat message or holds a value JSON cannot (NaN, Infinity)."""
        with self._lock:
            validate_message(message, f"message {len(self.ledger)}")
            owned = self.ledger.append(disown_marker_text(_own(message)))
            if self.store is not None:
                self._unflushed.append(owned)

    def flush(self) -> bool:
        """Write appended messages to the store (append-only; each once). False when the store failed:
        they stay pending and are retried at the next flush, and the session goes on."""
        with self._lock:
            return self._flush()

    def _flush(self) -> bool:
        if self.store is None or not self._unflushed:
            return True
        try:
            if self._flush_failed:
                self._adopt_committed()  # the failed write may have committed (connection lost during COMMIT)
            if self._unflushed:
                self.store.append(self.session_id, self._unflushed)
        except Exception as exc:
            self._flush_failed = True
            failure = f"{type(exc).__name__}: {exc}"
            if failure != self._flush_error:  # a store that stays down (or a lost lease) is logged once
                log.error(
                    "Session store: could not write %d message(s), will retry at every hook and log again "
                    "only if the failure changes (%s)",
                    len(self._unflushed),
                    failure,
                )
                self._flush_error = failure
            else:
                log.debug("Session store: write failed again (%s)", failure)
            return False
        if self._flush_error is not None:
            log.warning("Session store: writes succeed again; %d pending message(s) stored", len(self._unflushed))
            self._flush_error = None
        self._flush_failed = False
        self._unflushed = []
        return True

    def _adopt_committed(self) -> None:
        """Before retrying a failed append: pending messages the store already holds (the COMMIT succeeded,
        its acknowledgement was lost) take their stored rows instead of being written twice.
        O(transcript), and only after a failed write."""
        assert self.store is not None
        known = {m.get("_row") for m in self.ledger.messages}
        extra = [m for m in self.store.load_active(self.session_id) if m["_row"] not in known]
        if not extra or len(extra) > len(self._unflushed) or to_api(extra) != to_api(self._unflushed[: len(extra)]):
            return
        for stored, pending in zip(extra, self._unflushed, strict=False):  # extra is a prefix
            pending["_pos"], pending["_row"] = stored["_pos"], stored["_row"]
        self._unflushed = self._unflushed[len(extra) :]

    def _resync(self) -> None:
        """Memory disagrees with the store (a pass committed whose acknowledgement was lost, or another
        writer): adopt the stored transcript plus what is pending; recover the engine's cursor and summary."""
        assert self.store is not None
        stored = self.store.load_active(self.session_id)
        self.ledger = Ledger(self.counter, stored + self._unflushed)
        self._unflushed = self.ledger.messages[len(stored) :]
        self.micro.recover(self.ledger.messages)
        log.warning("Session store: the in-memory transcript was stale; reloaded %d stored message(s)", len(stored))

    def _commit_to_store(self, event: Any, messages: list[Message]) -> None:
        """The engines' commit hook: flush first, then write the event in one transaction (raises on failure,
        so the engine rolls the pass back in memory and reports ``store_failed``)."""
        if not self.flush():
            raise RuntimeError("pending messages could not be written")
        assert self.store is not None
        try:
            self.store.archive_and_compact(self.session_id, event, messages)
        except StoreConflict:
            self._resync()  # this pass still reports store_failed; the next one starts from the stored state
            raise

    def _save_skips(self) -> None:
        new = self.micro.state.skipped - self._skips_saved
        if self.store is None or not new:
            return
        try:
            for key in sorted(new):
                self.store.remember_skip(self.session_id, key)
            self._skips_saved |= new
        except Exception as exc:
            log.error("Session store: could not remember skipped exchanges (%s: %s)", type(exc).__name__, exc)

    def _save_progress(self) -> None:
        """Persist the turn counter and the turn just finalized (one small UPDATE per turn)."""
        if self.store is None or self._unflushed or not self.ledger.messages:
            return
        row = self.ledger.messages[-1].get("_row")
        try:
            self.store.update_meta(self.session_id, {"micro_turns": self.micro.state.turns, "finalized_row": row})
            self.finalized_row = row
        except Exception as exc:
            log.error("Session store: could not save the turn counter (%s: %s)", type(exc).__name__, exc)

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages, kept together (no other thread's message lands between them)."""
        with self._lock:
            for m in messages:
                self.append(m)

    @property
    def messages(self) -> list[Message]:
        """What to send to the provider: library metadata stripped (a finished background pass applied)."""
        with self._lock:
            if self.background is not None:
                self.background.collect(self.ledger)
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

    def record_usage(self, prompt_tokens: int | None) -> None:
        """Calibrate token estimates with the provider's ``usage.prompt_tokens`` for the last request."""
        if prompt_tokens:
            with self._lock:
                self.counter.calibrate(self.ledger.total, int(prompt_tokens))

    # ------------------------------------------------------------------ hooks

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True when the prompt (the provider's figure when given, else counted) reaches the threshold."""
        with self._lock:
            return self.batch.should_compress(self.ledger, prompt_tokens)

    def before_request(self, prompt_tokens: int | None = None) -> list[PassResult | BatchResult]:
        """Call before every model request: batch compaction when over the threshold, then absorption of
        long-turn iterations that left the tail. Never raises."""
        results: list[PassResult | BatchResult] = []
        with self._lock:
            try:
                self._flush()
                if self.background is not None:
                    results += self.background.collect(self.ledger)
                if self.batch.should_compress(self.ledger, prompt_tokens):
                    results.append(self._batch(reason="threshold", prompt_tokens=prompt_tokens))
                if self.background is None:
                    results += self.micro.before_request(self.ledger)
                elif self.micro.active and not self.background.busy:
                    self.background.submit(self.ledger, "request")
                cut = self.batch.last_resort(self.ledger)  # still over the window: cut what is oversized
                if cut is not None:
                    results.append(cut)
            except Exception:
                log.exception("before_request failed unexpectedly; the session goes on uncompacted")
        return results

    def compact(self, focus: str | None = None) -> BatchResult:
        """Batch compaction on demand (``force``), optionally favouring ``focus`` in the summary."""
        with self._lock:
            return self._batch(reason="on_demand", force=True, focus=focus)

    def _batch(self, **kwargs: Any) -> BatchResult:
        since = self.micro.state.passes_total - self._micro_passes_at_last_batch
        result = self.batch.compact(self.ledger, micro_passes_since_last=since if self.micro.active else None, **kwargs)
        if result.changed:
            # Micro state continues from the new marker; the old rolling summary went into the batch one.
            self.micro.recover(self.ledger.messages)
            if result.outcome != Outcome.PRUNED:  # a prune is not a batch compaction: keep counting micro passes
                self._micro_passes_at_last_batch = self.micro.state.passes_total
        return result

    def finalize_turn(self, completed: bool = True) -> list[PassResult]:
        """Call after each turn; ``completed=False`` for an interrupted or failed turn. Never raises.

        In background mode it returns at once: the pass runs on a worker thread and its result is applied
        at the next call (or ``messages`` read) if the transcript under it did not change.
        """
        results: list[PassResult] = []
        with self._lock:
            try:
                self._flush()
                if self.background is None:
                    results = self.micro.finalize_turn(self.ledger, completed)
                else:
                    results = self.background.collect(self.ledger)
                    if self.micro.active and self.micro.turn_due(self.ledger, completed):
                        self.background.submit(self.ledger)
                self._save_skips()
                self._save_progress()
            except Exception:
                log.exception("finalize_turn failed unexpectedly; the session goes on uncompacted")
        return results

    def drain(self, timeout: float = 60.0) -> list[PassResult]:
        """Wait for a background pass to finish and apply it (tests, replays, shutdown). The wait itself
        holds no lock: other threads go on appending meanwhile."""
        background = self.background
        if background is None:
            return []
        results: list[PassResult] = []
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                results += background.collect(self.ledger)
                if not background.busy:
                    return results
            left = deadline - time.monotonic()
            if left <= 0:
                return results
            background.wait(left)

    def close(self) -> None:
        """Finish background work, write what is pending and give up the store's writer lease (the store
        itself stays open: the caller owns it)."""
        if self.background is not None:
            self.drain()
            self.background.close()
        with self._lock:
            self._flush()
            self._save_skips()
            if self.store is not None and self._lease is not None:
                lease, self._lease = self._lease, None
                try:
                    _give_back_lease(self.store, self.session_id, lease)
                except StoreError as exc:
                    log.warning("Session store: could not release the writer lease (%s)", exc)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
