"""Counters and histograms for ``GET /metrics``, in the Prometheus text exposition format.

Kept in-process and thread-safe (engine work runs on worker threads); no client library needed for a
handful of series.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..bill.cost_line import CostLine

OCCUPANCY_BUCKETS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0)
OVERHEAD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.5, 1.0)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [
            f'{name}_bucket{{le="{bound:g}"}} {count}' for bound, count in zip(self.buckets, self.counts, strict=True)
        ]
        out += [f'{name}_bucket{{le="+Inf"}} {self.total}', f"{name}_sum {self.sum:.6f}", f"{name}_count {self.total}"]
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.passes: Counter[str] = Counter()
        self.degraded: Counter[str] = Counter()
        self.tokens_saved = 0
        self.thinking: Counter[str] = Counter()  # thinking blocks removed or left to drop, binding refusals retried
        self.modes: Counter[tuple[str, str, str]] = Counter()  # (api, mode, passthrough reason or "")
        self.occupancy = Histogram(OCCUPANCY_BUCKETS)
        self.overhead = Histogram(OVERHEAD_BUCKETS)
        # The provider's cache, as responses reported it, and the estimated cost against not compacting.
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        self.folds = 0
        self.answered = 0  # requests of a held conversation whose response ended (each one cost line)
        self.unpriced = 0  # of those, with usage but no known price for their model
        self.cost_spent = 0.0
        self.cost_uncompacted = 0.0
        # serve --audit: what rewriting would have done to the requests forwarded as they came.
        self.would_have_tokens_saved = 0
        self.would_have_folds = 0
        self.cost_would_have = 0.0

    def request(self, api: str, status: int) -> None:
        with self._lock:
            self.requests[(api, status)] += 1

    def passes_done(self, outcomes: Sequence[str]) -> None:
        with self._lock:
            self.passes.update(outcomes)

    def degrade(self, reason: str) -> None:
        with self._lock:
            self.degraded[reason] += 1

    def thinking_event(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.thinking[name] += n

    def mode(self, api: str, mode: str, reason: str) -> None:
        """One answer's X-Microcompact-Mode: ``compacted``, or ``passthrough`` and why."""
        with self._lock:
            self.modes[(api, mode, reason)] += 1

    def proxy_overhead(self, seconds: float) -> None:
        with self._lock:
            self.overhead.observe(seconds)

    def figures(self, line: CostLine) -> None:
        """One answered request's figures (its cost line, as the headers, ``report`` and the page sum them)."""
        with self._lock:
            self.answered += 1
            if line.occupancy_pct is not None:
                self.occupancy.observe(round(line.occupancy_pct, 1))
            self.tokens_saved += line.tokens_saved
            self.cache_read_tokens += line.cache_read_tokens or 0
            self.cache_write_tokens += line.cache_write_tokens or 0
            self.folds += int(line.folded)
            if line.spent is not None and line.uncompacted is not None:
                self.cost_spent += round(line.spent, 6)
                self.cost_uncompacted += round(line.uncompacted, 6)
            elif line.prompt_tokens is not None:
                self.unpriced += 1

    def would_have(self, tokens_saved: int, folded: bool) -> None:
        """An audited request: the tokens its view would have saved, and whether it would have folded."""
        with self._lock:
            self.would_have_tokens_saved += max(0, tokens_saved)
            self.would_have_folds += int(folded)

    def would_have_cost(self, dollars: float) -> None:
        with self._lock:
            self.cost_would_have += dollars

    def _audit_lines(self) -> list[str]:
        return [
            "# HELP microcompact_would_have_tokens_saved_total Audit: prompt tokens rewriting would not have sent.",
            "# TYPE microcompact_would_have_tokens_saved_total counter",
            f"microcompact_would_have_tokens_saved_total {self.would_have_tokens_saved}",
            "# HELP microcompact_would_have_folds_total Audit: requests whose view would have been folded.",
            "# TYPE microcompact_would_have_folds_total counter",
            f"microcompact_would_have_folds_total {self.would_have_folds}",
            "# HELP microcompact_would_have_cost_dollars_total Audit: estimated dollars of the audited requests "
            "had they been rewritten (their spent and uncompacted are in microcompact_cost_dollars_total).",
            "# TYPE microcompact_would_have_cost_dollars_total counter",
            f"microcompact_would_have_cost_dollars_total {self.cost_would_have:.6f}",
        ]

    def _cache_lines(self) -> list[str]:
        return [
            "# HELP microcompact_cache_read_tokens_total Prompt tokens the upstream read from its cache (reported).",
            "# TYPE microcompact_cache_read_tokens_total counter",
            f"microcompact_cache_read_tokens_total {self.cache_read_tokens}",
            "# HELP microcompact_cache_write_tokens_total Prompt tokens the upstream wrote to its cache (reported).",
            "# TYPE microcompact_cache_write_tokens_total counter",
            f"microcompact_cache_write_tokens_total {self.cache_write_tokens}",
            "# HELP microcompact_answered_requests_total Requests of held conversations answered (one cost line each).",
            "# TYPE microcompact_answered_requests_total counter",
            f"microcompact_answered_requests_total {self.answered}",
            "# HELP microcompact_unpriced_requests_total Answered requests whose model has no known price.",
            "# TYPE microcompact_unpriced_requests_total counter",
            f"microcompact_unpriced_requests_total {self.unpriced}",
            "# HELP microcompact_folds_total Requests whose view changed before its end (a fold rewrote the prefix).",
            "# TYPE microcompact_folds_total counter",
            f"microcompact_folds_total {self.folds}",
            "# HELP microcompact_cost_dollars_total Estimated prompt dollars: spent, and had nothing been compacted.",
            "# TYPE microcompact_cost_dollars_total counter",
            f'microcompact_cost_dollars_total{{kind="spent"}} {self.cost_spent:.6f}',
            f'microcompact_cost_dollars_total{{kind="uncompacted"}} {self.cost_uncompacted:.6f}',
            "# HELP microcompact_cost_saved_dollars Estimated dollars saved against not compacting (negative: lost).",
            "# TYPE microcompact_cost_saved_dollars gauge",
            f"microcompact_cost_saved_dollars {self.cost_uncompacted - self.cost_spent:.6f}",
        ]

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP microcompact_requests_total Requests answered, by API and HTTP status.",
                "# TYPE microcompact_requests_total counter",
            ]
            lines += [
                f'microcompact_requests_total{{api="{api}",status="{status}"}} {n}'
                for (api, status), n in sorted(self.requests.items())
            ]
            lines += [
                "# HELP microcompact_passes_total Compaction passes, by outcome.",
                "# TYPE microcompact_passes_total counter",
            ]
            lines += [f'microcompact_passes_total{{outcome="{o}"}} {n}' for o, n in sorted(self.passes.items())]
            lines += [
                "# HELP microcompact_degraded_total Requests forwarded without (full) compaction, by reason.",
                "# TYPE microcompact_degraded_total counter",
            ]
            lines += [f'microcompact_degraded_total{{reason="{r}"}} {n}' for r, n in sorted(self.degraded.items())]
            lines += [
                "# HELP microcompact_tokens_saved_total Uncompacted less reported prompt tokens, answered requests.",
                "# TYPE microcompact_tokens_saved_total counter",
                f"microcompact_tokens_saved_total {self.tokens_saved}",
                *_thinking_lines(self.thinking),
                "# HELP microcompact_occupancy_percent Forwarded view, % of the batch threshold, per answered request.",
                "# TYPE microcompact_occupancy_percent histogram",
                *self.occupancy.lines("microcompact_occupancy_percent"),
                "# HELP microcompact_mode_total Answers by X-Microcompact-Mode (compacted, or passthrough and why).",
                "# TYPE microcompact_mode_total counter",
                *(
                    f'microcompact_mode_total{{api="{api}",mode="{mode}",reason="{reason}"}} {n}'
                    for (api, mode, reason), n in sorted(self.modes.items())
                ),
                "# HELP microcompact_proxy_overhead_seconds Time in the proxy before the upstream request is sent.",
                "# TYPE microcompact_proxy_overhead_seconds histogram",
                *self.overhead.lines("microcompact_proxy_overhead_seconds"),
                *self._cache_lines(),
                *self._audit_lines(),
            ]
        return "\n".join(lines) + "\n"


