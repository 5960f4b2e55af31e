"""What the provider's cache did for one session, as its responses reported it: read, not guessed.

Every response says how much of its prompt was read from the cache and how much was written to it
(Anthropic: ``cache_read_input_tokens`` / ``cache_creation_input_tokens``; OpenAI: ``cached_tokens``).
:class:`CacheObservations` keeps the last few reports of one session and answers what scheduling asks:
how long the cached prefix is, whether the cache is warm (the TTL clock is the fallback when a provider
reports nothing), how fast the session sends requests, how fast its prompt grows, and whether the last
fold was paid for (the request after it had to write what the fold changed) or came free (the cache was
cold anyway).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("microcompact")

RECENT_REPORTS = 16  # reports kept per session: enough for a rate, small enough to follow a change


@dataclass(frozen=True)
class UsageReport:
    """One response's prompt usage. ``cache_read_tokens`` / ``cache_write_tokens`` are None when the
    provider said nothing about its cache (then only the TTL clock tells whether it is warm)."""

    prompt_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    at: float = 0.0  # when the request was answered (the session's clock, seconds)
    turn_over: bool | None = None  # the answer ended the client's turn (None: the response did not say)

    @property
    def reports_cache(self) -> bool:
        return self.cache_read_tokens is not None or self.cache_write_tokens is not None

    @property
    def cached_after(self) -> int:
        """Tokens of this prompt the cache holds after the request (read + written; with automatic caching
        the whole prompt once it reported reading any)."""
        read, written = self.cache_read_tokens or 0, self.cache_write_tokens or 0
        if self.cache_write_tokens is None and read:
            return self.prompt_tokens
        return read + written


@dataclass(frozen=True)
class CacheTotals:
    """What the provider's cache did for a session so far, as its responses reported it."""

    read: int  # prompt tokens read from the cache
    written: int  # prompt tokens written to it
    folds: int  # view switches (folds) noted


