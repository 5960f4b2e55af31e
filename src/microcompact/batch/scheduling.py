"""When a batch compaction runs: at the threshold, unless paused after compactions that freed too little
(or to let the transcript grow after one that converged), and never paused when the window is at risk.

:class:`Scheduling` is a mixin of :class:`~microcompact.batch.engine.BatchCompactor`; it decides *when*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import CompressionConfig, Config
from ..tokens import Ledger, TokenCounter


class Scheduling:
    """The threshold check the session makes before each request."""

    if TYPE_CHECKING:  # provided by BatchCompactor
        config: Config
        cfg: CompressionConfig
        counter: TokenCounter
        low_yield: int
        paused_below: int | None

    def prompt_tokens(self, ledger: Ledger, reported: int | None = None) -> int:
        return int(reported) if reported else self.counter.estimate_prompt(ledger.total)

    def should_compress(self, ledger: Ledger, prompt_tokens: int | None = None) -> bool:
        """True when the prompt (reported, else counted) reaches ``threshold_tokens``."""
        threshold = self.config.threshold_tokens()
        if not self.cfg.enabled or not threshold:
            return False
        tokens = self.prompt_tokens(ledger, prompt_tokens)
        if tokens < threshold:
            return False
        # The pause is in counted tokens (like paused_below), whatever figure triggered the check.
        # Near the limit the pause yields, unless compactions there keep freeing too little as well (a head or
        # tail that cannot shrink): then a summarizer call on every request would help nobody.
        return not (
            self.paused_below is not None
            and ledger.total < self.paused_below
            and not (self._at_risk(tokens) and self.low_yield < 3)
        )

    def _at_risk(self, tokens: int) -> bool:
        """Halfway from the threshold to the context limit: too close to wait for a cooling summarizer."""
        limit, threshold = self.config.model.context_length, self.config.threshold_tokens()
        if not limit or not threshold:
            return False
        return tokens >= (threshold + limit) / 2
