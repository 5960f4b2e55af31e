"""The last resort before a request: cut the largest tool outputs and assistant texts head-and-tail until
the prompt fits the context window (the originals stay in the store).

:class:`LastResort` is a mixin of :class:`~microcompact.batch.engine.BatchCompactor`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import CompressionConfig, Config
from ..events import Outcome, Prune, apply_event
from ..messages import Message
from ..tokens import Ledger, TokenCounter
from .finish import BatchResult
from .prune import _cuttable, cut_message

log = logging.getLogger("microcompact")

CUT_MIN_TOKENS = 1024  # smaller messages are never cut
CUT_KEEP_TOKENS = 512  # a cut message keeps at least this much of its start and end together
CUT_NOTE_TOKENS = 40
CUT_MARGIN_SHARE = 0.02  # cuts aim this far under the window (token estimates are estimates)
CUT_MARGIN_MIN_TOKENS = 256


class LastResort:
    """Fitting a request into the window when compaction could not."""

    if TYPE_CHECKING:  # provided by BatchCompactor
        config: Config
        cfg: CompressionConfig
        counter: TokenCounter
        clock: Callable[[], float]
        _extra: dict[str, Any]

        def _commit(self, event: Any, msgs: list[Message]) -> bool: ...

        def _finish(
            self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
        ) -> BatchResult: ...

    def last_resort(self, ledger: Ledger) -> BatchResult | None:
        """Cut the largest tool outputs and assistant texts head-and-tail until the prompt fits the window.

        Runs before a request, after batch and micro compaction did what they could: one iteration of large
        parallel reads, or a huge message in the head or the protected tail, can still take a small window
        over its limit. Each cut keeps the start and the end of the text with an explicit omission note; the
        original stays in the store (absorbed by its cut copy). User and system messages and markers are
        never cut, so only they alone can still exceed the window. Never raises.
        """
        limit = self.config.model.context_length
        if not limit or not self.cfg.enabled or self.counter.estimate_prompt(ledger.total) <= limit:
            return None
        t0 = self.clock()
        before_tokens, before_messages = ledger.total, len(ledger.messages)
        self._extra = {}
        try:
            event = self._plan_cuts(ledger, limit)
            if event is None:  # only user and system messages, markers and small messages are left
                log.warning(
                    "Request over the context window (%d tokens, limit %d) and nothing left to cut",
                    self.counter.estimate_prompt(ledger.total),
                    limit,
                )
                return None
            if not self._commit(event, ledger.messages):
                return self._finish(ledger, Outcome.STORE_FAILED, t0, before_tokens, before_messages, reason="window")
            apply_event(ledger, event)
        except Exception as exc:
            log.exception("Last-resort cut failed unexpectedly; transcript left as it was")
            return self._finish(
                ledger, Outcome.ERROR, t0, before_tokens, before_messages, reason="window", error=type(exc).__name__
            )
        log.warning(
            "Request over the context window: cut %d message(s) head-and-tail, %d -> %d tokens (the "
            "originals are kept in the store)",
            len(event.replacements),
            before_tokens,
            ledger.total,
        )
        return self._finish(
            ledger, Outcome.TRUNCATED, t0, before_tokens, before_messages, reason="window", cut=len(event.replacements)
        )

    def _plan_cuts(self, ledger: Ledger, limit: int) -> Prune | None:
        """Cuts, largest message first, that bring the prompt under ``limit`` minus a small margin."""
        msgs, tokens = ledger.messages, ledger.tokens
        target = limit - max(CUT_MARGIN_MIN_TOKENS, int(CUT_MARGIN_SHARE * limit))
        excess = self.counter.estimate_prompt(ledger.total) - target
        candidates = sorted(
            (i for i, m in enumerate(msgs) if _cuttable(m) and tokens[i] > CUT_MIN_TOKENS),
            key=lambda i: (-tokens[i], -i),
        )
        replacements: list[tuple[int, Message]] = []
        for i in candidates:
            if excess <= 0:
                break
            keep = max(CUT_KEEP_TOKENS, tokens[i] - excess - CUT_NOTE_TOKENS)
            if keep >= tokens[i] - CUT_NOTE_TOKENS:
                continue
            cut = cut_message(msgs[i], tokens[i], keep)
            saved = tokens[i] - self.counter.count_message(cut)
            if saved <= 0:
                continue
            replacements.append((i, cut))
            excess -= saved
        return Prune(tuple(sorted(replacements, key=lambda r: r[0]))) if replacements else None
