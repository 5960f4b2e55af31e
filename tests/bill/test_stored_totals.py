"""The bills' totals read the store's cost lines (bill/stored_totals): two processes' bills on one SQLite file
each count every line once, whether it is still pending in memory or read back from its stored row, and
the counterfactual's cache goes on from a request the other process answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from microcompact.bill.cache_usage import UsageReport
from microcompact.bill.cost_line import CostLine
from microcompact.bill.pricing import PRESETS
from microcompact.bill.proxy_bills import ProxyBills
from microcompact.bill.stored_totals import LINE_KEY
from microcompact.store import open_store
from microcompact.store.request_figures import RequestFigures

PRICING = PRESETS["anthropic"]


def _store_row(rows: RequestFigures, line: CostLine) -> None:
    """What the proxy's recorder writes for a line (server/ui/record.py)."""
    record = {k: v for k, v in line.record().items() if k not in ("event", "session_id")}
    rows.add(line.session_id, 0.0, {**record, LINE_KEY: line.line_id})


def test_two_processes_bills_count_each_stored_line_once(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        store.create_session("s")
        rows = RequestFigures(store)
        one, two = ProxyBills(rows), ProxyBills(rows)
        first = one.charge_request("s", PRICING, "anthropic", UsageReport(10_000, 0, 10_000), 2.0, False, 20.0)
        assert first.line_id and one.figures("s").requests == 1  # type: ignore[union-attr]
        _store_row(rows, first)
        assert one.refresh("s") == 1
        figures = one.figures("s")
        assert figures is not None and figures.requests == 1, "read back, no longer pending: counted once"
        assert two.figures("s") is None and two.refresh("s") == 1
        seeded = two.figures("s")
        assert seeded is not None and seeded.requests == 1 and seeded.tokens_saved == 10_000

        # The other process answers the next request: its counterfactual reads the first one's full prompt.
        second = two.charge_request("s", PRICING, "anthropic", UsageReport(12_000, 10_000, 2_000), 2.0, True, 24.0)
        assert second.uncompacted == pytest.approx(PRICING.prompt_cost(20_000, 4_000))
        assert second.line_id != first.line_id
        _store_row(rows, second)
        assert one.refresh("s") == 1 and two.refresh("s") == 1
        for bills in (one, two):
            both = bills.figures("s")
            assert both is not None and (both.requests, both.folds, both.tokens_saved) == (2, 1, 22_000)
            assert both.spent == pytest.approx(round(first.spent or 0, 6) + round(second.spent or 0, 6))
        third = one.charge_request("s", PRICING, "anthropic", UsageReport(13_000, 12_000, 1_000), 2.0, False, 26.0)
        assert third.uncompacted == pytest.approx(PRICING.prompt_cost(24_000, 2_000)), "went on from the second"


def test_without_a_store_the_figures_are_the_process_s_own_lines() -> None:
    bills = ProxyBills()
    bills.charge_request("s", PRICING, "anthropic", UsageReport(10_000, 0, 10_000), 1.0, False)
    assert bills.refresh("s") == 0
    figures = bills.figures("s")
    assert figures is not None and figures.requests == 1
