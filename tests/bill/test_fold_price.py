"""The fold-by-price rule itself: a fold that does not pay is not made, a cold cache folds, the hard limit
always wins; and its threshold is the cycle optimum of "grow cached, fold once, grow cached again"."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.fold_price import (
    DEFAULT_GROWTH_TOKENS,
    MIN_FOLD_REQUESTS,
    CacheState,
    FoldQuote,
    Verdict,
    break_even_growth,
    decide,
    fold_cost,
    requests_ahead,
    requests_until_fold,
)
from microcompact.bill.pricing import PRESETS

ANTHROPIC = PRESETS["anthropic"]
GROWTH = 6_000.0  # a Claude Code step of ~24 KB
WARM = CacheState(warm=True, growth_per_request=GROWTH)


def quote(removed: int, kept: int = 16_000, head: int = 20_000, summarizer: int = 0) -> FoldQuote:
    return FoldQuote(head + removed + kept, head, removed, summarizer, summarizer // 10)


def test_a_fold_that_does_not_pay_is_not_made():
    decision = decide(quote(removed=6_000), ANTHROPIC, WARM)
    assert decision.verdict is Verdict.WAIT and not decision.fold
    assert decision.saving < decision.cost


def test_a_fold_that_pays_is_made():
    decision = decide(quote(removed=80_000), ANTHROPIC, WARM)
    assert decision.verdict is Verdict.FOLD and decision.saving > decision.cost


def test_a_cold_cache_folds_what_a_warm_one_would_not():
    q = quote(removed=6_000)
    assert decide(q, ANTHROPIC, WARM).verdict is Verdict.WAIT
    cold = decide(q, ANTHROPIC, CacheState(warm=False, growth_per_request=GROWTH))
    assert cold.verdict is Verdict.COLD and cold.fold
    assert cold.cost == 0.0  # no summarizer tokens in this quote, and a cold cache writes everything anyway


def test_a_cold_cache_still_weighs_an_expensive_summarizer():
    q = quote(removed=500, summarizer=2_000_000)
    assert decide(q, ANTHROPIC, CacheState(warm=False)).verdict is Verdict.WAIT


def test_the_hard_limit_always_wins():
    q = quote(removed=1_000, kept=60_000)  # would never pay
    assert decide(q, ANTHROPIC, WARM).verdict is Verdict.WAIT
    forced = decide(q, ANTHROPIC, WARM, cap_tokens=q.prompt_tokens + 1)
    assert forced.verdict is Verdict.FORCED and forced.fold
    assert decide(quote(removed=0), ANTHROPIC, WARM, cap_tokens=1).verdict is Verdict.FORCED


def test_no_cache_folds_as_soon_as_anything_is_removed():
    assert decide(quote(removed=1), PRESETS["none"], WARM).verdict is Verdict.COLD
    assert decide(quote(removed=0), PRESETS["none"], WARM).verdict is Verdict.NOTHING


def test_the_summarizer_price_counts():
    cheap, dear = quote(removed=60_000), quote(removed=60_000, summarizer=400_000)
    assert fold_cost(dear, ANTHROPIC, True) > fold_cost(cheap, ANTHROPIC, True)
    assert decide(cheap, ANTHROPIC, WARM).fold and not decide(dear, ANTHROPIC, WARM).fold


def test_the_cache_life_bounds_the_requests_that_count():
    q = quote(removed=80_000)
    short = CacheState(warm=True, growth_per_request=GROWTH, requests_left=2)
    assert requests_ahead(q, short) == 2
    assert decide(q, ANTHROPIC, short).verdict is Verdict.WAIT


@pytest.mark.parametrize("preset", ["anthropic", "openai", "openai-write", "anthropic-1h"])
def test_the_rule_switches_at_the_cycle_optimum(preset):
    p = PRESETS[preset]
    kept = 16_000
    optimum = break_even_growth(p, kept, GROWTH)
    assert 10_000 < optimum < 150_000
    assert not decide(quote(int(optimum * 0.9), kept), p, WARM).fold
    assert decide(quote(int(optimum * 1.1), kept), p, WARM).fold

    # the optimum minimises the cost per request of a cycle grown by D above the kept part
    def per_request(d: float) -> float:
        return p.read_price * d / 2 + p.rewrite_premium * kept * GROWTH / d

    assert per_request(optimum) <= min(per_request(optimum * 0.7), per_request(optimum * 1.4))
    assert math.isclose(per_request(optimum * 0.999), per_request(optimum), rel_tol=1e-3)


@given(
    st.integers(0, 400_000),
    st.integers(0, 100_000),
    st.integers(0, 100_000),
    st.booleans(),
    st.floats(1, 50_000),
)
def test_more_removed_never_turns_a_fold_into_a_wait(removed, kept, head, warm, growth):
    cache = CacheState(warm=warm, growth_per_request=growth)
    small = decide(quote(removed, kept, head), ANTHROPIC, cache)
    large = decide(quote(removed + 1_000, kept, head), ANTHROPIC, cache)
    assert not small.fold or large.fold


def test_requests_until_fold_counts_down_as_the_history_grows():
    free = ANTHROPIC.model_copy(update={"summarizer_input": 0.0, "summarizer_output": 0.0})
    cache = CacheState(warm=True, growth_per_request=6_000)
    now = quote(removed=4_000)
    k = requests_until_fold(now, free, cache)
    assert k is not None and k > 1
    assert not decide(now, free, cache).fold
    grown = quote(removed=4_000 + k * 6_000)
    assert decide(grown, free, cache).fold, "due after k requests' growth"
    assert not decide(quote(removed=4_000 + (k - 1) * 6_000), free, cache).fold, "and not one request before"
    assert requests_until_fold(quote(removed=4_000 + 6_000), free, cache) == k - 1
    assert requests_until_fold(grown, free, cache) == 0
    dear = requests_until_fold(now, ANTHROPIC, cache)  # the summarizer at the main model's input price
    assert dear is not None and dear > k, "what the summarizer costs puts the fold off"


def test_a_fold_that_never_pays_is_never_due_except_at_the_cap():
    free_reads = ANTHROPIC.model_copy(update={"cached_read": 0.0})
    cache = CacheState(warm=True, growth_per_request=6_000)
    assert requests_until_fold(quote(removed=4_000), free_reads, cache) is None
    assert requests_until_fold(quote(removed=4_000), free_reads, cache, cap_tokens=100_000) is not None
    assert requests_until_fold(quote(removed=0), ANTHROPIC, cache) is None, "nothing to remove, nothing due"


def test_the_requests_new_messages_are_no_rewrite():
    """What the fold keeps that the cache never held (this request's new messages) is written whether it
    folds or not: only the kept part the cache held costs the premium, so the fold comes sooner."""
    stale = quote(removed=40_000, kept=16_000)
    fresh = FoldQuote(stale.prompt_tokens, stale.change_point_tokens, stale.removed_tokens, fresh_tokens=8_000)
    assert fresh.rewritten_tokens == 8_000 and stale.rewritten_tokens == 16_000
    assert math.isclose(fold_cost(fresh, ANTHROPIC, True), fold_cost(stale, ANTHROPIC, True) / 2)
    assert not decide(stale, ANTHROPIC, WARM).fold
    assert decide(fresh, ANTHROPIC, WARM).fold
    grown_fresh = requests_until_fold(fresh, ANTHROPIC, WARM)
    grown_stale = requests_until_fold(stale, ANTHROPIC, WARM)
    assert grown_fresh == 0 and grown_stale is not None and grown_stale > 0
    everything_new = FoldQuote(stale.prompt_tokens, stale.change_point_tokens, 40_000, fresh_tokens=10**6)
    assert everything_new.rewritten_tokens == 0 and fold_cost(everything_new, ANTHROPIC, True) == 0.0


def test_a_warm_fold_waits_for_min_fold_requests_of_growth_even_when_rewriting_is_free():
    # Nothing kept after the change point but the request's own new messages: the rewrite costs nothing,
    # so only the floor keeps the rule from folding one step at a time.
    def nearly_free(removed: int) -> FoldQuote:
        return FoldQuote(20_000 + removed + 6_000, 20_000, removed, fresh_tokens=6_000)

    below = decide(nearly_free(int(MIN_FOLD_REQUESTS * GROWTH) - 1), ANTHROPIC, WARM)
    assert below.verdict is Verdict.WAIT and below.saving > below.cost, "it would pay, but it is one step at a time"
    at = decide(nearly_free(int(MIN_FOLD_REQUESTS * GROWTH)), ANTHROPIC, WARM)
    assert at.verdict is Verdict.FOLD
    cold = CacheState(warm=False, growth_per_request=GROWTH)
    assert decide(nearly_free(int(GROWTH)), ANTHROPIC, cold).verdict is Verdict.COLD, "a cold cache folds what is due"
    small = nearly_free(int(GROWTH))
    forced = decide(small, ANTHROPIC, WARM, cap_tokens=small.prompt_tokens + 1)
    assert forced.verdict is Verdict.FORCED, "the cap wins over the floor"
    unmeasured = CacheState(warm=True)  # before the growth is known, a typical step stands for it
    assert decide(nearly_free(2 * DEFAULT_GROWTH_TOKENS), ANTHROPIC, unmeasured).verdict is Verdict.WAIT
