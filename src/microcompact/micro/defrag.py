"""Defrag: when the rolling summary outgrows ``micro_compact_defrag_threshold_tokens``, re-summarize it and
rewrite the micro marker in place (a :class:`Rewrite` event), never while the marker is in the protected
tail. The slow half (:meth:`Defrag.condense`) can run ahead on the background worker; the engine commits
the rewrite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import Config
from ..events import Outcome
from ..summarizers import (
    Summarizer,
    SummarizerAuthError,
    clean_summary,
    facts_block,
    shorten_summary,
    with_facts,
)
from ..tokens import TokenCounter
from .state import Condensed, Refusal

log = logging.getLogger("microcompact")

# Defrag output must be at most this fraction of its input to count as "clearly shorter".
DEFRAG_MAX_RATIO = 0.8


class Defrag:
    """Condensing the rolling summary: the slow half of defrag (the engine rewrites the marker)."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        clock: Callable[[], float],
        refusal: Refusal,
    ) -> None:
        self.cfg = config.compression
        self.ledger_tokens = config.ledger_room_tokens()
        self.summarizer = summarizer
        self.counter = counter
        self.clock = clock
        self.refusal = refusal
        self._last_check: tuple[str, int, bool] = ("", 0, False)  # asked again with the same summary every pass

    def needs_defrag(self, text: str) -> bool:
        """True when the rolling summary's prose is over the defrag threshold. Its ledger is not counted:
        it has a budget of its own (``Config.ledger_room_tokens``, larger than the
        threshold) and is compressed to it deterministically at every pass, so condensing could not
        shorten it and a summary whose ledger alone passed the threshold would be defragmented every pass."""
        if not text:
            return False
        threshold = self.cfg.micro_compact_defrag_threshold_tokens
        last_text, last_threshold, last_answer = self._last_check
        if text == last_text and threshold == last_threshold:
            return last_answer
        count = self.counter.count_text
        answer = count(text) > threshold and count(with_facts(text, "")) > threshold
        self._last_check = (text, threshold, answer)
        return answer

    def condense(self, text: str) -> Condensed:
        """The slow half of defrag: a clearly shorter summary, from the model or, failing that, deterministic.

        Only the prose is condensed. The ledger (files, failing commands, test runs) is compressed
        deterministically to its budget and put back beside it, so no condensing, by a model or not,
        can lose an edited file.
        """
        count = self.counter.count_text
        old_tokens = count(text)
        prose_target = self.cfg.micro_compact_defrag_threshold_tokens // 2
        block = facts_block(text, (), self.ledger_tokens, count)
        prose = with_facts(text, "") if block else text  # no ledger: a model's own "### Files" stays prose
        prose_tokens = count(prose)
        result = Condensed(text=text, old_tokens=old_tokens)
        s0 = self.clock()
        new_prose: str | None = None
        try:
            if self.refusal.error is not None:
                raise SummarizerAuthError(self.refusal.error)  # not retried: the deterministic shortening follows
            if prose and prose_tokens > prose_target:
                new_prose = with_facts(
                    self._clean(self.summarizer.condense(prose, prose_target), limit=prose_tokens), ""
                )
            else:
                new_prose, result.method = prose, "deterministic"  # nothing a model needs to shorten
        except Exception as exc:
            if isinstance(exc, SummarizerAuthError) and self.refusal.error is None:
                self.refusal.error = str(exc)[:200]
            result.outcome, result.error = Outcome.DEFRAG_FAILED, type(exc).__name__
            log.warning("Micro-compaction defrag: summarizer failed (%s: %s)", type(exc).__name__, str(exc)[:200])
        result.summarizer_ms = (self.clock() - s0) * 1000
        if new_prose is None or (prose and count(new_prose) > DEFRAG_MAX_RATIO * prose_tokens):
            # Not clearly shorter (an echoing model, say): a deterministic shortening takes over, so defrag
            # cannot run every turn forever.
            new_prose, result.method = shorten_summary(prose, prose_target, count), "deterministic"
        result.new = with_facts(new_prose, block)
        return result

    def _clean(self, text: str, limit: int) -> str:
        return clean_summary(text, limit, self.counter.count_text)
