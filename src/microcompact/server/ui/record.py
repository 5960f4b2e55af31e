"""The per-request figures the conversation page draws, written to the store in each request's follow-up.

:class:`RequestRecorder` is told of every pass the proxy applies (``passes``, from the results the engine
already returns with their telemetry record) and, once a request's usage is in, writes one
``request_figures`` row (``record``): the occupancy the headers gave, the prompt the provider reported,
its cache read and write, the request's dollars and the uncompacted counterfactual's, and the passes
applied since the conversation's previous row with the price rule's numbers for each fold. Only counts,
prices and identifiers: never transcript text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ...bill.audit_bill import AuditLine
from ...bill.cache_usage import UsageReport
from ...bill.cost_line import CostLine
from ...bill.pricing import CachePricing
from ...bill.stored_totals import LINE_KEY
from ...session import Session
from ...store import StoreError, _SQLStore
from ...store.request_figures import RequestFigures

log = logging.getLogger("microcompact")

MAX_PASSES = 64  # passes kept for one row (a burst of catch-up passes is summed past it)
MAX_LABEL = 120  # characters of a client's user agent or a model name kept
# The telemetry fields of a pass the page shows (counts and names only).
PASS_FIELDS = (
    "event",
    "outcome",
    "mode",
    "reason",
    "tokens_before",
    "tokens_after",
    "messages_before",
    "messages_after",
    "exchange_tokens",
    "summarizer_input_tokens",
    "summarizer_output_tokens",
    "occupancy_pct",
    "partial",
    "duration_ms",
)


class PassReport(Protocol):
    """A pass the engine applied, with its telemetry record (``PassResult``, ``BatchResult``)."""

    @property
    def record(self) -> dict[str, Any]: ...


class PreparedRequest(Protocol):
    """What the recorder reads of a prepared request (``server.compaction.Prepared`` is one)."""

    @property
    def api(self) -> str | None: ...  # the upstream (an ``Upstream``): which prices apply

    model: str | None
    client: str | None
    occupancy_pct: float | None
    counted_tokens: int
    folded: bool
    degraded: str | None


class AnsweredRequest(Protocol):
    """What the recorder reads of an answered request (``server.compaction.Answered`` is one)."""

    @property
    def prepared(self) -> PreparedRequest: ...
    @property
    def prompt_tokens(self) -> int | None: ...  # the prompt size the upstream reported
    @property
    def usage(self) -> UsageReport | None: ...
    @property
    def line(self) -> CostLine | None: ...  # its figures, as billed


class RequestRecorder:
    """Collects the passes applied to each conversation and writes one row per answered request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passes: dict[str, list[dict[str, Any]]] = {}

    def passes(self, session: Session, api: str | None, model: str | None, results: Sequence[PassReport]) -> None:
        """Remember the passes of ``results`` (applied just now) for the conversation's next row."""
        if not results:
            return
        pricing = session.config.cache_pricing(api, model)
        kept = [_pass_figures(r.record, pricing) for r in results]
        with self._lock:
            held = self._passes.setdefault(session.session_id, [])
            held.extend(kept)
            del held[:-MAX_PASSES]

    def record(self, session: Session, answer: AnsweredRequest, audited: AuditLine | None = None) -> None:
        """Write the row of the answered request ``answer``: its cost line's figures (the ones the headers,
        ``/metrics`` and ``report`` sum) and what the page adds (never raises: a figure lost is logged);
        ``audited``: it went up as the client sent it (``serve --audit``), and what its view would have been."""
        store = session.store
        if not isinstance(store, _SQLStore):
            return
        sid = session.session_id
        with self._lock:
            passes = self._passes.pop(sid, [])
        prepared, usage, line = answer.prepared, answer.usage, answer.line
        figures: dict[str, Any] = {
            **({k: v for k, v in line.record().items() if k not in ("event", "session_id")} if line else {}),
            **({LINE_KEY: line.line_id} if line and line.line_id else {}),  # read back as stored (bill/stored_totals)
            "api": prepared.api,
            "model": _label(prepared.model),
            "client": _label(prepared.client),
            "counted_tokens": prepared.counted_tokens,
            "degraded": prepared.degraded,
            "threshold_tokens": session.config.threshold_tokens(),
            "passes": passes,
        }
        pricing = session.config.cache_pricing(prepared.api, prepared.model)
        if pricing is not None:
            figures.update(read_price=pricing.read_price, rewrite_premium=pricing.rewrite_premium)
        if audited is not None:  # the row's fold is the one rewriting would have made (the page: "would fold")
            figures.update(_audited(audited), folded=prepared.folded)
        try:
            RequestFigures(store).add(sid, usage.at if usage and usage.at else time.time(), figures)
        except (StoreError, ValueError) as exc:
            log.warning("Proxy: the figures of a request to session %s were not stored (%s)", sid, exc)


def _audited(line: AuditLine) -> dict[str, Any]:
    """An audited row: what went up is the cost line's (the client's request, as reported, and the would-have
    dollars beside it); beside it what its view would have been."""
    would = line.would_have
    return {
        "mode": "audit",
        "would_have_tokens": would.prompt_tokens,
        "would_have_cache_read": would.cache_read_tokens,
        "would_have_cache_write": would.cache_write_tokens,
    }


def _label(text: str | None) -> str | None:
    return None if text is None else "".join(c for c in text[:MAX_LABEL] if c.isprintable())


def _pass_figures(record: dict[str, Any], pricing: CachePricing | None) -> dict[str, Any]:
    """A pass's telemetry fields, and for a pass that removed tokens the price rule's numbers: what it
    saves on every later request (removed tokens at the cache read price), the rewrite premium per
    million tokens it kept, and what its summarizer calls cost."""
    out = {k: record[k] for k in PASS_FIELDS if k in record}
    removed = int(record.get("tokens_before") or 0) - int(record.get("tokens_after") or 0)
    out["removed_tokens"] = removed
    if pricing is not None:
        out["pricing"] = pricing.name
        out["read_price"] = pricing.read_price
        out["rewrite_premium"] = pricing.rewrite_premium
        out["saving_per_request"] = round(max(0, removed) * pricing.read_price / 1_000_000, 8)
        tokens_in = int(record.get("summarizer_input_tokens") or 0)
        tokens_out = int(record.get("summarizer_output_tokens") or 0)
        out["summarizer_cost"] = round(pricing.summarizer_cost(tokens_in, tokens_out), 8)
    return out
