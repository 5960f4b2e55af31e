"""The proxy's bills: one pricing of a reported prompt for requests and summary requests, the
counterfactual scaled by the client's request, the cost line written and read back, the cost headers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.cache_usage import UsageReport
from microcompact.bill.cost_line import CostLine, SessionCost, cost_record
from microcompact.bill.pricing import PRESETS
from microcompact.bill.proxy_bills import TOTALS_THROUGH, ProxyBills, Through
from microcompact.bill.session_bill import SessionBill, reported_prompt_cost, uncompacted_prompt_tokens

PRICINGS = st.sampled_from(sorted(PRESETS))


@st.composite
def reports(draw: st.DrawFn) -> UsageReport:
    """A usage report as ``checked_report`` lets one through: read + written within the prompt."""
    prompt = draw(st.integers(1, 400_000))
    read = draw(st.none() | st.integers(0, prompt))
    written = draw(st.none() | st.integers(0, prompt - (read or 0)))
    return UsageReport(prompt, read, written)


@given(PRICINGS, reports(), st.integers(0, 20_000))
def test_a_summary_request_costs_what_the_same_request_would_and_counts_as_the_summarizer(
    name: str, report: UsageReport, output: int
) -> None:
    pricing = PRESETS[name]
    bills = ProxyBills()
    dollars = bills.charge_summary_request("s", pricing, report, output)
    request_spent, _ = SessionBill().add(pricing, report, report.prompt_tokens)
    assert dollars == pytest.approx(request_spent + pricing.output_cost(output))
    bill = bills["s"]
    assert bill.summarizer == pytest.approx(dollars) and bill.spent == pytest.approx(dollars)
    assert bill.uncompacted == 0


def test_an_empty_summary_prompt_bills_nothing_and_makes_no_bill() -> None:
    bills = ProxyBills()
    assert bills.charge_summary_request("s", PRESETS["anthropic"], UsageReport(0), 50) == 0.0
    bills.charge_summarizer("s", PRESETS["anthropic"], 0, 0)
    assert dict(bills) == {}


def test_the_request_line_carries_the_counterfactual_and_the_summarizer_calls_since() -> None:
    pricing = PRESETS["anthropic"]
    bills = ProxyBills()
    bills.charge_summarizer("s", pricing, 10_000, 1_000)
    usage = UsageReport(20_000, 15_000, 5_000)
    line = bills.charge_request("s", pricing, "unused", usage, 2.5, folded=True)
    assert line.uncompacted_tokens == uncompacted_prompt_tokens(20_000, 2.5) == 50_000
    summarizer = pricing.summarizer_cost(10_000, 1_000)
    assert line.spent == pytest.approx(reported_prompt_cost(pricing, usage) + summarizer)
    assert line.uncompacted == pytest.approx(pricing.prompt_cost(0, 50_000))  # no earlier full prompt to read
    assert bills["s"].spent == pytest.approx(line.spent) and line.pricing == "anthropic"
    assert uncompacted_prompt_tokens(20_000, 0.5) == 20_000, "never below what was forwarded"


def test_a_cost_line_reads_back_as_it_was_written() -> None:
    line = CostLine("s1", "anthropic", 20_000, 50_000, 15_000, 5_000, True, 0.0123456789, 0.2)
    record = cost_record("2026-12-07 INFO microcompact.telemetry " + line.text())
    assert record is not None
    total = SessionCost("s1")
    total.add(record)
    assert (total.requests, total.folds, total.prompt_tokens, total.uncompacted_tokens) == (1, 1, 20_000, 50_000)
    assert total.spent == round(line.spent, 6) and total.saved == pytest.approx(0.2 - round(line.spent, 6))
    assert cost_record("no tag here") is None
    assert cost_record(line.text().replace('"proxy_cost"', '"other"')) is None
    assert cost_record(line.text()[:-2]) is None


def test_the_headers_are_the_conversation_s_figures_through_the_request_they_name() -> None:
    bills = ProxyBills()
    assert bills.headers("s", Through.PREVIOUS) == {
        TOTALS_THROUGH: "previous-request",
        "x-microcompact-requests": "0",
        "x-microcompact-tokens-saved": "0",
        "x-microcompact-cache-read": "0",
        "x-microcompact-cache-write": "0",
        "x-microcompact-folds": "0",
    }
    bills.charge_request("s", PRESETS["openai"], "openai", UsageReport(10_000, 8_000, None), 1.5, False, 12.34)
    bills.charge_request("s", PRESETS["openai"], "openai", UsageReport(6_000, 0, None), 2.0, True, 8.0)
    headers = bills.headers("s", Through.THIS)
    assert headers[TOTALS_THROUGH] == "this-request"
    assert (headers["x-microcompact-requests"], headers["x-microcompact-folds"]) == ("2", "1")
    assert headers["x-microcompact-tokens-saved"] == str(5_000 + 6_000)
    assert headers["x-microcompact-cache-read"] == "8000"
    figures = bills.figures("s")
    assert figures is not None and figures.occupancy_peak == 12.3 and figures.occupancy_pct == 8.0
    assert float(headers["x-microcompact-cost"]) == pytest.approx(bills["s"].spent, abs=2e-6)
    assert float(headers["x-microcompact-cost-uncompacted"]) == pytest.approx(bills["s"].uncompacted, abs=2e-6)


def test_an_unpriced_model_counts_its_tokens_and_no_dollars() -> None:
    bills = ProxyBills()
    line = bills.charge_request("s", None, "unpriced: gpt-9", UsageReport(10_000, 2_000, None), 2.0, False, 5.0)
    assert line.pricing == "unpriced: gpt-9" and line.spent is None and line.tokens_saved == 10_000
    headers = bills.headers("s", Through.THIS)
    assert "x-microcompact-cost" not in headers and headers["x-microcompact-tokens-saved"] == "10000"
    figures = bills.figures("s")
    assert figures is not None and figures.dollars(figures.spent) == "unpriced: gpt-9"
    assert "s" not in bills  # no dollars, no bill


def test_a_request_without_usage_is_counted_with_no_figures() -> None:
    bills = ProxyBills()
    line = bills.charge_request("s", PRESETS["anthropic"], "anthropic", None, 3.0, True, 40.0)
    assert (line.prompt_tokens, line.spent, line.tokens_saved) == (None, None, 0)
    figures = bills.figures("s")
    assert figures is not None and (figures.requests, figures.folds, figures.tokens_saved) == (1, 1, 0)
