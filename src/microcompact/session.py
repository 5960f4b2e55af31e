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
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .background import BackgroundPasses
from .batch import BatchCompactor, BatchResult
from .config import Config
from .messages import Message, disown_marker_text, to_api, validate_message
from .micro import CommitHook, MicroCompactor, PassResult
from .summarizers import Summarizer, make_summarizer
from .telemetry import occupancy_pct
from .store import StoreConflict, StoreReadOnly
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
        raise ConfigError("auxiliary.compression.model: required when provider is "
                          f"{aux.provider!r} (the model name the endpoint serves)")
    return make_summarizer("openai", model=aux.model, base_url=aux.base_url, api_key_env=aux.api_key_env,
                           timeout=aux.timeout, max_output_tokens=aux.max_output_tokens,
                           temperature=aux.temperature)


# The store's bookkeeping on a message: meaningful only on rows it handed out itself (Session.open).
_STORE_KEYS = ("_row", "_pos", "_tokens")


def _own(message: Message) -> Message:
    """The caller's message without store bookkeeping (a message copied from another session's transcript
    would otherwise pass for one already stored)."""
    if not any(k in message for k in _STORE_KEYS):
        return message
    return {k: v for k, v in message.items() if k not in _STORE_KEYS}


class Session:
    """One conversation: append messages, send ``messages``, call the hooks; compaction happens inside."""

    def __init__(self, config: Config | None = None, summarizer: Summarizer | None = None, *,
                 session_id: str | None = None, counter: TokenCounter | None = None,
                 messages: Iterable[Message] = (), commit: CommitHook | None = None,
                 clock: Callable[[], float] = time.time, store: SessionStore | None = None,
                 _stored: bool = False) -> None:
        self.config = config or Config()
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.store = store
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
        if store is not None and not _stored and store.load_active(self.session_id):
            raise ValueError(f"session {self.session_id!r} already exists in the store: resume it with "
                             "Session.open(store, session_id)")
        self.ledger = Ledger(self.counter, initial)
        self.micro = MicroCompactor(self.config, self.summarizer, self.counter, session_id=self.session_id,
                                    commit=commit, wall_clock=clock)
        self.batch = BatchCompactor(self.config, self.summarizer, self.counter, session_id=self.session_id,
                                    commit=commit)
        self._micro_passes_at_last_batch = 0
        self.background = BackgroundPasses(self.micro) if self.config.compression.micro_compact_background else None
        # Messages appended but not yet written to the store (each is written once, in order).
        self._unflushed: list[Message] = [m for m in self.ledger.messages if "_row" not in m] if store else []
        self._skips_saved: set[str] = set()
        self._flush_failed = False
        # Row of the last message when finalize_turn last completed (restored by open): tells a resumed replay
        # whether the turn that ends the stored transcript was finalized before the interruption.
        self.finalized_row: int | None = None
        if not self.micro.active and not self.config.threshold_tokens():
            log.warning("Session %s: compaction is inactive (compression.micro_compact is off and "
                        "model.context_length is unknown, so batch compaction never triggers)", self.session_id)

    @classmethod
    def open(cls, store: SessionStore, session_id: str, config: Config | None = None,
             summarizer: Summarizer | None = None, **kwargs: Any) -> "Session":
        """Resume ``session_id`` from ``store`` (or start it): active messages are loaded, and the engine
        recovers its cursor and rolling summary from the last marker, so no work is redone. Exchanges
        skipped after repeated failures stay skipped."""
        try:
            store.create_session(session_id)
        except StoreReadOnly:
            log.warning("Session store is read-only: session %s is loaded, but nothing will be written", session_id)
        session = cls(config, summarizer, session_id=session_id, messages=store.load_active(session_id),
                      store=store, _stored=True, **kwargs)
        session.micro.state.skipped |= store.skipped(session_id)
        session._skips_saved = set(session.micro.state.skipped)
        meta = store.session_meta(session_id)
        session.micro.state.turns = int(meta.get("micro_turns", 0))  # the every-N-turns cadence goes on
        session.finalized_row = meta.get("finalized_row")
        return session

    # ------------------------------------------------------------------ the transcript

    def append(self, message: Message) -> None:
        """Add a message (a copy is kept; the caller's dict is never changed)."""
        validate_message(message, f"message {len(self.ledger)}")
        owned = self.ledger.append(disown_marker_text(_own(message)))
        if self.store is not None:
            self._unflushed.append(owned)

    def flush(self) -> bool:
        """Write appended messages to the store (append-only; each once). False when the store failed:
        they stay pending and are retried at the next flush, and the session goes on."""
        if self.store is None or not self._unflushed:
            return True
        try:
            if self._flush_failed:
                self._adopt_committed()  # the failed write may have committed (connection lost during COMMIT)
            if self._unflushed:
                self.store.append(self.session_id, self._unflushed)
        except Exception as exc:
            self._flush_failed = True
            log.error("Session store: could not write %d message(s), will retry (%s: %s)", len(self._unflushed),
                      type(exc).__name__, exc)
            return False
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
        if not extra or len(extra) > len(self._unflushed) or \
                to_api(extra) != to_api(self._unflushed[:len(extra)]):
            return
        for stored, pending in zip(extra, self._unflushed):
            pending["_pos"], pending["_row"] = stored["_pos"], stored["_row"]
        self._unflushed = self._unflushed[len(extra):]

    def _resync(self) -> None:
        """Memory disagrees with the store (a pass committed whose acknowledgement was lost, or another
        writer): adopt the stored transcript plus what is pending; recover the engine's cursor and summary."""
        assert self.store is not None
        stored = self.store.load_active(self.session_id)
        self.ledger = Ledger(self.counter, stored + self._unflushed)
        self._unflushed = self.ledger.messages[len(stored):]
        self.micro.recover(self.ledger.messages)
        log.warning("Session store: the in-memory transcript was stale; reloaded %d stored message(s)",
                    len(stored))

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
        for m in messages:
            self.append(m)

    @property
    def messages(self) -> list[Message]:
        """What to send to the provider: library metadata stripped (a finished background pass applied)."""
        if self.background is not None:
            self.background.collect(self.ledger)
        return to_api(self.ledger.messages)

    @property
    def transcript(self) -> list[Message]:
        """The transcript with library metadata (markers are recognisable), e.g. for export."""
        return list(self.ledger.messages)

    @property
    def tokens(self) -> int:
        return self.ledger.total

    def occupancy_pct(self) -> float | None:
        return occupancy_pct(self.counter.estimate_prompt(self.ledger.total), self.config.threshold_tokens())

    def record_usage(self, prompt_tokens: int | None) -> None:
        """Calibrate token estimates with the provider's ``usage.prompt_tokens`` for the last request."""
        if prompt_tokens:
            self.counter.calibrate(self.ledger.total, int(prompt_tokens))

    # ------------------------------------------------------------------ hooks

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True when the prompt (the provider's figure when given, else counted) reaches the threshold."""
        return self.batch.should_compress(self.ledger, prompt_tokens)

    def before_request(self, prompt_tokens: int | None = None) -> list[PassResult | BatchResult]:
        """Call before every model request: batch compaction when over the threshold, then absorption of
        long-turn iterations that left the tail. Never raises."""
        results: list[PassResult | BatchResult] = []
        try:
            self.flush()
            if self.background is not None:
                results += self.background.collect(self.ledger)
            if self.batch.should_compress(self.ledger, prompt_tokens):
                results.append(self._batch(reason="threshold", prompt_tokens=prompt_tokens))
            if self.background is None:
                results += self.micro.before_request(self.ledger)
            elif self.micro.active and not self.background.busy:
                self.background.submit(self.ledger, "request")
        except Exception:
            log.exception("before_request failed unexpectedly; the session goes on uncompacted")
        return results

    def compact(self, focus: str | None = None) -> BatchResult:
        """Batch compaction on demand (``force``), optionally favouring ``focus`` in the summary."""
        return self._batch(reason="on_demand", force=True, focus=focus)

    def _batch(self, **kwargs: Any) -> BatchResult:
        since = self.micro.state.passes_total - self._micro_passes_at_last_batch
        result = self.batch.compact(self.ledger, micro_passes_since_last=since if self.micro.active else None,
                                    **kwargs)
        if result.changed:
            # Micro state continues from the new marker; the old rolling summary went into the batch one.
            self.micro.recover(self.ledger.messages)
            self._micro_passes_at_last_batch = self.micro.state.passes_total
        return result

    def finalize_turn(self, completed: bool = True) -> list[PassResult]:
        """Call after each turn; ``completed=False`` for an interrupted or failed turn. Never raises.

        In background mode it returns at once: the pass runs on a worker thread and its result is applied
        at the next call (or ``messages`` read) if the transcript under it did not change.
        """
        results: list[PassResult] = []
        try:
            self.flush()
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
        """Wait for a background pass to finish and apply it (tests, replays, shutdown)."""
        if self.background is None:
            return []
        results: list[PassResult] = []
        deadline = time.monotonic() + timeout
        while self.background.busy and time.monotonic() < deadline:
            results += self.background.collect(self.ledger, wait=max(0.0, deadline - time.monotonic()))
        return results

    def close(self) -> None:
        """Finish background work and write what is pending (the store itself stays open: the caller owns it)."""
        if self.background is not None:
            self.drain()
            self.background.close()
        self.flush()
        self._save_skips()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

