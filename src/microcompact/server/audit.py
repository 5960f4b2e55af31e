"""``serve --audit``: every compacted route's request goes up byte for byte as the client sent it, while the
proxy keeps the conversation as a rewriting proxy would and says what it would have sent.

Per request (:meth:`Audit.step`, on the worker thread, after the engine's step): the compacted view the
proxy would have forwarded is built as usual (the store holds it: markers, folds, absorbed originals), its
size is measured against the client's request, and the share of it the conversation's previous view had
in common (its cached prefix, a fold breaks it) is kept for the bill. What goes upstream is the client's
body with the headers any passthrough forwards. When the answer is in, the provider's usage is turned into
the usage the view would have been reported with (:func:`~microcompact.bill.audit_bill.would_have_usage`):
the session calibrates and schedules on that, as it would have had it rewritten, and both are billed.

One switch turns rewriting on for one conversation: ``microcompact sessions rewrite ID`` or ``POST
/ui/api/rewrite`` set the store flag :data:`~microcompact.keys.REWRITE_META` (:mod:`.ui.switch`), which
every ``serve --audit`` on that store reads at the conversation's next request (``--off`` / ``"rewrite":
false`` turns it back to audit). For all: ``serve`` without ``--audit``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ..bill.audit_bill import AuditBills, AuditLine, TokenRate, would_have_usage
from ..bill.cache_usage import UsageReport
from ..bill.cost_line import CostLine
from ..bill.pricing import CachePricing
from ..bill.proxy_bills import TOTALS_THROUGH, ProxyBills, Through
from ..messages import Message
from ..session import Session
from ..store import StoreError
from .metrics import Metrics
from .provider import Provider, dumps
from .ui.switch import rewrite_switched
from .view import unchanged

log = logging.getLogger("microcompact")

AUDIT_MODE = "audit"  # the X-Microcompact-Mode of an audited request
MAX_VIEWS = 10_000  # keys whose last would-have view is kept (oldest dropped first)


class PreparedView(Protocol):
    """What the audit reads of a prepared request (``server.compaction.Prepared`` is one)."""

    key: str
    messages: list[Message]  # the view it would send
    session: Session | None
    counted_tokens: int
    occupancy_pct: float | None
    folded: bool
    degraded: str | None
    outcomes: list[str]
    audit: AuditStep | None


@dataclass(frozen=True)
class AuditStep:
    """What the proxy would have sent for one audited request: its size against the client's, and how much
    of it comes after what the conversation's previous view had in common with it."""

    key: str
    client_bytes: int
    would_bytes: int
    unshared_bytes: int

    @property
    def ratio(self) -> float:
        """The view's bytes over the client's request's."""
        return self.would_bytes / self.client_bytes if self.client_bytes > 0 else 1.0


