"""What an answer says of its request before the upstream answers: ``X-Microcompact-Mode`` (compacted, or
passthrough and why) and the figures a compacted request's headers carry.

Every answer carries the mode: ``compacted`` (its compacted view forwarded) or ``passthrough; reason=...``
(forwarded as it came, or refused, and why). A passthrough is counted each time and logged once per
conversation (or route) and reason, so a client that always sends what cannot be compacted fills no log.
"""

from __future__ import annotations

import logging

from ..bill.cost_line import figure_pct
from ..bill.proxy_bills import Through
from .compaction import Compaction, Prepared
from .metrics import Metrics

log = logging.getLogger("microcompact")

MODE_HEADER = "x-microcompact-mode"
# Degraded reasons under which the client's messages went up as they came (the others still compacted).
UNCOMPACTED = frozenset({"store-unavailable", "engine-error", "view-invalid"})
MAX_LOGGED_PASSTHROUGHS = 10_000  # conversations whose passthrough was logged, remembered to log it once


def mode(reason: str | None) -> str:
    """The X-Microcompact-Mode value: ``compacted``, or ``passthrough; reason=REASON``."""
    return "compacted" if reason is None else f"passthrough; reason={reason}"


class ModeHeaders:
    """The mode header of each request and the figures of a compacted one, counted in ``metrics``."""

    def __init__(self, metrics: Metrics, compaction: Compaction) -> None:
        self.metrics = metrics
        self.compaction = compaction
        self._logged: dict[tuple[str, str], None] = {}  # insertion-ordered, bounded

    def passthrough(self, api: str, reason: str, conversation: str) -> dict[str, str]:
        """The mode header of a request passed through (or refused) for ``reason``; counts it, and logs it
        once per conversation (or route) and reason."""
        self.metrics.mode(api, "passthrough", reason)
        seen = (reason, conversation)
        if seen not in self._logged:
            if len(self._logged) >= MAX_LOGGED_PASSTHROUGHS:
                self._logged.pop(next(iter(self._logged)))
            self._logged[seen] = None
            if reason == "unknown_route":
                log.warning("Proxy: refused %s, forwarded nowhere (%s)", conversation, reason)
            elif reason != "endpoint":
                log.warning("Proxy: passing %s through uncompacted (%s)", conversation or f"an {api} request", reason)
        return {MODE_HEADER: mode(reason)}

    def of_compacted_route(self, api: str, prepared: Prepared, enabled: bool) -> dict[str, str]:
        """The mode header of a compacted route's request: passthrough when nothing could be compacted."""
        reason = None
        if prepared.degraded in UNCOMPACTED:
            reason = prepared.degraded
        elif prepared.session is None:
            reason = "empty"
        elif not enabled:
            reason = "disabled"
        if reason is not None:
            return self.passthrough(api, reason, prepared.key)
        self.metrics.mode(api, "compacted", "")
        return {MODE_HEADER: mode(None)}

    def report(self, prepared: Prepared) -> dict[str, str]:
        """The X-Microcompact-* response headers as known before the upstream answers: this request's
        occupancy and prices, the conversation's totals through its previous request (a response read
        whole before it goes out gets them through itself: ``Proxy._forward``)."""
        headers: dict[str, str] = {}
        if prepared.session is not None:
            headers["x-microcompact-session"] = prepared.session.session_id
            occupancy = figure_pct(prepared.occupancy_pct)
            if occupancy is not None:
                headers["x-microcompact-occupancy"] = f"{occupancy:.1f}"
            headers["x-microcompact-pricing"] = self.compaction.pricing(prepared)[1]
            headers.update(self.compaction.bills.headers(prepared.session.session_id, Through.PREVIOUS))
        if prepared.degraded:
            headers["x-microcompact-degraded"] = prepared.degraded
            self.metrics.degrade(prepared.degraded)
        self.metrics.passes_done(prepared.outcomes)
        return headers
