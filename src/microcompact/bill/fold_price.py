"""Fold by price: whether rewriting history now saves more than it costs, as pure functions over small values.

A fold (one or many micro passes, one switch of the view) replaces the history after its *change point*
(the first absorbed message) with the marker and the kept tail. With a warm cache:

- it **costs** now the rewrite premium on everything it keeps after the change point that the cache holds
  (those tokens are written again instead of read; the request's new messages, which the cache has not
  seen yet, are written whether it folds or not), plus the summarizer's calls;
- it **saves** the read price on every token it removes, on every further request.

How many further requests count: the saving is measured against folding later, which the growing history
forces anyway. With the prompt growing ``g`` tokens a request, a fold that removes ``D`` tokens holds its
lead for about ``D / (2 g)`` requests on average over the cycle it starts; so the rule folds once
``read * D * D / (2 g) > premium * kept``, i.e. when the history above the low-water mark reaches
``sqrt(2 * premium * kept * g / read)``, the size that minimises the cost per request of the cycle
"grow cached, fold once, grow cached again". The count is bounded by the cache's life: requests expected
before the session goes idle past the TTL do not count beyond it (a fold in a cold cache is free).

**Re-fetches.** A fold that drops a tool result the agent still uses (``micro/working_set.py``) saves
nothing on it: the agent runs the call again, a request at the current prompt size, and the result is
back in the prompt. So a quote names the re-fetches it causes and their tokens: they cost the request and
the turn the user waits for (:func:`refetch_cost`), and they are not removed (``net_removed_tokens``); a
fold that drops only the working set never pays, under any prices. The low-water mark follows the working
set (:func:`working_set_low_water`), bounded by a share of the window.

With a cold cache (idle past the TTL, or the provider reported no read) the next request writes everything
anyway: a fold costs only the summarizer, so everything due is folded. The hard limits rule over price:
a prompt that would pass the cap (the batch threshold, or the window) is folded whatever it costs. A warm
fold removes at least ``MIN_FOLD_REQUESTS`` requests' growth, never one step at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from .pricing import CachePricing

# Without a measured growth per request, this many tokens (a typical tool step) stand for it.
DEFAULT_GROWTH_TOKENS = 2_000
# Headroom below the cap: fold when the prompt is within this many requests' growth of it.
CAP_HEADROOM_REQUESTS = 2
# How far ahead ``requests_until_fold`` looks, in requests.
HORIZON_REQUESTS = 64
# A fold in a warm cache removes at least this many requests' growth: when what it keeps after its marker
# is only the request's own new messages, rewriting costs next to nothing and the rule alone would fold
# every request, one step at a time; the session grows cached, folds once, grows cached again instead.
MIN_FOLD_REQUESTS = 3
# A re-fetch is a turn the user waits for: it weighs this many times the request's own price on top of it.
TURN_WEIGHT = 1.0
# The most of the window the working set may keep verbatim beyond the fixed low-water mark: 20K tokens at
# a 200K window, where keeping the newest 20K by size alone already held 93% of what the agent used next
# (issue 26); kept by use instead, the same tokens hold what the next steps reach for.
WORKING_SET_SHARE = 0.1


class Verdict(StrEnum):
    WAIT = "wait"  # folding now costs more than it saves
    FOLD = "fold"  # it pays (warm cache)
    COLD = "cold"  # the cache is cold: folding costs no cache write
    FORCED = "forced"  # the hard limit: the prompt would pass the cap otherwise
    NOTHING = "nothing"  # the fold would remove nothing

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FoldQuote:
    """One candidate fold, in tokens of the prompt as the provider bills it."""

    prompt_tokens: int  # the prompt as it would go now, without folding
    change_point_tokens: int  # tokens before the first absorbed message: they stay cached
    removed_tokens: int  # how much smaller the prompt gets (absorbed minus the marker's growth)
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    fresh_tokens: int = 0  # at the end of the prompt, not in the cache yet (the request's new messages)
    # The working set a fold drops (see "Re-fetches" above): how many re-fetches it causes, and the tokens
    # of the dropped in-use results, which come back with them (so they are not a saving).
    refetches: float = 0.0
    refetched_tokens: int = 0

    @property
    def kept_after_tokens(self) -> int:
        """What the fold rewrites: everything after the change point that stays (marker, tail)."""
        return max(0, self.prompt_tokens - self.change_point_tokens - self.removed_tokens)

    @property
    def net_removed_tokens(self) -> int:
        """What the fold removes for good: the removed tokens less the dropped in-use results re-fetched."""
        return max(0, self.removed_tokens - self.refetched_tokens)

    @property
    def rewritten_tokens(self) -> int:
        """What the fold makes the cache write again: what it keeps after the change point, less the fresh
        tokens at the end (written this request whether it folds or not)."""
        return max(0, self.kept_after_tokens - self.fresh_tokens)


@dataclass(frozen=True)
class CacheState:
    """What the session's own usage says about its cache right now."""

    warm: bool
    growth_per_request: float | None = None  # tokens; None before it was measured
    requests_left: float | None = None  # requests expected before the cache goes cold anyway; None: unknown


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    cost: float  # dollars the fold costs now (cache rewrite + summarizer)
    saving: float  # dollars it saves over the requests that count

    @property
    def fold(self) -> bool:
        return self.verdict in (Verdict.FOLD, Verdict.COLD, Verdict.FORCED)


