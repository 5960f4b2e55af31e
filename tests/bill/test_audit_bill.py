"""The audit's bill (``serve --audit``): the usage a compacted view would have been reported with, the
conversation's tokens per byte, and the client's request billed as it went (spent and uncompacted alike)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.audit_bill import MIN_GROWTH_BYTES, AuditBills, TokenRate, would_have_usage
from microcompact.bill.cache_usage import UsageReport
from microcompact.bill.pricing import PRESETS
from microcompact.bill.proxy_bills import ProxyBills
from microcompact.bill.session_bill import SessionBill, reported_prompt_cost


@st.composite
def reports(draw: st.DrawFn) -> UsageReport:
    prompt = draw(st.integers(1, 400_000))
    read = draw(st.none() | st.integers(0, prompt))
    written = draw(st.none() | st.integers(0, prompt - (read or 0)))
    return UsageReport(prompt, read, written, at=5.0, turn_over=draw(st.none() | st.booleans()))


@given(reports(), st.integers(-10, 500_000), st.integers(-10, 500_000), st.integers(-10, 500_000))
def test_the_view_never_costs_more_tokens_or_reads_more_than_the_clients_request(
    actual: UsageReport, left_out: int, unshared: int, new: int
) -> None:
    would = would_have_usage(actual, left_out, unshared, new)
    assert 1 <= would.prompt_tokens <= actual.prompt_tokens
    assert (would.cache_read_tokens is None) == (actual.cache_read_tokens is None and actual.cache_write_tokens is None)
    assert (would.cache_write_tokens is None) == (actual.cache_write_tokens is None)
    assert 0 <= (would.cache_read_tokens or 0) <= (actual.cache_read_tokens or 0)
    assert (would.cache_read_tokens or 0) + (would.cache_write_tokens or 0) <= would.prompt_tokens
    assert (would.at, would.turn_over) == (actual.at, actual.turn_over)


@given(reports())
def test_a_view_that_is_the_clients_own_request_is_reported_as_it_was(actual: UsageReport) -> None:
    # Nothing left out, and the view's new part is the client's: the same usage, the same dollars.
    new = actual.prompt_tokens - (actual.cache_read_tokens or 0) - (actual.cache_write_tokens or 0)
    new += actual.cache_write_tokens or 0
    would = would_have_usage(actual, 0, new, new)
    if actual.cache_write_tokens is not None or actual.cache_read_tokens is not None:
        assert would.cache_read_tokens == (actual.cache_read_tokens or 0)
    for name in PRESETS:
        assert reported_prompt_cost(PRESETS[name], would) == pytest.approx(reported_prompt_cost(PRESETS[name], actual))


def test_a_fold_breaks_the_read_at_the_fold_and_writes_the_rest() -> None:
    # The client's request read its whole previous prompt (9,000) and wrote its new 2,000; 300 of framing
    # was neither. The view leaves 6,000 out and has 5,000 after its fold point: it reads what is before.
    actual = UsageReport(11_300, 9_000, 2_000)
    would = would_have_usage(actual, 6_000, 5_000, 2_000)
    assert would.prompt_tokens == 5_300
    assert would.cache_read_tokens == 0 and would.cache_write_tokens == 5_000  # framing stays plain input
    would = would_have_usage(actual, 6_000, 2_000, 2_000)  # between folds: the view only grew
    assert (would.cache_read_tokens, would.cache_write_tokens) == (3_000, 2_000)


def test_a_cold_cache_stays_cold_and_automatic_caching_writes_nothing() -> None:
    cold = would_have_usage(UsageReport(11_300, 0, 11_000), 6_000, 2_000, 2_000)
    assert cold.cache_read_tokens == 0 and cold.cache_write_tokens == 5_000
    automatic = would_have_usage(UsageReport(11_300, 8_960, None), 6_000, 2_000, 2_000)
    assert automatic.cache_write_tokens is None and automatic.cache_read_tokens == 2_960
    silent = would_have_usage(UsageReport(11_300), 6_000, 2_000, 2_000)
    assert (silent.prompt_tokens, silent.cache_read_tokens, silent.cache_write_tokens) == (5_300, None, None)


def test_the_rate_is_the_growths_so_a_fixed_framing_cancels_out() -> None:
    rate = TokenRate()
    framing, per_byte = 300, 0.25
    first = rate.measure(1000, framing + 250)
    assert first == pytest.approx(550 / 1000) and rate.grown == 1000
    size = 1000
    while size < 1000 + MIN_GROWTH_BYTES:
        size += 2000
        measured = rate.measure(size, framing + round(size * per_byte))
    assert measured == pytest.approx(per_byte) and rate.grown == 2000
    assert rate.measure(500, framing + 125) == pytest.approx(per_byte)  # a shrink teaches nothing
    assert rate.grown == 0


def test_a_request_sent_as_it_came_is_spent_and_uncompacted_alike_with_the_summarizer_on_the_spent_side() -> None:
    pricing = PRESETS["anthropic"]
    bills = ProxyBills()
    bills.charge_summarizer("s", pricing, 1_000, 100)
    actual = UsageReport(20_000, 15_000, 5_000)
    line = bills.charge_as_sent("s", pricing, actual)
    cost = reported_prompt_cost(pricing, actual)
    assert line.uncompacted == pytest.approx(cost)
    assert line.spent == pytest.approx(cost + pricing.summarizer_cost(1_000, 100))
    assert (line.prompt_tokens, line.uncompacted_tokens, line.folded) == (20_000, 20_000, False)
    bill = bills["s"]
    assert bill.uncompacted == pytest.approx(cost) and bill.spent == pytest.approx(line.spent)
    assert SessionBill().add_as_sent(pricing, actual) == pytest.approx((cost, cost))


def test_the_audit_totals_add_up_per_conversation() -> None:
    pricing = PRESETS["openai"]
    audits = AuditBills()
    for n in range(3):
        actual = UsageReport(10_000 + n, 8_000, None)
        audits.charge("a", pricing, actual, would_have_usage(actual, 4_000, 1_000, 1_000))
    audits.charge("b", pricing, UsageReport(100), UsageReport(50))
    a = audits["a"]
    assert a.requests == 3 and a.prompt_tokens == 30_003 and a.would_have_tokens == 18_003
    assert a.cache_read == 24_000 and a.cache_written == 0
    assert 0 < a.would_have_cost < a.actual_cost
    assert sorted(audits) == ["a", "b"] and len(audits) == 2
