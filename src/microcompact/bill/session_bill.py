"""A session's bill: what its requests cost as the provider reported them, against not compacting.

One pricing of a reported prompt (:func:`reported_prompt_cost`) serves the session's requests and the
summary requests ``summarizer: upstream`` sends as the client's own model; the counterfactual (the same
requests uncompacted) is priced beside it, from the session's own usage.
"""

from __future__ import annotations

import threading

from .cache_usage import UsageReport
from .pricing import CachePricing


def reported_prompt_cost(pricing: CachePricing, report: UsageReport) -> float:
    """Dollars for one prompt as the provider reported its cache: what was read at the read price; what
    was written at the write price, or with automatic caching (no written figure) what was not read; an
    answer that reports the written part bills the rest as plain input."""
    read = report.cache_read_tokens or 0
    if report.cache_write_tokens is None:
        return pricing.prompt_cost(read, report.prompt_tokens - read)
    written = report.cache_write_tokens
    return pricing.prompt_cost(read, written, max(0, report.prompt_tokens - read - written))


def full_ratio(sent_by_client: int, forwarded: int) -> float:
    """The client's request over the forwarded one, in bytes (1 when nothing was forwarded): what the
    counterfactual scales the reported prompt by."""
    return sent_by_client / forwarded if forwarded > 0 else 1.0


def uncompacted_prompt_tokens(prompt_tokens: int, full_ratio: float) -> int:
    """The counterfactual prompt: the forwarded one scaled by the client's request over the forwarded one
    (in bytes; never below the forwarded size)."""
    return round(prompt_tokens * max(1.0, full_ratio))


class SessionBill:
    """What a session's requests cost as the provider billed them, and what the same requests would have
    cost uncompacted: the counterfactual the session's own usage implies (the client's full prompt, its
    cache reading the previous full prompt when the real one read anything, writing the rest)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spent = 0.0  # the summarizer's calls included
        self.uncompacted = 0.0
        self.summarizer = 0.0  # of ``spent``: the summarizer's calls
        self._previous_full: int | None = None
        self._summarizer_unbilled = 0.0  # summarizer dollars not yet in a request's figure

    def add(self, pricing: CachePricing, report: UsageReport, full_prompt_tokens: int) -> tuple[float, float]:
        """Bill one request (``full_prompt_tokens``: its prompt had it not been compacted); returns the
        request's (spent, uncompacted) dollars, its spent with the summarizer calls made since the last."""
        read = report.cache_read_tokens or 0
        spent = reported_prompt_cost(pricing, report)
        full = max(full_prompt_tokens, report.prompt_tokens)
        with self._lock:
            warm = bool(read) and self._previous_full is not None
            full_read = min(self._previous_full or 0, full) if warm else 0
            self._previous_full = full
            uncompacted = pricing.prompt_cost(full_read, full - full_read)
            self.spent += spent
            self.uncompacted += uncompacted
            spent += self._summarizer_unbilled  # already in ``self.spent``; this request's line shows it
            self._summarizer_unbilled = 0.0
        return spent, uncompacted

    def continue_from(self, full_prompt_tokens: int) -> None:
        """The conversation's previous request was answered elsewhere (another process, or this one before a
        restart): the counterfactual's cache holds that request's uncompacted prompt."""
        with self._lock:
            self._previous_full = max(0, full_prompt_tokens)

    def add_as_sent(self, pricing: CachePricing, report: UsageReport) -> tuple[float, float]:
        """Bill a request that went up as the client sent it (``serve --audit``): what the provider reported
        is both what was spent and what going without the proxy costs; returns the request's (spent,
        uncompacted) dollars, its spent with the summarizer calls made since the last."""
        cost = reported_prompt_cost(pricing, report)
        with self._lock:
            self._previous_full = report.prompt_tokens  # the client's prompt is what the cache holds
            self.spent += cost
            self.uncompacted += cost
            spent = cost + self._summarizer_unbilled
            self._summarizer_unbilled = 0.0
        return spent, cost

    def add_summarizer(self, pricing: CachePricing, input_tokens: int, output_tokens: int) -> float:
        """Bill summarizer calls (counted in ``spent`` now, and in the next request's figure); their dollars."""
        return self._summarizer_dollars(pricing.summarizer_cost(max(0, input_tokens), max(0, output_tokens)))

    def add_summary_request(self, pricing: CachePricing, report: UsageReport, output_tokens: int) -> float:
        """Bill a summary request sent as the client's own model (``summarizer: upstream``): its prompt as
        the provider reported its cache, its output at the model's price, counted as a summarizer call
        (in ``spent`` now, and in the next request's figure); its dollars."""
        prompt = reported_prompt_cost(pricing, report)
        return self._summarizer_dollars(prompt + pricing.output_cost(max(0, output_tokens)))

    def _summarizer_dollars(self, dollars: float) -> float:
        with self._lock:
            self.spent += dollars
            self.summarizer += dollars
            self._summarizer_unbilled += dollars
        return dollars


__all__ = ["SessionBill", "full_ratio", "reported_prompt_cost", "uncompacted_prompt_tokens"]