class ViewPrefixes:
    """Each conversation key's last would-have view, one hash per message (``cache_control`` left out: a
    breakpoint that moves is no change of the prefix). Thread-safe, bounded."""

    def __init__(self) -> None:
        self._views: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def unshared(self, key: str, history: Sequence[Message], messages: Sequence[Message], would_bytes: int) -> int:
        """The view's bytes after what it has in common with the key's previous view (the body around the
        messages, then its messages up to the first that differs); with no previous view, after what it has
        in common with the client's own request."""
        hashes, sizes = [], []
        for message in messages:
            text = dumps(_unmarked(message)) if isinstance(message, dict) else orjson.dumps(message)  # raises
            hashes.append(hash(text))
            sizes.append(len(text))
        with self._lock:
            previous = self._views.pop(key, None)
            self._views[key] = hashes
            while len(self._views) > MAX_VIEWS:
                self._views.pop(next(iter(self._views)))
        if previous is None:
            same = _common(list(map(id, history)), list(map(id, messages)))
        else:
            same = _common(previous, hashes)
        return min(max(0, would_bytes), sum(sizes[same:]))


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` without the ``cache_control`` of its content blocks."""
    content = message.get("content")
    if not isinstance(content, list) or not any(isinstance(b, dict) and "cache_control" in b for b in content):
        return message
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b for b in content]
    return {**message, "content": blocks}


class Audit:
    """The audit mode of one proxy: on or off, each conversation's switch, the would-have bills."""

    def __init__(self, enabled: bool, metrics: Metrics) -> None:
        self.enabled = enabled
        self.metrics = metrics
        self.bills = AuditBills()  # would-have dollars, by session id
        self.views = ViewPrefixes()
        self._rates: dict[str, TokenRate] = {}  # each key's tokens per byte, insertion-ordered, bounded
        self._rates_lock = threading.Lock()

    def rewrites(self, session: Session) -> bool:
        """True when ``session``'s compacted view goes up: audit off, or the conversation switched (a store
        that cannot say keeps it in audit: nothing is rewritten that was not asked for)."""
        if not self.enabled:
            return True
        try:
            return rewrite_switched(session.store, session.session_id)
        except StoreError:
            return False

    def step(
        self, provider: Provider, body: dict[str, Any], history: list[Message], raw: bytes, prepared: PreparedView
    ) -> AuditStep | None:
        """The request's audit (None: its view goes up, rewriting as usual). Never raises: a view that
        cannot be measured counts as the client's own request, all of it new."""
        session, messages = prepared.session, prepared.messages
        if not self.enabled or (session is not None and self.rewrites(session)):
            return None
        try:
            same = unchanged(history, messages) or not messages
            would = len(raw) if same else len(provider.body(body, messages))
            unshared = self.views.unshared(prepared.key, history, messages, would)
        except Exception as exc:
            log.warning("Proxy: the view of %s could not be measured for the audit (%s)", prepared.key, exc)
            would = unshared = len(raw)
        return AuditStep(prepared.key, len(raw), would, unshared)

    def would_have(
        self, step: AuditStep, prompt_tokens: int | None, usage: UsageReport | None
    ) -> tuple[int | None, UsageReport | None]:
        """The prompt size and usage the view would have been reported with."""
        if not prompt_tokens:
            return None, None
        with self._rates_lock:
            rate = self._rates.pop(step.key, None) or TokenRate()
            self._rates[step.key] = rate
            while len(self._rates) > MAX_VIEWS:
                self._rates.pop(next(iter(self._rates)))
            per_byte = rate.measure(step.client_bytes, prompt_tokens)
            new = round(rate.grown * per_byte)
        left_out = round((step.client_bytes - step.would_bytes) * per_byte)
        unshared = round(step.unshared_bytes * per_byte)
        would = would_have_usage(usage or UsageReport(prompt_tokens), left_out, unshared, new)
        return would.prompt_tokens, (would if usage is not None else None)

    def charge(
        self,
        bills: ProxyBills,
        session_id: str,
        pricing: CachePricing,
        actual: UsageReport,
        would: UsageReport,
        occupancy_pct: float | None = None,
    ) -> tuple[CostLine, AuditLine]:
        """Bill an audited request: the client's as it went (``bills``; its cost line, which the caller
        counts, carries the view's would-have dollars), the view as it would have."""
        audit = self.bills.charge(session_id, pricing, actual, would)
        line = bills.charge_as_sent(session_id, pricing, actual, occupancy_pct, audit.would_have_cost)
        self.metrics.would_have_cost(round(line.would_have or 0.0, 6))
        return line, audit

    def headers(self, api: str, prepared: PreparedView, bills: ProxyBills) -> dict[str, str]:
        """The X-Microcompact-* headers of an audited request; counts it in the metrics."""
        step = prepared.audit
        assert step is not None, "an audited request has its step"
        headers = {"x-microcompact-mode": AUDIT_MODE, TOTALS_THROUGH: Through.PREVIOUS.value}
        self.metrics.mode(api, AUDIT_MODE, "")
        if prepared.degraded:
            headers["x-microcompact-degraded"] = prepared.degraded
            self.metrics.degrade(prepared.degraded)
        self.metrics.passes_done(prepared.outcomes)
        session = prepared.session
        if session is None:
            return headers
        saved = _would_save(prepared.counted_tokens, step.client_bytes, step.would_bytes)
        self.metrics.would_have(saved, prepared.folded)
        sid = session.session_id
        headers["x-microcompact-session"] = sid
        if prepared.occupancy_pct is not None:
            headers["x-microcompact-occupancy"] = f"{prepared.occupancy_pct:.1f}"
        headers["x-microcompact-would-have-saved-tokens"] = str(saved)
        headers["x-microcompact-would-have-folds"] = str(session.cache_totals().folds + int(prepared.folded))
        figures = bills.figures(sid)  # the conversation's cost lines, as every other surface sums them
        if figures is None:
            return headers
        headers["x-microcompact-requests"] = str(figures.requests)
        headers["x-microcompact-cache-read"] = str(figures.cache_read_tokens)
        headers["x-microcompact-cache-write"] = str(figures.cache_write_tokens)
        if figures.priced:
            headers["x-microcompact-cost"] = f"{figures.spent:.6f}"
            headers["x-microcompact-cost-uncompacted"] = f"{figures.uncompacted:.6f}"
        if figures.would_have_priced:
            headers["x-microcompact-would-have-cost"] = f"{figures.would_have:.6f}"
            headers["x-microcompact-would-have-saved"] = f"{figures.would_have_saved:.6f}"
        return headers


def _would_save(counted_tokens: int, client_bytes: int, would_bytes: int) -> int:
    """The tokens the view would have left out, before the upstream answers: the bytes it leaves out at the
    view's own bytes-per-token rate (an estimate; the would-have usage after the answer is the measure)."""
    if would_bytes <= 0 or counted_tokens <= 0 or client_bytes <= would_bytes:
        return 0
    return round((client_bytes - would_bytes) * counted_tokens / would_bytes)


__all__ = ["AUDIT_MODE", "Audit", "AuditStep", "ViewPrefixes"]
