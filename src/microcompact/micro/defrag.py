"""Defrag: when the rolling summary outgrows ``micro_compact_defrag_threshold_tokens``, re-summarize it and
rewrite the micro marker in place (a :class:`Rewrite` event), never while the marker is in the protected
tail. The slow half (:meth:`Defrag.condense`) can run ahead on the background worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import CompressionConfig, Config
from ..events import Event, Outcome, Rewrite, apply_event
from ..messages import Message, render_micro_marker
from ..summarizers import Summarizer, SummarizerAuthError, facts_block, ledger_budget, shorten_summary, with_facts
from ..tokens import Ledger, TokenCounter
from ..window import Window
from .state import Condensed, PassResult, RollingSummary

log = logging.getLogger("microcompact")

# Defrag output must be at most this fraction of its input to count as "clearly shorter".
DEFRAG_MAX_RATIO = 0.8


class Defrag:
    """Keep the rolling summary short (a mixin of MicroCompactor)."""

    if TYPE_CHECKING:  # provided by MicroCompactor and Passes
        config: Config
        cfg: CompressionConfig
        summarizer: Summarizer
        counter: TokenCounter
        clock: Callable[[], float]
        state: RollingSummary
        auth_error: str | None

        def _set_summary(self, text: str) -> None: ...

        def _commit(self, event: Event, msgs: list[Message]) -> bool: ...

        def _clean(self, text: str, limit: int) -> str: ...

        def _finish(
            self,
            ledger: Ledger,
            outcome: str,
            t0: float,
            summarizer_ms: float,
            *,
            exchange_tokens: int,
            mode: str,
            tokens_before: int,
            messages_before: int,
            **extra: Any,
        ) -> PassResult: ...

    def needs_defrag(self, text_tokens: int) -> bool:
        """True when the rolling summary is over the defrag threshold."""
        return text_tokens > self.cfg.micro_compact_defrag_threshold_tokens

    def condense(self, text: str) -> Condensed:
        """The slow half of defrag: a clearly shorter summary, from the model or, failing that, deterministic.

        Only the prose is condensed. The ledger (files, failing commands, test runs) is compressed
        deterministically to its budget and put back beside it, so no condensing, by a model or not,
        can lose an edited file.
        """
        count = self.counter.count_text
        old_tokens = count(text)
        target = self.cfg.micro_compact_defrag_threshold_tokens // 2
        block = facts_block(text, (), ledger_budget(self.cfg.micro_compact_defrag_threshold_tokens), count)
        prose = with_facts(text, "") if block else text  # no ledger: a model's own "### Files" stays prose
        prose_tokens = count(prose)
        prose_target = max(target - count(block), target // 4)
        result = Condensed(text=text, old_tokens=old_tokens)
        s0 = self.clock()
        new_prose: str | None = None
        try:
            if self.auth_error is not None:
                raise SummarizerAuthError(self.auth_error)  # not retried: the deterministic shortening follows
            if prose and prose_tokens > prose_target:
                new_prose = with_facts(
                    self._clean(self.summarizer.condense(prose, prose_target), limit=prose_tokens), ""
                )
            else:
                new_prose, result.method = prose, "deterministic"  # nothing a model needs to shorten
        except Exception as exc:
            if isinstance(exc, SummarizerAuthError) and self.auth_error is None:
                self.auth_error = str(exc)[:200]
            result.outcome, result.error = Outcome.DEFRAG_FAILED, type(exc).__name__
            log.warning("Micro-compaction defrag: summarizer failed (%s: %s)", type(exc).__name__, str(exc)[:200])
        result.summarizer_ms = (self.clock() - s0) * 1000
        if new_prose is None or (prose and count(new_prose) > DEFRAG_MAX_RATIO * prose_tokens):
            # Not clearly shorter (an echoing model, say): a deterministic shortening takes over, so defrag
            # cannot run every turn forever.
            new_prose, result.method = shorten_summary(prose, prose_target, count), "deterministic"
        result.new = with_facts(new_prose, block)
        return result

    def _maybe_defrag(self, ledger: Ledger, ready: Condensed | None = None) -> PassResult | None:
        """Re-summarize a rolling summary over the defrag threshold and rewrite the marker in place."""
        st = self.state
        if st.marker_index is None or not st.text or not self.needs_defrag(st.text_tokens):
            return None
        if Window.of(ledger.messages, ledger.tokens, self.config).in_tail(st.marker_index):
            return None  # the marker is in the protected tail: never rewritten there; later, once it left
        t0 = self.clock()
        done = ready if ready is not None and ready.text == st.text else self.condense(st.text)
        if done.new == st.text:
            return None  # nothing left to shorten (the ledger's changed files alone): no rewrite
        tokens_before, messages_before = ledger.total, len(ledger.messages)
        new = done.new or ""
        event = Rewrite(st.marker_index, render_micro_marker(new), new)
        if not self._commit(event, ledger.messages):
            return self._finish(
                ledger,
                Outcome.STORE_FAILED,
                t0,
                done.summarizer_ms,
                exchange_tokens=0,
                mode="defrag",
                tokens_before=tokens_before,
                messages_before=messages_before,
            )
        apply_event(ledger, event)
        self._set_summary(new)
        st.passes_total += 1
        st.tokens_saved_total += tokens_before - ledger.total
        log.info(
            "Micro-compaction defrag: rolling summary re-summarized (%d -> %d tokens, %s)",
            done.old_tokens,
            st.text_tokens,
            done.method,
        )
        return self._finish(
            ledger,
            done.outcome,
            t0,
            done.summarizer_ms,
            exchange_tokens=0,
            mode="defrag",
            tokens_before=tokens_before,
            messages_before=messages_before,
            defrag_method=done.method,
            summary_tokens_before=done.old_tokens,
            error=done.error,
            summarizer_input_tokens=done.old_tokens,
            summarizer_output_tokens=st.text_tokens if done.method == "model" else 0,
        )