def _thinking_lines(counts: Counter[str]) -> list[str]:
    """Thinking blocks a fold would have invalidated (removed by the proxy, or left for the API to drop) and
    binding refusals the proxy retried (``stripped``: all thinking removed from the changed part; ``client``:
    the client's own request)."""
    lines = [
        "# HELP microcompact_thinking_blocks_total Thinking blocks a fold would have invalidated, by action.",
        "# TYPE microcompact_thinking_blocks_total counter",
    ]
    lines += [
        f'microcompact_thinking_blocks_total{{action="{action}"}} {counts.get(f"blocks_{action}", 0)}'
        for action in ("removed", "dropped")
    ]
    lines += [
        "# HELP microcompact_thinking_refusals_retried_total Binding refusals the proxy retried, by what it sent.",
        "# TYPE microcompact_thinking_refusals_retried_total counter",
    ]
    lines += [
        f'microcompact_thinking_refusals_retried_total{{retry="{retry}"}} {counts.get(f"refusals_retried_{retry}", 0)}'
        for retry in ("stripped", "client")
    ]
    lines += [
        "# HELP microcompact_provider_compaction_total Requests left to the provider's own compaction.",
        "# TYPE microcompact_provider_compaction_total counter",
        f"microcompact_provider_compaction_total {counts.get('provider_compaction_stepped_aside', 0)}",
    ]
    return lines
