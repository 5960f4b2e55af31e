"""Fold by price: the micro scheduling policy that rewrites history only when it pays.

The session grows with the provider's cache warm (every request reads the last one's prompt at the read
price), folds once when the rule of :mod:`microcompact.bill.fold_price` says the saving over the requests to
come beats the rewrite premium on what the fold keeps, goes all the way down to the low-water mark in that
one switch of the view, and grows cached again. A cold cache (idle past the TTL, or the upstream read
nothing) folds everything due at no cache cost; the cap (the batch threshold) forces a fold whatever it
costs, so batch compaction and the window's last resort stay what they were: the hard limits.

The cache is read, not guessed: the session's :class:`~microcompact.cache_usage.CacheObservations` (fed by
``Session.record_usage`` and by the proxy from every response) say whether it is warm, how fast the prompt
grows and how often requests come; the TTL clock from the last request is the fallback.

In background mode the fold is computed **ahead**: once the rule predicts it due within about the time a
fold takes (measured on this session: seconds per removed token; before any was measured, a prior by
summarizer kind; before the request rate is known, two requests),
the worker starts it on a shadow and keeps extending it over new messages; the request at which the rule
says fold adopts it, so the view switches at the same request as inline. When the client's turn ends
(an idle gap past the TTL may follow), a fold that would pay in a cold cache is started ahead too, so that
it is ready at the first request after the gap.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from ..bill.cache_usage import CacheObservations
from ..bill.fold_price import (
    DEFAULT_GROWTH_TOKENS,
    CacheState,
    Decision,
    FoldQuote,
    Verdict,
    decide,
    over_cap,
    requests_until_fold,
    working_set_low_water,
)
from ..bill.pricing import CachePricing
from ..config import FALLBACK_CONTEXT_LIMIT, Config, SummarizerKind
from .policy import MAX_CATCH_UP_PASSES, Fold, FoldEstimate, FoldPlan, Moment, PassMode, WorkerMode

# The new marker's size, as a share of what a fold absorbs, until the summary reaches its defrag threshold
# (until a fold of this session measured it).
MARKER_SHARE = 0.05
# Fold ahead when the requests until the fold is due take less than the expected fold time times this,
# plus AHEAD_MARGIN_SECONDS; before a fold was timed or the request rate is known: AHEAD_REQUESTS before.
AHEAD_SAFETY = 1.5
AHEAD_MARGIN_SECONDS = 0.5
AHEAD_REQUESTS = 2
# Messages an agent step adds (the model's tool call, its result): what a fold computed ahead leaves out of
# its tail per request to come.
MESSAGES_PER_REQUEST = 2
# Weight of the newest timed fold in the running seconds-per-token figure.
SPEED_WEIGHT = 0.5
# Before a fold was timed: seconds per removed token by summarizer kind (the extractive one took about 90 ms
# per 10K-token pass on a loaded 2-core machine; a model, about 2 s per piece budget of 8K tokens). Only
# how early the first fold starts depends on them: the first timed fold replaces them.
PRIOR_SECONDS_PER_TOKEN = {SummarizerKind.EXTRACTIVE: 1e-5}
PRIOR_MODEL_SECONDS_PER_TOKEN = 2.5e-4


class PricePolicy:
    """Micro passes when folding pays (see the module docstring); one instance per engine."""

    def __init__(self, config: Config, pricing: CachePricing, cache: CacheObservations) -> None:
        self.config = config
        self.cfg = config.compression
        self.pricing = pricing
        self.cache = cache
        self.last_request_at: float | None = None
        self.last: Decision | None = None  # the last decision (telemetry, tests)
        self.folds = 0
        self._planned: tuple[Fold, ...] = ()  # background: the fold the worker should run next
        self.seconds_per_token: float | None = None  # how long folds took for what they removed (measured)
        self.ahead = 0  # folds started ahead (telemetry, tests)
        self.marker_share: float | None = None  # the marker's growth per absorbed token, measured
        self._last_estimate: FoldEstimate | None = None
        # Background: the last decision sends the planned fold to the offline summary (the summarizer cannot
        # keep up); handed to the worker with the plan (``take_planned``).
        self._offline = False

    # ------------------------------------------------------------------ the protocol

    def turn_ended(self, moment: Moment, completed: bool) -> bool:
        return False  # the fold is decided before the next request, where the view switches anyway

    def before_request(self, moment: Moment) -> tuple[Fold, ...]:
        self.cache.note_request(prompt_estimate=moment.prompt_tokens)
        decision = self.decide(moment)
        if decision is None or not decision.fold:
            return ()
        self.folds += 1
        return self.folds_to_run(moment)

    def background_mode(self, moment: Moment, busy: bool) -> WorkerMode | None:
        """The same decision: ``"fold"`` when the rule says fold (a fold computed ahead is adopted now),
        ``"ahead"`` when it will soon (the worker starts or extends the fold on a shadow), else None."""
        self.cache.note_request(prompt_estimate=moment.prompt_tokens)
        slow = not self.keeps_up()
        self._offline = False
        quote = self.quote(moment, offline=slow)
        if quote is None:
            return None
        cache = self.cache_state(moment)
        self.last = decide(quote, self.pricing, cache, self.config.threshold_tokens())
        if self.last.fold:
            self.folds += 1
            self._planned = self.folds_to_run(moment)
            self._offline = slow
            return WorkerMode.FOLD
        due_in = None if busy else self.due_in(quote, cache)
        if due_in is None:
            return None
        self.ahead += 1
        self._planned = self.folds_to_run(moment, max(1, due_in))
        if slow and due_in <= 1:
            self._offline = True  # due at the next request: what the model has not reached is done offline
        elif slow:  # one pass a job: the worker is free soon for the due fold's offline part
            self._planned = (dataclasses.replace(self._planned[0], passes=1),)
        return WorkerMode.AHEAD

    def idle_mode(self, moment: Moment) -> WorkerMode | None:
        """The client's turn just ended: ``"ahead"`` when folding would pay with the cache cold (the next
        request may come after the TTL), so the fold is ready by then; else None."""
        quote = self.quote(moment)
        if quote is None:
            return None
        cold = CacheState(warm=False, growth_per_request=self.cache_state(moment).growth_per_request)
        if not decide(quote, self.pricing, cold, self.config.threshold_tokens()).fold:
            return None
        self.ahead += 1
        # The next request (the user's) is its tail; the turn's last message stays (a user message is
        # not a step's growth).
        self._planned = self.folds_to_run(moment, 1, keep=1)
        return WorkerMode.AHEAD

    def due_in(self, quote: FoldQuote, cache: CacheState) -> int | None:
        """The requests until the fold is due, when that is soon enough to start it now: due at the next
        request, or before a fold started at the next request could finish (with a margin), so that started
        now it is ready when due (a worker's result is applied at a request, so even an instant fold starts
        one request ahead); else None."""
        k = requests_until_fold(quote, self.pricing, cache, self.config.threshold_tokens())
        if k is None:
            return None
        interval = self.cache.request_interval() or self._interval()
        if interval is None:
            return k if k <= AHEAD_REQUESTS else None
        growth = cache.growth_per_request or 0.0
        expected = self.speed() * (quote.removed_tokens + k * growth)
        soon = k <= 1 or (k - 1) * interval <= expected * AHEAD_SAFETY + AHEAD_MARGIN_SECONDS
        return k if soon else None

    def speed(self) -> float:
        """Seconds per removed token a fold takes: measured on this session, else the summarizer's prior."""
        if self.seconds_per_token is not None:
            return self.seconds_per_token
        kind = self.config.auxiliary.compression.kind
        return PRIOR_SECONDS_PER_TOKEN.get(kind, PRIOR_MODEL_SECONDS_PER_TOKEN)

    def fold_timed(self, seconds: float, removed_tokens: int) -> None:
        """A fold's passes took ``seconds`` for ``removed_tokens``: the running figure the lead is planned by."""
        rate = max(0.0, seconds) / max(1, removed_tokens)
        old = self.seconds_per_token
        self.seconds_per_token = rate if old is None else SPEED_WEIGHT * rate + (1 - SPEED_WEIGHT) * old

    def take_planned(self) -> FoldPlan:
        """The fold ``background_mode`` or ``idle_mode`` chose (the worker runs all of it, the view switches
        once), offline when the last request's decision said the summarizer cannot keep up."""
        planned, self._planned = self._planned, ()
        return FoldPlan(planned, self._offline)

    def last_forced(self) -> bool:
        """The last decision was the cap's: a fold that must land now."""
        return self.last is not None and self.last.verdict is Verdict.FORCED

    def folds_by_use(self) -> bool:
        """A fold keeps what the agent still uses and its low-water mark follows it: this schedule folds
        to that mark at once, so what it keeps is what the next requests hold (the cadence schedule absorbs
        whole exchanges by age, and keeps its behaviour). Asked for by ``micro_compact_fold_by_use``."""
        return self.config.compression.micro_compact_fold_by_use

    def requested(self, at: float) -> None:
        self.last_request_at = at
        self.cache.note_request(at=at)

    def memory(self) -> dict[str, Any]:
        """What the next process continuing the session needs to decide as this one would: the cache
        observations, the recent prompt sizes and the last request's time."""
        sizes = list(self.cache.prompt_estimates)
        carried = {"cache": self.cache.memory(), "sizes": sizes, "at": self.last_request_at}
        return {"price": {**carried, "speed": self.seconds_per_token}}

    def restore(self, memory: dict[str, Any]) -> None:
        carried = memory.get("price")
        if not isinstance(carried, dict):
            return
        self.cache.restore(carried.get("cache") or {})
        self.cache.prompt_estimates.clear()
        for size in carried.get("sizes") or []:
            self.cache.note_request(prompt_estimate=int(size))
        at = carried.get("at")
        self.last_request_at = None if at is None else float(at)
        speed = carried.get("speed")
        self.seconds_per_token = None if speed is None else max(0.0, float(speed))

    def adoption_pays(self, moment: Moment, removed_counted: int, extended: bool = False) -> bool:
        """Whether to switch the view now to a fold computed on the worker that removes ``removed_counted``
        tokens (counted) from the transcript as it is now, or to extend it first over what came since.

        The rule of :func:`~microcompact.bill.fold_price.decide` on the fold as it stands (its summarizer calls
        are spent: only the cache counts), and a fold that lags the transcript (it keeps more after its
        marker than a fold down to the low-water mark now would) waits for its extension when the extra
        rewrite costs more than the requests the extension takes would read of what it removes, once: an
        ``extended`` fold that lags again, or a summarizer that cannot keep up with the growth (a request's
        growth takes it longer than a request), would chase the transcript: adopted when it pays as it is.
        At the cap, see :meth:`_forced_adoption_pays`.
        """
        quote = self.quote(moment)
        if quote is None:
            return removed_counted > 0
        scale = quote.prompt_tokens / moment.counted_tokens if moment.counted_tokens else 1.0
        actual = FoldQuote(
            prompt_tokens=quote.prompt_tokens,
            change_point_tokens=quote.change_point_tokens,
            removed_tokens=round(removed_counted * scale),
            fresh_tokens=quote.fresh_tokens,
        )
        cache = self.cache_state(moment)
        cap = self.config.threshold_tokens()
        decision = decide(actual, self.pricing, cache, cap)
        if decision.verdict is Verdict.FORCED:
            return self._forced_adoption_pays(actual, quote, cache, cap)
        if not decision.fold:
            return False
        if extended or not cache.warm:
            return True  # extended once already; or a cold cache, which rewrites everything anyway
        lag = max(0, actual.rewritten_tokens - quote.rewritten_tokens)
        if lag == 0:
            return True
        if not self.keeps_up():
            return True  # it would lag as much again after its extension
        interval = self.cache.request_interval() or self._interval()
        requests = max(1, math.ceil(self.speed() * lag / interval)) if interval else 1
        return lag * self.pricing.rewrite_premium <= actual.removed_tokens * self.pricing.read_price * requests

    def keeps_up(self) -> bool:
        """False when the summarizer cannot keep up with the session: folding one request's growth takes it
        longer than a request lasts (measured; True while any is unknown: the summarizer's prior speed
        plans how far ahead a fold starts, but never sends a fold offline before one was timed)."""
        interval = self.cache.request_interval() or self._interval()
        growth = self.cache.growth_per_request() or self._growth()
        speed = self.seconds_per_token
        return not (interval and growth and speed is not None and speed * growth >= interval)

    def _forced_adoption_pays(self, actual: FoldQuote, quote: FoldQuote, cache: CacheState, cap: int | None) -> bool:
        """At the cap a fold lands whatever it costs, so the fold computed on the worker is adopted when it
        takes the prompt out of the cap's headroom, unless it lags far behind the fold down to the low-water
        mark (``quote``): then it only puts the batch threshold off by the requests until the cap is
        reached again, and what those requests read less of does not pay for rewriting the lag; it is left
        to that threshold."""
        left = actual.prompt_tokens - actual.removed_tokens
        if cap is None or actual.removed_tokens <= 0 or over_cap(left, cap, cache.growth_per_request):
            return False
        lag = max(0, actual.rewritten_tokens - quote.rewritten_tokens)
        growth = cache.growth_per_request or DEFAULT_GROWTH_TOKENS
        until_cap = max(1.0, (cap - left) / growth)
        return lag * self.pricing.rewrite_premium <= actual.removed_tokens * self.pricing.read_price * until_cap

    # ------------------------------------------------------------------ the decision

    def folds_to_run(self, moment: Moment, ahead: int = 0, keep: int = 0) -> tuple[Fold, ...]:
        """Every due exchange, then every completed iteration outside a tail of the low-water mark (``drain``:
        request passes without waiting for a piece budget to pile up), down to that mark, keeping at least
        ``fold_min_messages``. A fold computed ``ahead`` requests before it is adopted keeps that much less
        tail (in tokens by the growth per request, in messages by MESSAGES_PER_REQUEST, down to ``keep``):
        the messages added meanwhile are the tail then, so the view it switches to keeps what the fold
        made at that request would (it is adopted only once they came: ``FoldJob.open_end``)."""
        estimate = moment.estimate()
        tail = self.config.low_water_tokens()
        messages = self.config.fold_min_messages()
        if self.config.auxiliary.compression.kind is SummarizerKind.UPSTREAM:
            keep = max(keep, 1)  # its summary request is the client's last one: it holds nothing newer
        if ahead > 0:
            growth = self.cache.growth_per_request() or self._growth() or 0.0
            tail = max(0, round(tail - ahead * growth))
            messages = max(keep, messages - ahead * MESSAGES_PER_REQUEST)
        limit = self.config.model.context_length or FALLBACK_CONTEXT_LIMIT
        low_water = (
            estimate.change_point
            + self._new_marker(estimate)
            + working_set_low_water(tail, estimate.kept_in_use, limit)
        )
        return (
            Fold(PassMode.TURN, MAX_CATCH_UP_PASSES, low_water, tail, messages),
            Fold(PassMode.DRAIN, MAX_CATCH_UP_PASSES, low_water, tail, messages),
        )

    def decide(self, moment: Moment) -> Decision | None:
        """The rule of :func:`~microcompact.bill.fold_price.decide` on the fold that would run now."""
        quote = self.quote(moment)
        if quote is None:
            return None
        self.last = decide(quote, self.pricing, self.cache_state(moment), self.config.threshold_tokens())
        return self.last

    def quote(self, moment: Moment, offline: bool = False) -> FoldQuote | None:
        """The fold that would run now, in the provider's tokens (None: nothing to absorb). ``offline``: a
        background fold of a summarizer that cannot keep up, whose due part is summarized offline (its
        model passes run ahead one at a time whatever is decided): no summarizer call to price.

        The in-use iterations over the working set's budget (``estimate.refetches``) are not priced here:
        a fold now or one later drops the same ones (the budget is the window's share either way), so the
        price only put folds off, and measured on the reactive agent it cost more and re-fetched more
        (docs/design.md, Fold by use)."""
        estimate = moment.estimate()
        if estimate.absorbable <= 0:
            return None
        scale = moment.prompt_tokens / moment.counted_tokens if moment.counted_tokens else 1.0
        new_marker = self._new_marker(estimate)
        removed = estimate.absorbable + estimate.old_marker - new_marker
        return FoldQuote(
            prompt_tokens=moment.prompt_tokens,
            change_point_tokens=round(estimate.change_point * scale),
            removed_tokens=round(removed * scale),
            summarizer_input_tokens=0 if offline else estimate.absorbable + estimate.old_marker,
            summarizer_output_tokens=0 if offline else new_marker,
            fresh_tokens=self.fresh_tokens(moment),
        )

    def fresh_tokens(self, moment: Moment) -> int:
        """Tokens at the end of the prompt the cache has not seen yet (written whether a fold is made or
        not): the prompt now less what the last request left cached, as the provider reported it; without
        a report, the growth per request measured here (0 before any)."""
        cached = self.cache.cached_prefix_tokens
        if cached > 0:
            return max(0, moment.prompt_tokens - cached)
        return round(self._growth() or 0.0)

    def cache_state(self, moment: Moment) -> CacheState:
        """Warm or cold from the reports (the TTL clock when there are none), growth from the reports."""
        ttl = self.pricing.ttl_seconds
        if self.cache.last is not None:
            warm = self.cache.warm(moment.at, ttl)
        else:
            warm = self.last_request_at is not None and moment.at - self.last_request_at <= ttl
        growth = self.cache.growth_per_request() or self._growth()
        return CacheState(warm=warm and self.pricing.cache, growth_per_request=growth)

    def _growth(self) -> float | None:
        """Growth per request from the prompt estimates the schedule noted (drops, i.e. folds, left out)."""
        sizes = list(self.cache.prompt_estimates)
        steps = [b - a for a, b in itertools.pairwise(sizes) if b >= a]
        return sum(steps) / len(steps) if steps else None

    def _interval(self) -> float | None:
        """The mean time between the requests the schedule noted (None before two)."""
        times = list(self.cache.request_times)
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None

    def _new_marker(self, estimate: FoldEstimate) -> int:
        self._measure_marker(estimate)
        share = MARKER_SHARE if self.marker_share is None else self.marker_share
        grown = estimate.old_marker + share * estimate.absorbable
        return round(min(grown, float(self.cfg.micro_compact_defrag_threshold_tokens)))

    def _measure_marker(self, estimate: FoldEstimate) -> None:
        """How much the marker grew for what the last fold absorbed (the marker changed since the last
        estimate: a fold landed), as a share of what was absorbable then; a running figure."""
        last, self._last_estimate = self._last_estimate, estimate
        if last is None or last.absorbable <= 0 or estimate.old_marker == last.old_marker:
            return
        share = max(0.0, estimate.old_marker - last.old_marker) / last.absorbable
        old = self.marker_share
        self.marker_share = share if old is None else SPEED_WEIGHT * share + (1 - SPEED_WEIGHT) * old


def policy_for(config: Config, cache: CacheObservations) -> PricePolicy | None:
    """The price policy when ``compression.micro_compact_schedule`` asks for it, or (``auto``) when the
    config knows a cache price; None keeps the cadence schedule. Asked for without a price, it schedules by
    Anthropic's cache ratios (the proxy's case: one process serves both APIs, whose ratios are close)."""
    schedule = config.compression.micro_compact_schedule
    pricing = config.cache_pricing()
    if schedule == "cadence" or (schedule == "auto" and pricing is None):
        return None
    if pricing is None:
        summarizer_free = config.auxiliary.compression.kind is SummarizerKind.EXTRACTIVE
        pricing = config.pricing.resolve("anthropic", summarizer_free=summarizer_free)
    return PricePolicy(config, pricing, cache)


__all__ = ["PricePolicy", "Verdict", "policy_for"]