def requests_ahead(quote: FoldQuote, cache: CacheState) -> float:
    """The further requests a fold's saving counts for: ``removed / (2 * growth)`` (net of re-fetches), at
    least one (the next request), at most the requests left before the cache goes cold anyway."""
    growth = cache.growth_per_request if cache.growth_per_request and cache.growth_per_request > 0 else None
    ahead = quote.net_removed_tokens / (2 * (growth or DEFAULT_GROWTH_TOKENS))
    if cache.requests_left is not None:
        ahead = min(ahead, cache.requests_left)
    return max(1.0, ahead)


def fold_cost(quote: FoldQuote, pricing: CachePricing, warm: bool) -> float:
    """Dollars a fold costs now: the rewrite premium on what it keeps after the change point and the cache
    held (warm cache only), plus the summarizer."""
    rewrite = quote.rewritten_tokens * pricing.rewrite_premium if warm and pricing.cache else 0.0
    summarizer = pricing.summarizer_cost(quote.summarizer_input_tokens, quote.summarizer_output_tokens)
    return rewrite / 1_000_000 + summarizer + refetch_cost(quote, pricing)


def refetch_cost(quote: FoldQuote, pricing: CachePricing, turn_weight: float = TURN_WEIGHT) -> float:
    """Dollars the re-fetches a fold causes cost (0 without any): each is a request at the current prompt
    size (read from the cache) with the dropped result written again, and a turn the user waits for,
    worth ``turn_weight`` times that request."""
    if quote.refetches <= 0:
        return 0.0
    request = quote.refetches * quote.prompt_tokens * pricing.read_price + quote.refetched_tokens * pricing.write_price
    return (1 + turn_weight) * request / 1_000_000


def working_set_low_water(base_tokens: int, in_use_tokens: int, window_tokens: int) -> int:
    """The low-water mark that follows the working set: what a fold keeps verbatim after its change point
    is the fixed mark (``base_tokens``: the newest iteration) plus the iterations still in use, never more
    than :data:`WORKING_SET_SHARE` of the window (and never less than the fixed mark)."""
    return base_tokens + min(max(0, in_use_tokens), keep_budget(base_tokens, window_tokens))


def keep_budget(base_tokens: int, window_tokens: int) -> int:
    """Tokens of in-use iterations a fold may keep: the window's share for the working set, less the fixed
    mark (what ``WorkingSet.keep_within`` gets)."""
    return max(0, int(WORKING_SET_SHARE * window_tokens) - base_tokens)


def fold_saving(quote: FoldQuote, pricing: CachePricing, cache: CacheState) -> float:
    """Dollars a fold saves: the removed tokens at the read price on every request that counts (with a
    cold cache the next request would have written them, so that one saves the write price)."""
    ahead = requests_ahead(quote, cache)
    per_token = pricing.read_price * ahead if cache.warm else pricing.write_price + pricing.read_price * (ahead - 1)
    return quote.net_removed_tokens * per_token / 1_000_000


