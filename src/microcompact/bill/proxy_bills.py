"""The proxy's bills: every conversation's :class:`SessionBill` by session id, and what is charged to them.

The proxy charges three things: each answered request against its uncompacted counterfactual (one cost
line each), the summarizer calls of the passes it applied (or discarded), and the summary requests
``summarizer: upstream`` sends as the client's own model. The bills outlive the session objects (a shared
router reopens a session another process wrote; its bill goes on), so they are kept here, by id, and the
cost headers read them from here, with each conversation's figures (its cost lines summed:
:class:`~.cost_line.SessionCost`, the one definition of every figure): the lines the store holds, whichever
process answered them, and this process's not stored yet (:mod:`.stored_totals`), so a restarted ``serve``
and several on one store give a conversation the same totals as ``report`` and the page.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from enum import Enum

from .cache_usage import UsageReport
from .cost_line import CostLine, SessionCost
from .pricing import CachePricing
from .session_bill import SessionBill, uncompacted_prompt_tokens
from .stored_totals import FigureRows, StoredTotals

TOTALS_THROUGH = "x-microcompact-totals-through"


class Through(Enum):
    """Which request a response's total figures run through."""

    THIS = "this-request"  # the answer was read before its headers were sent (not streamed)
    PREVIOUS = "previous-request"  # a stream: its own usage comes after its headers


class ProxyBills(Mapping[str, SessionBill]):
    """Session id -> its bill (made at the first charge). Thread-safe. ``rows``: the store's cost lines
    (None: this process's lines are all there is)."""

    def __init__(self, rows: FigureRows | None = None) -> None:
        self._bills: dict[str, SessionBill] = {}
        self._totals = StoredTotals(rows)  # each conversation's cost lines summed, stored and not yet
        self._lock = threading.Lock()

    def __getitem__(self, session_id: str) -> SessionBill:
        return self._bills[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._bills))

    def __len__(self) -> int:
        return len(self._bills)

    def _bill(self, session_id: str) -> SessionBill:
        with self._lock:
            return self._bills.setdefault(session_id, SessionBill())

    def charge_request(
        self,
        session_id: str,
        pricing: CachePricing | None,
        label: str,
        usage: UsageReport | None,
        full_ratio: float,
        folded: bool,
        occupancy_pct: float | None = None,
    ) -> CostLine:
        """Bill an answered request (``full_ratio``: the client's request over the forwarded one, in bytes,
        which scales the reported prompt to the uncompacted counterfactual; ``pricing`` None: its model has
        no known price, ``label`` says which); its cost line, added to the conversation's figures."""
        if usage is None:  # no usage reported (an error, a client that left): counted, nothing billed
            line = CostLine(session_id, label, None, None, None, None, folded, None, None, occupancy_pct)
        else:
            full = uncompacted_prompt_tokens(usage.prompt_tokens, full_ratio)
            spent: float | None = None
            uncompacted: float | None = None
            if pricing is not None:
                spent, uncompacted = self._bill(session_id).add(pricing, usage, full)
                label = pricing.name
            line = _reported(session_id, label, usage, full, folded, spent, uncompacted, occupancy_pct)
        return self._added(line)

    def _added(self, line: CostLine) -> CostLine:
        """``line`` (with its id), added to its conversation's figures."""
        return self._totals.added(line)

    def refresh(self, session_id: str) -> int:
        """Read the conversation's cost lines stored since the last read (all of them, the first time this
        process sees it: a restart, or another process answered it); how many. The counterfactual's cache
        goes on from the newest when another process answered last. Raises what the store raises."""
        return self._totals.refresh(session_id, lambda full: self._bill(session_id).continue_from(full))

    def figures(self, session_id: str) -> SessionCost | None:
        """The conversation's figures through its last answered request (a copy; None before any)."""
        return self._totals.figures(session_id)

    def charge_as_sent(
        self,
        session_id: str,
        pricing: CachePricing,
        usage: UsageReport,
        occupancy_pct: float | None = None,
        would_have_cost: float | None = None,
    ) -> CostLine:
        """Bill a request forwarded as the client sent it (``serve --audit``): spent and uncompacted alike;
        its cost line (the summarizer calls since on its spent side, and on its would-have side with
        ``would_have_cost``, the view's prompt dollars), added to the conversation's figures."""
        spent, uncompacted = self._bill(session_id).add_as_sent(pricing, usage)
        line = _reported(session_id, pricing.name, usage, usage.prompt_tokens, False, spent, uncompacted, occupancy_pct)
        if would_have_cost is not None:
            line = replace(line, would_have=would_have_cost + max(0.0, spent - uncompacted))
        return self._added(line)

    def charge_summarizer(self, session_id: str, pricing: CachePricing, input_tokens: int, output_tokens: int) -> None:
        """Bill summarizer calls (nothing to bill: no bill made)."""
        if input_tokens or output_tokens:
            self._bill(session_id).add_summarizer(pricing, input_tokens, output_tokens)

    def charge_summary_request(
        self, session_id: str, pricing: CachePricing, report: UsageReport, output_tokens: int
    ) -> float:
        """Bill one summary request sent as the client's own model; its dollars (0 for an empty prompt)."""
        if report.prompt_tokens <= 0:
            return 0.0
        return self._bill(session_id).add_summary_request(pricing, report, output_tokens)

    def headers(self, session_id: str, through: Through) -> dict[str, str]:
        """The conversation's figures as response headers: its totals through the request ``through``
        names (this one, when the answer was read before its headers went out; the previous one for a
        stream, whose usage comes at its end), and ``x-microcompact-totals-through`` saying which."""
        figures = self.figures(session_id) or SessionCost(session_id)
        headers = {
            TOTALS_THROUGH: through.value,
            "x-microcompact-requests": str(figures.requests),
            "x-microcompact-tokens-saved": str(figures.tokens_saved),
            "x-microcompact-cache-read": str(figures.cache_read_tokens),
            "x-microcompact-cache-write": str(figures.cache_write_tokens),
            "x-microcompact-folds": str(figures.folds),
        }
        if figures.priced:
            headers["x-microcompact-cost"] = f"{figures.spent:.6f}"
            headers["x-microcompact-cost-uncompacted"] = f"{figures.uncompacted:.6f}"
        return headers


def _reported(
    session_id: str,
    label: str,
    usage: UsageReport,
    uncompacted_tokens: int,
    folded: bool,
    spent: float | None,
    uncompacted: float | None,
    occupancy_pct: float | None,
) -> CostLine:
    """The cost line of a request whose usage the upstream reported."""
    return CostLine(
        session_id,
        label,
        usage.prompt_tokens,
        uncompacted_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        folded,
        spent,
        uncompacted,
        occupancy_pct,
    )


__all__ = ["TOTALS_THROUGH", "ProxyBills", "Through"]
