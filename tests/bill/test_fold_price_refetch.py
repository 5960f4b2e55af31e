"""The price of dropping the working set: re-fetches cost a request and a turn, and what comes back with
them is no saving; the low-water mark follows the working set, bounded by the window."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.fold_price import (
    TURN_WEIGHT,
    WORKING_SET_SHARE,
    CacheState,
    FoldQuote,
    Verdict,
    decide,
    fold_cost,
    fold_saving,
    keep_budget,
    refetch_cost,
    requests_until_fold,
    working_set_low_water,
)
from microcompact.bill.pricing import PRESETS

WARM = CacheState(warm=True, growth_per_request=6_000.0)
COLD = CacheState(warm=False, growth_per_request=6_000.0)


def test_without_refetches_nothing_changes() -> None:
    q = FoldQuote(prompt_tokens=90_000, change_point_tokens=20_000, removed_tokens=60_000)
    assert refetch_cost(q, PRESETS["anthropic"]) == 0.0
    assert q.net_removed_tokens == q.removed_tokens


def test_a_refetch_is_a_request_at_the_current_prompt_plus_the_output_and_a_turn() -> None:
    pricing = PRESETS["anthropic"]
    q = FoldQuote(90_000, 20_000, 60_000, refetches=2, refetched_tokens=5_000)
    request = (2 * 90_000 * pricing.read_price + 5_000 * pricing.write_price) / 1_000_000
    assert refetch_cost(q, pricing) == pytest.approx((1 + TURN_WEIGHT) * request)
    assert refetch_cost(q, pricing, turn_weight=0) == pytest.approx(request)
    plain = replace(q, refetches=0, refetched_tokens=0)
    extra = refetch_cost(q, pricing)
    assert fold_cost(q, pricing, warm=True) == pytest.approx(fold_cost(plain, pricing, warm=True) + extra)
    assert fold_saving(q, pricing, WARM) < fold_saving(plain, pricing, WARM)
    assert q.net_removed_tokens == 55_000


@given(
    preset=st.sampled_from(sorted(PRESETS)),
    prompt=st.integers(10_000, 190_000),
    dropped=st.integers(500, 60_000),
    count=st.integers(1, 20),
    cache=st.sampled_from([WARM, COLD, CacheState(warm=True)]),
)
def test_a_fold_that_drops_only_the_working_set_never_pays(
    preset: str, prompt: int, dropped: int, count: int, cache: CacheState
) -> None:
    """Whatever the prices: what it removes comes back with the re-fetches, which cost a request each."""
    pricing = PRESETS[preset]
    dropped = min(dropped, prompt // 2)
    q = FoldQuote(prompt, prompt // 4, dropped, refetches=count, refetched_tokens=dropped)
    decision = decide(q, pricing, cache)
    assert not decision.fold or decision.verdict is Verdict.FORCED
    assert requests_until_fold(q, pricing, cache) != 0 or decision.verdict is Verdict.FORCED


def test_the_hard_limit_still_wins_over_refetches() -> None:
    q = FoldQuote(195_000, 20_000, 60_000, refetches=3, refetched_tokens=30_000)
    assert decide(q, PRESETS["anthropic"], WARM, cap_tokens=200_000).verdict is Verdict.FORCED


def test_a_fold_of_stale_results_still_pays_beside_a_refetch_of_none() -> None:
    pricing = PRESETS["anthropic"]
    q = FoldQuote(150_000, 20_000, 110_000)
    assert decide(q, pricing, WARM).fold
    assert not decide(replace(q, refetches=4, refetched_tokens=100_000), pricing, WARM).fold


@given(base=st.integers(0, 40_000), in_use=st.integers(0, 400_000), window=st.integers(8_000, 2_000_000))
def test_the_low_water_mark_follows_the_working_set_within_the_window(base: int, in_use: int, window: int) -> None:
    mark = working_set_low_water(base, in_use, window)
    assert base <= mark <= max(base, int(WORKING_SET_SHARE * window))
    assert mark - base == min(in_use, keep_budget(base, window))
    assert working_set_low_water(base, in_use + 1_000, window) >= mark


def test_the_low_water_mark_at_a_200k_window() -> None:
    assert working_set_low_water(4_000, 0, 200_000) == 4_000
    assert working_set_low_water(4_000, 9_000, 200_000) == 13_000
    assert working_set_low_water(4_000, 90_000, 200_000) == 20_000
    assert keep_budget(4_000, 200_000) == 16_000