def over_cap(prompt_tokens: int, cap_tokens: int | None, growth_per_request: float | None) -> bool:
    """True when the prompt, grown by the next requests, would pass ``cap_tokens`` (the hard limit)."""
    if cap_tokens is None:
        return False
    growth = growth_per_request if growth_per_request and growth_per_request > 0 else DEFAULT_GROWTH_TOKENS
    return prompt_tokens + CAP_HEADROOM_REQUESTS * growth >= cap_tokens


def decide(quote: FoldQuote, pricing: CachePricing, cache: CacheState, cap_tokens: int | None = None) -> Decision:
    """Fold now or wait: forced by the cap, free in a cold cache, else only when it pays."""
    cost = fold_cost(quote, pricing, cache.warm)
    saving = fold_saving(quote, pricing, cache)
    if over_cap(quote.prompt_tokens, cap_tokens, cache.growth_per_request):
        verdict = Verdict.FORCED
    elif quote.removed_tokens <= 0:
        verdict = Verdict.NOTHING
    elif quote.net_removed_tokens <= 0:  # all it removes comes back with the re-fetches: whatever the prices
        verdict = Verdict.WAIT
    elif not cache.warm or not pricing.cache:
        verdict = Verdict.COLD if saving >= cost else Verdict.WAIT
    elif quote.net_removed_tokens < MIN_FOLD_REQUESTS * (cache.growth_per_request or DEFAULT_GROWTH_TOKENS):
        verdict = Verdict.WAIT
    else:
        verdict = Verdict.FOLD if saving > cost else Verdict.WAIT
    return Decision(verdict, cost, saving)


def requests_until_fold(
    quote: FoldQuote,
    pricing: CachePricing,
    cache: CacheState,
    cap_tokens: int | None = None,
    horizon: int = HORIZON_REQUESTS,
) -> int | None:
    """In how many requests the rule first folds, the history growing by the session's growth per request
    (each request's new tokens push as many out of the kept tail into what the fold removes, so what it
    keeps stays the same, and so do its fresh tokens): 0 when it folds now, None when not within
    ``horizon`` requests."""
    growth = cache.growth_per_request if cache.growth_per_request and cache.growth_per_request > 0 else None
    g = growth or DEFAULT_GROWTH_TOKENS
    for k in range(horizon + 1):
        grown = FoldQuote(
            prompt_tokens=round(quote.prompt_tokens + k * g),
            change_point_tokens=quote.change_point_tokens,
            removed_tokens=round(quote.removed_tokens + k * g) if quote.removed_tokens > 0 else 0,
            summarizer_input_tokens=round(quote.summarizer_input_tokens + k * g),
            summarizer_output_tokens=quote.summarizer_output_tokens,
            fresh_tokens=quote.fresh_tokens,
            refetches=quote.refetches,
            refetched_tokens=quote.refetched_tokens,
        )
        if decide(grown, pricing, cache, cap_tokens).fold:
            return k
    return None


def break_even_growth(pricing: CachePricing, kept_tokens: int, growth_per_request: float) -> float:
    """The history (tokens above the low-water mark) at which a fold starts to pay with a warm cache:
    ``sqrt(2 * premium * kept * growth / read)`` (infinite when reads are free; 0 without a cache)."""
    if not pricing.cache or pricing.rewrite_premium <= 0:
        return 0.0
    if pricing.read_price <= 0:
        return math.inf
    return math.sqrt(2 * pricing.rewrite_premium * kept_tokens * growth_per_request / pricing.read_price)


__all__ = [
    "CacheState",
    "Decision",
    "FoldQuote",
    "Verdict",
    "break_even_growth",
    "decide",
    "fold_cost",
    "fold_saving",
    "keep_budget",
    "over_cap",
    "refetch_cost",
    "requests_ahead",
    "requests_until_fold",
    "working_set_low_water",
]
