"""The price policy as the micro scheduling policy: grow cached, fold once down to the low-water mark,
grow cached again; a cold cache folds; the cap always wins; background mode runs a whole fold on the
worker and switches the view once, never one exchange per request."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from microcompact.bill.fold_price import MIN_FOLD_REQUESTS
from microcompact.config import parse_config
from microcompact.events import MICRO_ABSORBS
from microcompact.micro import CadencePolicy
from microcompact.micro.price import PricePolicy
from microcompact.session import Session
from support.price_loop import WINDOW, Notes, answered, step
from support.price_loop import price_config as config
from support.price_loop import step_session as session


def run(s: Session, steps: int, now: list[float], gap: float = 10.0, idle: dict[int, float] | None = None) -> list[int]:
    """Absorbed passes before each request."""
    absorbed = []
    for n in range(steps):
        now[0] += gap + (idle or {}).get(n, 0.0)
        results = s.before_request()
        absorbed.append(sum(1 for r in results if r.outcome in MICRO_ABSORBS))
        answered(s)
        step(s, n)
    return absorbed


def test_the_price_policy_is_the_default_when_a_price_is_known():
    assert isinstance(Session(config()).micro.policy, PricePolicy)
    plain = parse_config({"compression": {"micro_compact": True}, "model": {"context_length": WINDOW}})
    assert isinstance(Session(plain).micro.policy, CadencePolicy)
    assert isinstance(Session(config(micro_compact_schedule="cadence")).micro.policy, CadencePolicy)
    forced = parse_config({"compression": {"micro_compact": True, "micro_compact_schedule": "price"}})
    assert isinstance(Session(forced).micro.policy, PricePolicy)


def test_grow_cached_fold_once_grow_cached_again():
    now = [0.0]
    s = session(config(), now)
    absorbed = run(s, 50, now)
    folds = [i for i, a in enumerate(absorbed) if a]
    # A fold keeps the newest step and rewrites little more than its marker, so it pays early, but it
    # waits for MIN_FOLD_REQUESTS steps of growth.
    assert 2 <= len(folds) <= 50 // MIN_FOLD_REQUESTS, absorbed
    assert all(absorbed[i] >= 2 for i in folds), "a fold takes every due exchange at once"
    assert all(b - a >= 3 for a, b in itertools.pairwise(folds)), "never one exchange per request"
    threshold = s.config.threshold_tokens()
    assert threshold is not None and s.micro.policy.last is not None


def test_a_fold_that_does_not_pay_is_not_made_and_the_cap_wins():
    now = [0.0]
    s = session(config(min_tail_messages=3), now)  # every fold rewrites the step before the newest
    sizes = []
    for n in range(40):
        now[0] += 10
        s.before_request()
        sizes.append(s.tokens)
        answered(s)
        step(s, n)
    threshold = s.config.threshold_tokens()
    assert threshold is not None
    assert max(sizes) < threshold, "folded before batch compaction had to"
    assert s.batch.stats().compactions == 0
    assert all(b > a for a, b in itertools.pairwise(sizes[:8])), "no fold while it would not pay"
    policy = s.micro.policy
    assert isinstance(policy, PricePolicy) and policy.folds >= 2


def test_a_cold_cache_folds_what_a_warm_one_keeps():
    warm_now, cold_now = [0.0], [0.0]
    # Each fold keeps two steps (one rewritten): a warm cache waits, a cold one folds.
    warm, cold = session(config(min_tail_messages=3), warm_now), session(config(min_tail_messages=3), cold_now)
    warm_absorbed = run(warm, 8, warm_now)
    cold_absorbed = run(cold, 8, cold_now, idle={7: 600.0})  # the user went away: the cache expired
    assert sum(warm_absorbed) == 0
    assert cold_absorbed[7] > 0 and sum(cold_absorbed[:7]) == 0


@pytest.mark.slow
def test_background_runs_the_whole_fold_on_the_worker_and_switches_once():
    now = [0.0]
    notes = Notes(delay=0.05)
    s = session(config(micro_compact_background=True), now, notes)
    switches, waits = 0, []
    previous: list[Any] = []
    for n in range(45):
        now[0] += 10
        started = time.perf_counter()
        s.before_request()
        waits.append(time.perf_counter() - started)
        view = s.ledger.messages
        if previous and [id(m) for m in view[: len(previous)]] != [id(m) for m in previous]:
            switches += 1
        previous = list(view)
        answered(s)
        step(s, n)
        s.background.wait(5) if s.background is not None else None
    assert notes.calls >= 4 and notes.threads and all(t.startswith("microcompact-pass") for t in notes.threads)
    assert 1 <= switches <= notes.calls // 2, (switches, notes.calls)  # several passes per switch
    print(f"background: {notes.calls} summarizer calls, {switches} view switches")
    assert max(waits) < 0.05 * 2, "no request waited on the summarizer"


def test_the_fold_is_quoted_with_what_the_cache_has_not_seen_yet():
    """The tokens past what the last request left cached (the provider's report) are written by the next
    request anyway: the quote names them, so the rule does not charge a rewrite premium on them."""
    now = [0.0]
    s = session(config(), now)
    run(s, 8, now)  # every request answered: the last report covers the prompt before the last step
    p = s.micro.policy
    assert isinstance(p, PricePolicy)
    moment = s.micro.moment(s.ledger)
    q = p.quote(moment)
    assert q is not None
    reported = s.cache.cached_prefix_tokens
    assert reported > 0 and q.fresh_tokens == moment.prompt_tokens - reported > 0
    assert q.rewritten_tokens == q.kept_after_tokens - q.fresh_tokens


def test_a_fold_computed_on_the_worker_is_adopted_only_when_switching_to_it_as_it_is_pays():
    """A fold down to the low-water mark is adopted where the rule folds, at the cap too; one that removes
    only an exchange and keeps everything after it (a shadow far behind the transcript) is not, even at
    the cap: it would rewrite everything after its marker to remove little."""
    now = [0.0]
    s = session(config(), now)
    p = s.micro.policy
    assert isinstance(p, PricePolicy)
    seen = []
    for n in range(14):
        now[0] += 10.0
        p.requested(now[0])
        answered(s)
        step(s, n)
        moment = s.micro.moment(s.ledger)
        decision = p.decide(moment)
        if decision is None or not decision.fold:
            continue
        seen.append(str(decision.verdict))
        whole = moment.estimate().absorbable  # what a fold down to the low-water mark removes
        one_exchange = sum(s.ledger.tokens[-4:-2])  # a shadow that absorbed one exchange only
        assert p.adoption_pays(moment, whole), (n, decision)
        assert not p.adoption_pays(moment, one_exchange), (n, decision)
    assert "fold" in seen and "forced" in seen


def test_the_markers_growth_is_measured_on_the_sessions_own_folds():
    """Before a fold, the new marker is assumed to grow by MARKER_SHARE of what it absorbs; after one, by
    what this session's folds made it grow (a one-line-per-exchange summary: far less), so the quote
    neither overstates what a fold keeps nor understates what it removes."""
    from microcompact.micro.price import MARKER_SHARE

    now = [0.0]
    s = session(config(), now)
    p = s.micro.policy
    assert isinstance(p, PricePolicy)
    assert p.marker_share is None
    absorbed = run(s, 30, now)
    assert any(absorbed), "the loop never folded"
    assert p.marker_share is not None and 0 <= p.marker_share < MARKER_SHARE


def test_without_reports_the_policy_measures_by_what_it_noted_on_the_observations():
    """No usage reported (a replay, a library session): growth and request rate come from the prompt
    estimates and request times the policy noted on the session's observations, carried to the next process."""
    now = [0.0]
    s = session(config(), now)
    policy = s.micro.policy
    assert isinstance(policy, PricePolicy) and policy.cache is s.cache
    sizes = []
    for n in range(4):
        step(s, n)
        now[0] += 7.0
        sizes.append(s.micro.moment(s.ledger).prompt_tokens)
        s.before_request()
    assert s.cache.last is None, "nothing was reported"
    assert list(s.cache.prompt_estimates) == sizes and list(s.cache.request_times) == [7.0, 14.0, 21.0, 28.0]
    growth = (sizes[-1] - sizes[0]) / 3
    assert s.cache.growth_per_request() is None, "no report to measure by"
    assert policy.cache_state(s.micro.moment(s.ledger)).growth_per_request == growth
    later = PricePolicy(s.config, policy.pricing, type(s.cache)())
    later.restore(policy.memory())
    assert list(later.cache.prompt_estimates) == sizes, "the estimates go to the next process"
