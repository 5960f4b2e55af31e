"""The audit's bill (``serve --audit``): what the client's own requests cost, and what the compacted view
the proxy would have sent would have cost, with the provider's cache as that view would have had it.

The normal bill (:mod:`.session_bill`) is this one reversed. There the rewritten prompt is what went up
and is priced as the provider reported it, and the client's whole prompt is the counterfactual. Here the
client's prompt went up as it came (priced as reported: that is what was paid), and the view is the
counterfactual, priced with the same :func:`~.session_bill.reported_prompt_cost` from a usage report
made for it (:func:`would_have_usage`) by the same rules:

- its size: the reported prompt less the bytes the view leaves out, at the conversation's tokens per
  byte (:class:`TokenRate`: measured on its own requests' growth, so the provider's fixed framing, which
  no byte of the body carries, is neither scaled nor left out);
- its cache read: the part of the view it shares with the conversation's previous view (a fold breaks
  it at the fold; between folds the view only grows), less what the client's own request left unread
  beyond its own new part (the provider's framing, the part after its last breakpoint, a cache's
  rounding), and never more than the client's request read (a cold or expired cache, a prefix under the
  minimum, no breakpoint at all: the view would have read nothing either);
- its cache write: the rest, but for the part after the client's last breakpoint, which the real
  request did not write either (plain input); with automatic caching (no write figure) the rest is
  plain input, as it was for the client's.

Summarizer calls are counted on the would-have side (a rewriting proxy makes the same ones), and on the
spent side too: the audit makes them to know what it would have folded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .cache_usage import UsageReport
from .pricing import CachePricing
from .session_bill import reported_prompt_cost

MIN_GROWTH_BYTES = 4096  # growth measured before the rate is taken from it (a few bytes round too coarsely)


class TokenRate:
    """One conversation's prompt tokens per body byte, from how its reported prompt grew with its requests'
    bodies (the fixed framing cancels out); until it has grown enough, the whole prompt over the whole
    body. Not thread-safe: the caller's lock."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None  # (bytes, tokens) of the previous request
        self._bytes = 0
        self._tokens = 0
        self.grown = 0  # bytes the last request measured grew by (all of it: the first, or after a shrink)

    def measure(self, body_bytes: int, prompt_tokens: int) -> float:
        """Take one request's size and reported prompt; the rate now."""
        self.grown = body_bytes if self._last is None else max(0, body_bytes - self._last[0])
        if self._last is not None:
            grown_bytes, grown_tokens = body_bytes - self._last[0], prompt_tokens - self._last[1]
            if grown_bytes > 0 and grown_tokens > 0:  # a shrinking request (a fork, the client's own cut) says nothing
                self._bytes += grown_bytes
                self._tokens += grown_tokens
        self._last = (body_bytes, prompt_tokens)
        if self._bytes >= MIN_GROWTH_BYTES:
            return self._tokens / self._bytes
        return prompt_tokens / body_bytes if body_bytes > 0 else 0.0


def would_have_usage(actual: UsageReport, left_out_tokens: int, unshared_tokens: int, new_tokens: int) -> UsageReport:
    """The usage the compacted view would have been reported with (see the module's rules).

    ``left_out_tokens``: what the view leaves out of the client's request, net of its markers;
    ``unshared_tokens``: the view's part after what it has in common with the conversation's previous
    view (the client's own request when there is none); ``new_tokens``: the client's request's part after
    its previous request (all of it for the first)."""
    prompt = max(1, actual.prompt_tokens - max(0, left_out_tokens))
    if not actual.reports_cache:
        return UsageReport(prompt, None, None, actual.at, actual.turn_over)
    real_read = actual.cache_read_tokens or 0
    unread = max(0, actual.prompt_tokens - real_read - max(0, new_tokens))  # not read though not new
    read = max(0, min(real_read, prompt - max(0, unshared_tokens) - unread))
    if actual.cache_write_tokens is None:  # automatic caching: what is not read is plain input
        return UsageReport(prompt, read, None, actual.at, actual.turn_over)
    tail = max(0, actual.prompt_tokens - real_read - actual.cache_write_tokens)  # after the last breakpoint
    written = max(0, prompt - read - tail)
    return UsageReport(prompt, read, written, actual.at, actual.turn_over)


@dataclass(frozen=True)
class AuditLine:
    """One audited request: the client's request as reported and priced, and the view's counterfactual."""

    actual: UsageReport
    would_have: UsageReport
    actual_cost: float  # dollars, the client's request as the provider reported it
    would_have_cost: float  # dollars, the view it would have sent (summarizer calls not included)


@dataclass(frozen=True)
class AuditTotals:
    """One conversation's audited requests so far (prompts only; the summarizer is the session bill's)."""

    requests: int = 0
    actual_cost: float = 0.0
    would_have_cost: float = 0.0
    prompt_tokens: int = 0
    would_have_tokens: int = 0
    cache_read: int = 0  # as the provider reported the client's requests
    cache_written: int = 0


class AuditBills(Mapping[str, AuditTotals]):
    """Session id -> its audited totals. Thread-safe."""

    def __init__(self) -> None:
        self._totals: dict[str, AuditTotals] = {}
        self._lock = threading.Lock()

    def __getitem__(self, session_id: str) -> AuditTotals:
        with self._lock:
            return self._totals[session_id]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._totals))

    def __len__(self) -> int:
        with self._lock:
            return len(self._totals)

    def charge(self, session_id: str, pricing: CachePricing, actual: UsageReport, would_have: UsageReport) -> AuditLine:
        """Bill one audited request; its line."""
        line = AuditLine(
            actual, would_have, reported_prompt_cost(pricing, actual), reported_prompt_cost(pricing, would_have)
        )
        with self._lock:
            was = self._totals.get(session_id, AuditTotals())
            self._totals[session_id] = AuditTotals(
                was.requests + 1,
                was.actual_cost + line.actual_cost,
                was.would_have_cost + line.would_have_cost,
                was.prompt_tokens + actual.prompt_tokens,
                was.would_have_tokens + would_have.prompt_tokens,
                was.cache_read + (actual.cache_read_tokens or 0),
                was.cache_written + (actual.cache_write_tokens or 0),
            )
        return line


__all__ = ["AuditBills", "AuditLine", "AuditTotals", "TokenRate", "would_have_usage"]
