"""One summarizer call made safe: the input redacted and bounded, failures backed off, and the
deterministic extractive summary instead when the window is at risk.

:class:`SummarizerCalls` is the batch engine's collaborator for this; it owns the backoff and the time
spent in the summarizer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..events import Outcome
from ..messages import Message
from ..redact import error_text, redact_text
from ..summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummarizerAuthError,
    clean_summary,
    prepare_exchange,
    render_exchange,
    shorten_summary,
)
from ..tokens import TokenCounter
from .backoff import Backoff

log = logging.getLogger("microcompact")

FALLBACK_NOTE = "- {count} earlier messages ({tokens:,} tokens) compacted; no facts could be extracted from them."
OMITTED_MESSAGES = (
    "[... {count} messages ({tokens:,} tokens) omitted by microcompact: the summarizer's input limit ...]"
)


class SummarizerCalls:
    """Bounded input, the call, and the fallback that keeps the session going."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        fallback: ExtractiveSummarizer,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.summarizer = summarizer
        self.counter = counter
        self.fallback = fallback
        self.clock = clock
        self.backoff = Backoff(clock)
        self.summarizer_ms_total = 0.0

    def bound_input(self, material: list[Message], budget: int | None = None) -> list[Message]:
        """Redacted copies within ``budget`` (the summarizer's input limit by default); whole messages cut
        head-and-tail with a note."""
        budget = budget or self.config.auxiliary.compression.max_input_tokens
        prepared = prepare_exchange(material, budget, self.counter.count_text)
        counts = [self.counter.count_text(render_exchange([m])) for m in prepared]
        if sum(counts) <= budget * 1.05:
            return prepared
        head: list[Message] = []
        tail: list[Message] = []
        spent = 0
        lo, hi = 0, len(prepared) - 1
        while lo <= hi:  # alternate oldest and newest so both ends survive
            side = lo if len(head) <= len(tail) else hi
            if spent + counts[side] > budget:
                break
            spent += counts[side]
            if side == lo:
                head.append(prepared[lo])
                lo += 1
            else:
                tail.append(prepared[hi])
                hi -= 1
        omitted = prepared[lo : hi + 1]
        note = {
            "role": "assistant",
            "content": OMITTED_MESSAGES.format(count=len(omitted), tokens=sum(counts[lo : hi + 1])),
        }
        return head + ([note] if omitted else []) + list(reversed(tail))

    def call(
        self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int, at_risk: bool
    ) -> tuple[str | None, str, str | None, str]:
        """(summary, outcome, error, summarizer name): the configured model, else the fallback when ``at_risk``."""
        name = getattr(self.summarizer, "name", "?")
        blocked = self.backoff.blocked()
        error = None
        if blocked is None:
            s0 = self.clock()
            try:
                text = self._clean(self.summarizer.batch(previous, bounded, focus), input_tokens)
                self.summarizer_ms_total += (self.clock() - s0) * 1000
                self.backoff.succeeded()
                return text, Outcome.COMPACTED, None, name
            except Exception as exc:
                self.summarizer_ms_total += (self.clock() - s0) * 1000
                self.backoff.failed(exc)
                error = type(exc).__name__
                level = logging.ERROR if isinstance(exc, SummarizerAuthError) else logging.WARNING
                log.log(level, "Batch compaction: summarizer failed (%s: %s)", error, error_text(exc))
                blocked = self.backoff.blocked()
        # The model is unavailable. Keep the session alive with the deterministic summary when it matters.
        if at_risk:
            text = self.fallback_text(previous, bounded, focus, input_tokens)
            log.warning("Batch compaction: using the deterministic extractive summary (%s)", blocked or error)
            return text, Outcome.FALLBACK, error, self.fallback.name
        outcome = (
            Outcome.AUTH_FAILED
            if self.backoff.auth_error
            else (Outcome.COOLDOWN if error is None else Outcome.SUMMARIZE_FAILED)
        )
        return None, outcome, error or blocked, name

    def fallback_text(self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int) -> str:
        """The deterministic summary, always valid: never empty and never longer than what it summarizes.

        The extractive summary can come out empty (nothing extractable) or, on a small middle, longer than
        its input (section headings, a quoted previous summary); the session is near the context limit, so
        the fallback shortens it deterministically instead of failing.
        """
        limit = max(input_tokens, 200)
        try:
            text = redact_text(str(self.fallback.batch(previous, bounded, focus) or "")).strip()
        except Exception:
            log.exception("Batch compaction: the extractive summary failed; using a bare note")
            text = ""
        if not text:
            text = FALLBACK_NOTE.format(count=len(bounded), tokens=input_tokens)
        if self.counter.count_text(text) > limit:
            text = shorten_summary(text, limit, self.counter.count_text)
        return self._clean(text, input_tokens)

    def _clean(self, text: Any, input_tokens: int) -> str:
        return clean_summary(text, max(input_tokens, 200), self.counter.count_text)
