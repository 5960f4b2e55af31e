"""The micro-compaction engine: :class:`MicroCompactor` and the state it keeps between passes.

The class is assembled from one mixin per job, each in its own module:

- :mod:`.scheduling`: *when* a pass runs (cadence, long turns before requests, cache-aware deferral);
- :mod:`.spans`: *what* it absorbs (boundaries allowed by every rule in :mod:`microcompact.properties`,
  within one :class:`~microcompact.window.Window`);
- :mod:`.passes`: *how*: plan, commit the event through the store, apply it, report it;
- :mod:`.defrag`: keeping the rolling summary short.

This module owns the cursor (where the next pass starts) and its recovery from the transcript.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..config import Config
from ..events import CommitHook, Span
from ..messages import Message, marker_body, marker_kind
from ..summarizers import Summarizer
from ..tokens import Ledger, TokenCounter
from ..window import Window, head_end, protected_head
from . import spans
from .defrag import Defrag
from .passes import Passes
from .scheduling import Scheduling
from .state import PassResult, RollingSummary

log = logging.getLogger("microcompact")


class MicroCompactor(Scheduling, Passes, Defrag):
    """Runs micro-compaction passes over a :class:`Ledger` (the transcript it owns) and never raises into
    the caller: a failing pass degrades the feature, never the session."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        session_id: str = "",
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.cfg = config.compression
        self.summarizer = summarizer
        self.counter = counter
        self.session_id = session_id
        self.commit = commit
        self.clock = clock
        self.state = RollingSummary()
        self.summarizer_ms_total = 0.0
        self.largest_pass_tokens = 0
        # Set by a SummarizerAuthError (rejected key, exhausted quota): retrying cannot help, so no more calls.
        self.auth_error: str | None = None
        # Cache-aware scheduling: wall-clock time of the last model request, and turn passes deferred.
        self.wall_clock = wall_clock
        self.last_request_at: float | None = None
        self.deferred = 0

    @property
    def active(self) -> bool:
        return bool(self.cfg.enabled and self.cfg.micro_compact)

    @property
    def cache_aware(self) -> bool:
        return self.cfg.micro_compact_cache_ttl_seconds is not None

    def _guarded(self, ledger: Ledger, mode: str) -> list[PassResult]:
        """One pass plus defrag if due; an unexpected error is logged and the transcript left as it was."""
        try:
            results = []
            res = self._pass(ledger, mode)
            if res is not None:
                results.append(res)
            defrag = self._maybe_defrag(ledger)
            if defrag is not None:
                results.append(defrag)
            return results
        except Exception:  # a pass degrades the feature, never the session
            log.exception("Micro-compaction pass failed unexpectedly; transcript left as it was")
            return []

    # ------------------------------------------------------------------ cursor and recovery

    def sync(self, ledger: Ledger, head: int | None = None) -> None:
        """Make the cursor valid for ``ledger``; recover it (and the summary) from the last marker if not.

        The check is O(1); the scan only runs when the state is lost or does not fit the transcript.
        ``head`` is the pass's ``Window.head`` when the caller has it (computed here otherwise).
        """
        msgs = ledger.messages
        st = self.state
        h = self._head(msgs) if head is None else head
        ok = st.cursor is not None and h <= st.cursor <= len(msgs)
        if ok and st.marker_index is not None:
            mi = st.marker_index
            ok = st.cursor is not None and mi < st.cursor and mi < len(msgs) and marker_kind(msgs[mi]) == "micro"
        if not ok:
            self.recover(msgs, h)

    def recover(self, msgs: list[Message], head: int | None = None) -> None:
        """Cursor just after the last marker; rolling summary from the last micro marker's body."""
        st = self.state
        h = self._head(msgs) if head is None else head
        last_any = last_micro = None
        for i in range(len(msgs) - 1, h - 1, -1):
            kind = marker_kind(msgs[i])
            if kind is None:
                continue
            if last_any is None:
                last_any = i
            if kind == "micro":
                last_micro = i
                break
        st.cursor = max(h, last_any + 1) if last_any is not None else h
        st.marker_index = last_micro
        self._set_summary(marker_body(msgs[last_micro]) if last_micro is not None else "")
        st.failures.clear()
        st.gate_floor = None

    def _head(self, msgs: list[Message]) -> int:
        """The protected head's end; counts come from the messages' cached counts (a few head messages)."""
        plain = head_end(msgs, self.cfg.protect_first_n)
        return protected_head(msgs, [self.counter.count_message(m) for m in msgs[:plain]], self.config)

    def _set_summary(self, text: str) -> None:
        self.state.text = text
        self.state.text_tokens = self.counter.count_text(text)

    # ------------------------------------------------------------------ choosing what to absorb

    def select_span(self, ledger: Ledger, mode: str, window: Window | None = None) -> tuple[Span | None, str]:
        """The span the next pass would absorb, or (None, reason): see :func:`.spans.select_span`.

        ``window`` is the pass's :class:`Window` of ``ledger``; computed here when not handed down.
        """
        if window is None:
            window = Window.of(ledger.messages, ledger.tokens, self.config)
        return spans.select_span(ledger.messages, ledger.tokens, window, self.state, self.config, mode)
