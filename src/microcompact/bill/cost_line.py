"""The proxy's cost line: one answered request billed against not compacting, written once and read back.

``microcompact serve`` logs one ``proxy cost telemetry: {json}`` line per answered request (on the
telemetry logger): the prompt as the upstream billed it (cache reads and writes as it reported them), the
client's uncompacted prompt, and both priced in dollars with the session's prices (the counterfactual: the
uncompacted prompt read from the cache up to the previous uncompacted prompt, the rest written).
``microcompact report`` sums them per session (:class:`SessionCost`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The proxy logs one line per answered request on the telemetry logger: this, then the record as JSON.
COST_TAG = "proxy cost telemetry: "


@dataclass(frozen=True)
class CostLine:
    """One answered request's bill (the ``proxy_cost`` record)."""

    session_id: str
    pricing: str
    prompt_tokens: int
    uncompacted_tokens: int  # the counterfactual prompt: the client's request had it gone up whole
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    folded: bool
    spent: float  # dollars, the summarizer calls made since the previous request included
    uncompacted: float  # dollars the uncompacted prompt would have cost

    def text(self) -> str:
        """The line's text after the logger's own prefix: the tag, then the record as JSON."""
        record = {
            "event": "proxy_cost",
            "session_id": self.session_id,
            "pricing": self.pricing,
            "prompt_tokens": self.prompt_tokens,
            "uncompacted_tokens": self.uncompacted_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "folded": self.folded,
            "spent": round(self.spent, 6),
            "uncompacted": round(self.uncompacted, 6),
        }
        return COST_TAG + json.dumps(record, sort_keys=True, separators=(", ", ": "))


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
    """One session's cost lines summed: spent against the uncompacted counterfactual."""

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

    @property
    def saved(self) -> float:
        return self.uncompacted - self.spent

    @property
    def tokens_saved(self) -> int:
        return self.uncompacted_tokens - self.prompt_tokens

    def add(self, record: dict[str, Any]) -> None:
        self.pricing = str(record.get("pricing") or self.pricing)
        self.requests += 1
        self.folds += int(bool(record.get("folded")))
        self.prompt_tokens += _count(record.get("prompt_tokens"))
        self.uncompacted_tokens += _count(record.get("uncompacted_tokens"))
        self.cache_read_tokens += _count(record.get("cache_read_tokens"))
        self.cache_write_tokens += _count(record.get("cache_write_tokens"))
        self.spent += _dollars(record.get("spent"))
        self.uncompacted += _dollars(record.get("uncompacted"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dollars(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0.0


__all__ = ["COST_TAG", "CostLine", "SessionCost", "cost_record"]
