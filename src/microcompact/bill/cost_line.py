"""The proxy's cost line: one answered request billed against not compacting, written once and read back.

``microcompact serve`` logs one ``proxy cost telemetry: {json}`` line per answered request (on the
telemetry logger): the prompt as the upstream billed it (cache reads and writes as it reported them), the
client's uncompacted prompt, and both priced in dollars with the session's prices (the counterfactual: the
uncompacted prompt read from the cache up to the previous uncompacted prompt, the rest written).
``microcompact report`` sums them per session (:class:`SessionCost`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

# The proxy logs one line per answered request on the telemetry logger: this, then the record as JSON.
COST_TAG = "proxy cost telemetry: "
UNPRICED = "unpriced: "  # a model with no known price: bill/model_prices.unpriced


def figure_pct(value: float | None) -> float | None:
    """An occupancy as every surface shows it: a percentage to one decimal place."""
    return None if value is None else round(value, 1)


@dataclass(frozen=True)
class CostLine:
    """One answered request's figures (the ``proxy_cost`` record): every surface reads these, or sums them
    with :class:`SessionCost`. Token and cache figures are None when the upstream reported no usage;
    dollars are None then too, and for a model with no known price (``pricing`` says ``unpriced: MODEL``)."""

    session_id: str
    pricing: str  # the price family, "PRESET (configured)", or "unpriced: MODEL"
    prompt_tokens: int | None  # the prompt as the upstream reported it
    uncompacted_tokens: int | None  # the counterfactual prompt: the client's request had it gone up whole
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    folded: bool
    spent: float | None  # dollars, the summarizer calls made since the previous request included
    uncompacted: float | None  # dollars the uncompacted prompt would have cost
    occupancy_pct: float | None = None  # the forwarded view, % of the batch threshold (as the header said)
    # serve --audit: dollars the view rewriting would have sent would have cost, the summarizer calls since
    # the previous request included (None: not audited, or unpriced)
    would_have: float | None = None
    line_id: str = ""  # the process's id for the line, which its stored row carries (bill/stored_totals)

    @property
    def tokens_saved(self) -> int:
        """The request's tokens saved: its uncompacted prompt less its reported one (0 without usage)."""
        if self.prompt_tokens is None or self.uncompacted_tokens is None:
            return 0
        return max(0, self.uncompacted_tokens - self.prompt_tokens)

    def record(self) -> dict[str, Any]:
        """The record as logged (and stored for the page); ``would_have`` only for an audited request."""
        record: dict[str, Any] = {
            "event": "proxy_cost",
            "session_id": self.session_id,
            "pricing": self.pricing,
            "prompt_tokens": self.prompt_tokens,
            "uncompacted_tokens": self.uncompacted_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "folded": self.folded,
            "occupancy_pct": figure_pct(self.occupancy_pct),
            "spent": None if self.spent is None else round(self.spent, 6),
            "uncompacted": None if self.uncompacted is None else round(self.uncompacted, 6),
        }
        if self.would_have is not None:
            record["would_have"] = round(self.would_have, 6)
        return record

    def text(self) -> str:
        """The line's text after the logger's own prefix: the tag, then the record as JSON."""
        return COST_TAG + json.dumps(self.record(), sort_keys=True, separators=(", ", ": "))


def cost_record(line: str) -> dict[str, Any] | None:
    """The ``proxy_cost`` record a log line holds, or None (another line, or a malformed one)."""
    pos = line.find(COST_TAG)
    if pos < 0:
        return None
    try:
        record = json.loads(line[pos + len(COST_TAG) :])
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") != "proxy_cost":
        return None
    return record


@dataclass
class SessionCost:
    """One conversation's figures: its requests' cost lines summed, the one definition every surface uses
    (response headers, ``/metrics``, ``report``, the page; docs/cost-and-cache.md, "The figures").

    - ``requests``: answered requests; ``folds``: those whose view rewrote the cached prefix;
    - ``tokens_saved``: the sum over requests of the uncompacted prompt less the reported one;
    - ``occupancy_pct`` / ``occupancy_peak``: the last and the largest request's occupancy;
    - ``spent`` / ``uncompacted`` / ``saved``: dollars over the priced requests (``priced`` of them);
      ``unpriced`` names the model of the last request that had no price;
    - ``would_have`` / ``would_have_saved``: ``serve --audit``, dollars over its priced requests
      (``would_have_priced`` of them) had their view been rewritten, and their uncompacted dollars less that."""

    session_id: str
    pricing: str = ""
    requests: int = 0
    folds: int = 0
    prompt_tokens: int = 0
    uncompacted_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    spent: float = 0.0
    uncompacted: float = 0.0
    priced: int = 0
    unpriced: str = ""
    occupancy_pct: float | None = None
    occupancy_peak: float | None = None
    would_have: float = 0.0
    would_have_priced: int = 0
    audited_uncompacted: float = 0.0  # the uncompacted dollars of those requests

    @property
    def saved(self) -> float:
        return self.uncompacted - self.spent

    @property
    def would_have_saved(self) -> float:
        return self.audited_uncompacted - self.would_have

    @property
    def tokens_saved(self) -> int:
        return self.uncompacted_tokens - self.prompt_tokens

    def add(self, record: dict[str, Any]) -> None:
        self.pricing = str(record.get("pricing") or self.pricing)
        self.requests += 1
        self.folds += int(bool(record.get("folded")))
        prompt, full = _count(record.get("prompt_tokens")), _count(record.get("uncompacted_tokens"))
        if full >= prompt:  # a request without usage adds neither
            self.prompt_tokens += prompt
            self.uncompacted_tokens += full
        self.cache_read_tokens += _count(record.get("cache_read_tokens"))
        self.cache_write_tokens += _count(record.get("cache_write_tokens"))
        occupancy = record.get("occupancy_pct")
        if isinstance(occupancy, int | float) and not isinstance(occupancy, bool):
            self.occupancy_pct = figure_pct(float(occupancy))
            self.occupancy_peak = max(self.occupancy_peak or 0.0, self.occupancy_pct or 0.0)
        if self.pricing.startswith(UNPRICED):
            self.unpriced = self.pricing.removeprefix(UNPRICED)
        if isinstance(record.get("spent"), int | float) and isinstance(record.get("uncompacted"), int | float):
            self.priced += 1
            self.spent += _dollars(record.get("spent"))
            self.uncompacted += _dollars(record.get("uncompacted"))
            if isinstance(record.get("would_have"), int | float):
                self.would_have_priced += 1
                self.would_have += _dollars(record.get("would_have"))
                self.audited_uncompacted += _dollars(record.get("uncompacted"))

    def dollars(self, value: float) -> str:
        """``value`` to four places, or what the conversation's model is when none of it was priced."""
        return f"{value:.4f}" if self.priced else f"{UNPRICED}{self.unpriced}" if self.unpriced else "-"

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "spent": round(self.spent, 6),
            "uncompacted": round(self.uncompacted, 6),
            "saved": round(self.saved, 6),
            "tokens_saved": self.tokens_saved,
            "would_have": round(self.would_have, 6) if self.would_have_priced else None,
            "would_have_saved": round(self.would_have_saved, 6) if self.would_have_priced else None,
        }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dollars(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0.0


__all__ = ["COST_TAG", "UNPRICED", "CostLine", "SessionCost", "cost_record", "figure_pct"]
