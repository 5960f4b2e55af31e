"""A background fold that lags: the summarizer is slow, the agent loop fast, and several steps came while
the fold ran. Adopted as it was, its view would keep all of them verbatim after the marker and the next
fold would follow a few requests later (the bench's openai SDK loop: 105K folded to 57K, then again three
requests on). It is extended over them once first, so its one switch of the view goes down to the
low-water mark.

Deterministic: the summarizer waits on a gate the test opens, and the test waits for the worker before the
requests that must see its result; the session's clock is a list the test moves."""

from __future__ import annotations

import itertools

from microcompact.config import parse_config
from microcompact.events import MICRO_ABSORBS
from microcompact.session import Session
from support.price_loop import Notes, step, step_session

WINDOW = 1_000_000  # the cap far away: the price rule, not the hard limit, decides the fold
LAGGED_STEPS = 5


def make_session(now: list[float], notes: Notes) -> Session:
    cfg = parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": True},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic"},
        }
    )
    return step_session(cfg, now, notes)


def request(s: Session, now: list[float]) -> int:
    """One model request (10 s after the last): the passes absorbed at it; then the provider's answer,
    the prompt read from the cache up to the last request."""
    now[0] += 10.0
    absorbed = sum(1 for r in s.before_request() if r.outcome in MICRO_ABSORBS)
    t = s.tokens
    last = s.cache.last
    read = min(t, last.cached_after) if last is not None else 0
    s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)
    return absorbed


def after_marker(s: Session) -> int:
    marker = s.micro.state.marker_index
    assert marker is not None
    return len(s.ledger.messages) - marker - 1


def stall_a_fold(s: Session, now: list[float], notes: Notes) -> int:
    """Requests and steps until a fold starts, its summarizer held on the gate; LAGGED_STEPS more steps
    while it waits (the fast loop goes on); then the gate opens and the fold finishes. The next step's n."""
    bg = s.background
    assert bg is not None
    n = 0
    notes.gate.clear()  # every summarizer call waits: the first fold job stalls on its first pass
    while not bg.busy and n < 80:
        assert request(s, now) == 0
        step(s, n)
        n += 1
    assert bg.busy, "no fold was ever started"
    for _ in range(LAGGED_STEPS):
        assert request(s, now) == 0
        step(s, n)
        n += 1
    notes.gate.set()
    bg.wait(60)
    return n


def test_a_fold_that_lags_is_extended_before_the_view_switches_once():
    now = [0.0]
    notes = Notes()
    s = make_session(now, notes)
    bg = s.background
    assert bg is not None
    n = stall_a_fold(s, now, notes)
    switches = []
    for _ in range(4):
        switches.append(request(s, now))
        if switches[-1]:
            break
        bg.wait(60)
        step(s, n)
        n += 1
    assert sum(1 for a in switches if a) == 1, f"the view switched {switches}"
    assert bg.caught_up == 1
    # The view it switched to keeps the low-water tail (and the one step since the extension started), not
    # the steps that came while the fold ran (without the extension: 14 messages after the marker).
    kept = after_marker(s)
    assert kept <= s.config.tail_min_messages() + 3 and kept < 2 * LAGGED_STEPS, kept
    assert s.batch.stats().compactions == 0


def test_a_slow_summarizers_lagging_fold_is_not_adopted_as_it_is():
    """The same, with a summarizer the engine measures as slow (its pass clock says a second went by at
    every reading, as for a model taking seconds a call): switching to the fold as it stands would keep
    every step that came meanwhile after the new marker, rewriting them all to remove one or two
    exchanges. That does not pay, so the view does not switch to it; the fold is extended over them, and
    the view switches once, low."""
    now = [0.0]
    notes = Notes()
    s = make_session(now, notes)
    ticks = itertools.count()
    s.micro.clock = lambda: float(next(ticks))  # what a fold's passes took, as the engine measures it
    bg = s.background
    assert bg is not None
    n = stall_a_fold(s, now, notes)
    switches, kept_at_switch = [], None
    for _ in range(6):
        switches.append(request(s, now))
        if switches[-1]:
            kept_at_switch = after_marker(s)
            break
        bg.wait(60)
        step(s, n)
        n += 1
    assert sum(1 for a in switches if a) == 1, f"the view switched {switches}"
    assert switches[0] == 0, "not at once to the fold that lags"
    assert kept_at_switch is not None
    assert kept_at_switch <= s.config.tail_min_messages() + 3 and kept_at_switch < 2 * LAGGED_STEPS
    assert s.batch.stats().compactions == 0


def test_a_summarizer_that_cannot_keep_up_leaves_the_due_folds_lag_to_the_offline_summary():
    """A summarizer measured far slower than the session grows (ten seconds a clock reading, a request
    every ten seconds) would lag as much again after every extension: the due fold's extension over what
    it could not reach runs with the offline summarizer instead (no call to it, no summarizer tokens
    billed), and the view still switches once, low."""
    now = [0.0]
    notes = Notes()
    s = make_session(now, notes)
    ticks = itertools.count()
    s.micro.clock = lambda: 10.0 * next(ticks)
    bg = s.background
    assert bg is not None
    n = stall_a_fold(s, now, notes)
    calls_before = notes.calls
    applied = []
    for _ in range(8):
        now[0] += 10.0
        results = s.before_request()
        t, last = s.tokens, s.cache.last
        read = min(t, last.cached_after) if last is not None else 0
        s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)
        applied += [r for r in results if r.outcome in MICRO_ABSORBS]
        if applied:
            break
        bg.wait(60)
        step(s, n)
        n += 1
    assert applied, "the view never switched"
    offline = [r for r in applied if not r.record.get("summarizer_input_tokens")]
    assert offline, "the lag was absorbed without the slow summarizer"
    assert notes.calls - calls_before < len(offline), "and without calling it for it"
    assert after_marker(s) <= s.config.tail_min_messages() + 3
    assert s.batch.stats().compactions == 0
    policy = s.micro.policy
    assert not policy.keeps_up(), "the summarizer was measured as slower than the session"


def test_a_model_summarizer_not_timed_yet_is_never_sent_offline_on_its_prior():
    """Before a fold of the session was timed, a model summarizer's prior speed (far slower than a fast
    loop grows) plans how early a fold starts, but does not count as "cannot keep up": the first folds
    are the model's (``summarizer: upstream`` in serve wrote none of its notes when the prior decided)."""
    now = [0.0]
    cfg = parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": True},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic"},
            "auxiliary": {"compression": {"provider": "upstream"}},
        }
    )
    notes = Notes()
    notes.gate.clear()  # no fold finishes (and is timed) while the loop runs, however fast the worker is
    s = step_session(cfg, now, notes)
    policy = s.micro.policy
    try:
        for n in range(6):  # a request every 0.1 s: the prior speed times the growth is far over the interval
            now[0] += 0.1
            s.before_request()
            s.record_usage(s.tokens)
            step(s, n)
        assert policy.speed() * policy._growth() > policy._interval() > 0
        assert policy.seconds_per_token is None and policy.keeps_up()
        policy.fold_timed(60.0, 1_000)
        assert not policy.keeps_up(), "once timed as slow, it cannot keep up"
    finally:
        notes.gate.set()
        s.close()
