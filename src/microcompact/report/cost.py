"""What proxy sessions spent against not compacting, from the proxy's cost lines.

``microcompact serve`` logs one ``proxy cost telemetry: {json}`` line per answered request (on the
telemetry logger): the prompt as the upstream billed it (cache reads and writes as it reported them), the
client's uncompacted prompt, and both priced in dollars with the session's prices (the counterfactual: the
uncompacted prompt read from the cache up to the previous uncompacted prompt, the rest written).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..cache_usage import COST_TAG


@dataclass
class SessionCost:
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


def _lines(path: Path) -> Iterable[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            yield from fh
    except (OSError, EOFError):
        return  # the telemetry reader already reported the file as skipped


def read_costs(paths: Iterable[Path]) -> list[SessionCost]:
    """The cost lines of ``paths``, summed per session (in order of first appearance); bad lines skipped."""
    sessions: dict[str, SessionCost] = {}
    for path in paths:
        for line in _lines(path):
            pos = line.find(COST_TAG)
            if pos < 0:
                continue
            try:
                record = json.loads(line[pos + len(COST_TAG) :])
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("event") != "proxy_cost":
                continue
            sid = str(record.get("session_id") or "?")
            sessions.setdefault(sid, SessionCost(sid)).add(record)
    return list(sessions.values())


def costs_json(costs: list[SessionCost]) -> list[dict[str, Any]]:
    return [{**asdict(c), "saved": round(c.saved, 6), "tokens_saved": c.tokens_saved} for c in costs]


def render_costs(costs: list[SessionCost], console: Console) -> None:
    """Spent / saved per session, in dollars and tokens (nothing when no proxy cost line was read)."""
    if not costs:
        return
    table = Table(title="Cost against not compacting (proxy sessions, as the upstream reported its cache)")
    for head in ("session", "prices", "requests", "folds", "prompt tok", "uncompacted tok", "cache read",
                 "cache written", "spent $", "uncompacted $", "saved $"):  # fmt: skip
        table.add_column(head, justify="left" if head in ("session", "prices") else "right")
    for c in costs:
        table.add_row(
            c.session_id[:16],
            c.pricing,
            str(c.requests),
            str(c.folds),
            f"{c.prompt_tokens:,}",
            f"{c.uncompacted_tokens:,}",
            f"{c.cache_read_tokens:,}",
            f"{c.cache_write_tokens:,}",
            f"{c.spent:.4f}",
            f"{c.uncompacted:.4f}",
            f"{c.saved:+.4f}",
        )
    console.print(table)


__all__ = ["SessionCost", "costs_json", "read_costs", "render_costs"]