def usage_count(value: Any, name: str, where: str) -> int | None:
    """``value`` as a token count, or None with one log line when it is not a count (a missing field is
    None without a line)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        log.warning("%s: ignoring usage field %s=%s (not a token count)", where, name, _shown(value))
        return None
    return value


def checked_report(
    prompt_tokens: Any, cache_read: Any = None, cache_write: Any = None, *, at: float = 0.0, where: str = "usage"
) -> UsageReport | None:
    """A report from raw usage values: a field that is not a count, or a cache figure larger than the
    prompt, is ignored with one log line; None when not even the prompt size is usable."""
    prompt = usage_count(prompt_tokens, "prompt_tokens", where)
    if not prompt:
        return None
    read = usage_count(cache_read, "cache_read_tokens", where)
    written = usage_count(cache_write, "cache_write_tokens", where)
    if (read or 0) + (written or 0) > prompt:
        log.warning(
            "%s: ignoring cache usage (read %s + written %s is more than the prompt's %d tokens)",
            where,
            read,
            written,
            prompt,
        )
        read = written = None
    return UsageReport(prompt, read, written, at)


def _opt(value: Any) -> int | None:
    return None if value is None else int(value)


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:40] + "..."


class CacheObservations:
    """The recent usage reports of one session, and what they say about its cache. Thread-safe."""

    def __init__(self) -> None:
        self._reports: deque[UsageReport] = deque(maxlen=RECENT_REPORTS)
        self._lock = threading.Lock()
        self._fold_pending = False  # a fold changed the view; the next report says what it cost
        self.last_fold_paid: bool | None = None  # None: no fold reported on yet
        self.cache_read_total = 0
        self.cache_write_total = 0
        self.folds = 0
        self.paid_folds = 0
        # What the session saw itself at its recent requests (note_request), for when the provider reports
        # nothing: the prompt's estimate when a schedule decided, and the wall-clock time of the request.
        self.prompt_estimates: deque[int] = deque(maxlen=RECENT_REPORTS)
        self.request_times: deque[float] = deque(maxlen=RECENT_REPORTS)

    def record(self, report: UsageReport) -> None:
        with self._lock:
            if self._fold_pending and report.reports_cache:
                self.last_fold_paid = bool(report.cache_read_tokens) and bool(report.cache_write_tokens)
                self.paid_folds += int(self.last_fold_paid)
                self._fold_pending = False
            self._reports.append(report)
            self.cache_read_total += report.cache_read_tokens or 0
            self.cache_write_total += report.cache_write_tokens or 0

    def note_request(self, *, at: float | None = None, prompt_estimate: int | None = None) -> None:
        """A schedule decided on a prompt estimated at ``prompt_estimate`` tokens, or a request is made at
        ``at`` (wall clock): kept beside the reports, to measure growth and rate by when there are none."""
        with self._lock:
            if prompt_estimate is not None:
                self.prompt_estimates.append(prompt_estimate)
            if at is not None:
                self.request_times.append(at)

    def note_fold(self) -> None:
        """The view was just switched (a fold): the next report tells whether it was paid for."""
        with self._lock:
            self.folds += 1
            self._fold_pending = True

    def totals(self) -> CacheTotals:
        with self._lock:
            return CacheTotals(self.cache_read_total, self.cache_write_total, self.folds)

    def memory(self) -> dict[str, Any]:
        """The observations as JSON values (carried to the next process that continues the session)."""
        with self._lock:
            return {
                "reports": [[r.prompt_tokens, r.cache_read_tokens, r.cache_write_tokens, r.at] for r in self._reports],
                "fold_pending": self._fold_pending,
                "last_fold_paid": self.last_fold_paid,
                "totals": [self.cache_read_total, self.cache_write_total, self.folds, self.paid_folds],
            }

    def restore(self, memory: dict[str, Any]) -> None:
        """Take back :meth:`memory` (TypeError/ValueError on a malformed value)."""
        reports = [UsageReport(int(p), _opt(r), _opt(w), float(at)) for p, r, w, at in memory.get("reports") or []]
        read, written, folds, paid = (int(v) for v in memory.get("totals") or (0, 0, 0, 0))
        paid_last = memory.get("last_fold_paid")
        with self._lock:
            self._reports.clear()
            self._reports.extend(reports)
            self._fold_pending = bool(memory.get("fold_pending"))
            self.last_fold_paid = None if paid_last is None else bool(paid_last)
            self.cache_read_total, self.cache_write_total, self.folds, self.paid_folds = read, written, folds, paid

    @property
    def last(self) -> UsageReport | None:
        with self._lock:
            return self._reports[-1] if self._reports else None

    @property
    def cached_prefix_tokens(self) -> int:
        """Tokens the provider's cache held after the last request (0 when unknown)."""
        last = self.last
        return last.cached_after if last is not None else 0

    def warm(self, now: float, ttl_seconds: float) -> bool:
        """True while the cache should still hold the last prompt: a request came within the TTL, and the
        last report (when it speaks of the cache) read or wrote something. A provider that reports a read
        of nothing on a request after the first has no warm cache for this session."""
        with self._lock:
            if not self._reports:
                return False
            last = self._reports[-1]
            if now - last.at > ttl_seconds:
                return False
            if not last.reports_cache:
                return True
            seen_before = len(self._reports) > 1
            return bool(last.cache_read_tokens) or not seen_before or bool(last.cache_write_tokens)

    def request_interval(self) -> float | None:
        """The mean time between the session's recent requests (seconds), or None before two reports."""
        with self._lock:
            times = [r.at for r in self._reports]
        if len(times) < 2:
            return None
        return max(0.0, (times[-1] - times[0]) / (len(times) - 1))

    def growth_per_request(self) -> float | None:
        """How much the prompt grows per request, from the recent reports (drops, i.e. folds, left out)."""
        with self._lock:
            sizes = [r.prompt_tokens for r in self._reports]
        steps = [b - a for a, b in itertools.pairwise(sizes) if b >= a]
        return sum(steps) / len(steps) if steps else None


__all__ = ["CacheObservations", "CacheTotals", "UsageReport", "checked_report", "usage_count"]
