"""The proxy's bills: every conversation's :class:`SessionBill` by session id, and what is charged to them.

The proxy charges three things: each answered request against its uncompacted counterfactual (one cost
line each), the summarizer calls of the passes it applied (or discarded), and the summary requests
``summarizer: upstream`` sends as the client's own model. The bills outlive the session objects (a shared
router reopens a session another process wrote; its bill goes on), so they are kept here, by id, and the
cost headers read them from here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from .cache_usage import CacheTotals, UsageReport
from .cost_line import CostLine
from .pricing import CachePricing
from .session_bill import SessionBill, uncompacted_prompt_tokens


class ProxyBills(Mapping[str, SessionBill]):
    """Session id -> its bill (made at the first charge). Thread-safe."""

    def __init__(self) -> None:
        self._bills: dict[str, SessionBill] = {}
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
        self, session_id: str, pricing: CachePricing, usage: UsageReport, full_ratio: float, folded: bool
    ) -> CostLine:
        """Bill an answered request (``full_ratio``: the client's request over the forwarded one, in bytes,
        which scales the reported prompt to the uncompacted counterfactual); its cost line."""
        full = uncompacted_prompt_tokens(usage.prompt_tokens, full_ratio)
        spent, uncompacted = self._bill(session_id).add(pricing, usage, full)
        return CostLine(
            session_id,
            pricing.name,
            usage.prompt_tokens,
            full,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            folded,
            spent,
            uncompacted,
        )

    def charge_as_sent(self, session_id: str, pricing: CachePricing, usage: UsageReport) -> CostLine:
        """Bill a request forwarded as the client sent it (``serve --audit``): spent and uncompacted alike;
        its cost line (the summarizer calls since on its spent side)."""
        spent, uncompacted = self._bill(session_id).add_as_sent(pricing, usage)
        return CostLine(
            session_id,
            pricing.name,
            usage.prompt_tokens,
            usage.prompt_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            False,
            spent,
            uncompacted,
        )

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

    def headers(self, session_id: str, cache: CacheTotals, folded: bool) -> dict[str, str]:
        """The cost headers of a response: what the provider's cache did for the session so far (as its
        responses reported, up to the previous one: this response's figures come after its headers; a
        fold of this request counted), and the session's cost against not compacting, in dollars."""
        headers = {
            "x-microcompact-cache-read": str(cache.read),
            "x-microcompact-cache-write": str(cache.written),
            "x-microcompact-folds": str(cache.folds + int(folded)),
        }
        bill = self.get(session_id)
        if bill is not None:
            headers["x-microcompact-cost"] = f"{bill.spent:.6f}"
            headers["x-microcompact-cost-uncompacted"] = f"{bill.uncompacted:.6f}"
        return headers


__all__ = ["ProxyBills"]
