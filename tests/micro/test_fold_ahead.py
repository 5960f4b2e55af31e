"""Fold ahead (background mode): the price policy starts a fold on the worker before it is due, the worker
holds it, and the request at which the rule says fold adopts it, so the view switches at the same request
as with inline passes. A shadow that no longer applies is dropped; a fold that does not pay is never
started ahead; a turn that ends starts the fold a cold cache would make, ready after the idle gap.

Deterministic: the session's clock is a list the test moves, and the test waits for the worker after every
request (``background.wait``), so what the worker computed is there at the next request whatever the load.
"""

from __future__ import annotations

from typing import Any

from microcompact.bill.fold_price import Verdict
from microcompact.config import parse_config
from microcompact.events import MICRO_ABSORBS
from microcompact.micro.price import AHEAD_REQUESTS, PricePolicy
from microcompact.session import Session
from support.price_loop import step
from support.price_loop import step_session as session

WINDOW = 200_000


def config(background: bool = True, compression: dict[str, Any] | None = None, **pricing: Any) -> Any:
    return parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": background, **(compression or {})},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic", **pricing},
        }
    )


def answered(s: Session) -> None:
    """The provider's answer: the prompt read from the cache up to the last request, the rest written."""
    t = s.tokens
    last = s.cache.last
    read = min(t, last.cached_after) if last is not None else 0
    s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)


def policy(s: Session) -> PricePolicy:
    assert isinstance(s.micro.policy, PricePolicy)
    return s.micro.policy


def request(s: Session, now: list[float], gap: float = 10.0) -> tuple[int, Verdict | None]:
    """One model request: passes absorbed at it, the rule's verdict; then the answer, and the worker's job
    finishes before the next request (the test waits for it: no timing in the assertions)."""
    now[0] += gap
    results = s.before_request()
    absorbed = sum(1 for r in results if r.outcome in MICRO_ABSORBS)
    last = policy(s).last
    answered(s)
    if s.background is not None:
        s.background.wait(60)
    return absorbed, (last.verdict if last is not None else None)


def test_a_fold_started_ahead_is_adopted_at_the_request_that_decides_it():
    inline_now, bg_now = [0.0], [0.0]
    inline, bg = session(config(background=False), inline_now), session(config(), bg_now)
    inline_switches, bg_switches, bg_verdicts = [], [], []
    views: dict[str, list[Any]] = {}
    for n in range(40):
        absorbed, _ = request(inline, inline_now)
        inline_switches.append(absorbed > 0)
        if absorbed and "inline" not in views:
            views["inline"] = [dict(m) for m in inline.ledger.messages]
        absorbed, verdict = request(bg, bg_now)
        bg_switches.append(absorbed > 0)
        bg_verdicts.append(verdict)
        if absorbed and "bg" not in views:
            views["bg"] = [dict(m) for m in bg.ledger.messages]
        step(inline, n)
        step(bg, n)
    assert bg.background is not None
    assert policy(bg).ahead >= 1 and bg.background.adopted_ahead >= 2
    first = inline_switches.index(True)
    assert bg_switches.index(True) == first, "the first fold lands at the request inline folds at"
    assert views["bg"] == views["inline"], "and switches to the view inline passes made there (same tail kept)"
    folded_at = [i for i, switched in enumerate(bg_switches) if switched]
    assert all(bg_verdicts[i] in (Verdict.FOLD, Verdict.COLD, Verdict.FORCED) for i in folded_at), (
        "the view switches only at a request whose rule said fold, never later"
    )
    assert len(folded_at) >= 2 and bg.batch.stats().compactions == 0


def test_a_shadow_that_no_longer_applies_is_dropped_and_the_fold_goes_on_as_before():
    now = [0.0]
    s = session(config(), now)
    assert s.background is not None
    n = 0
    while s.background.ready is None and n < 40:
        request(s, now)
        step(s, n)
        n += 1
        s.drain(60)
    assert s.background.ready is not None, "a fold was computed ahead and held"
    held = s.background.ready
    s.compact()  # a batch compaction rewrites the transcript: the held shadow's base is gone
    batch_marker = next(m for m in s.ledger.messages if "batch" in str(m.get("content")))
    discarded = s.background.discarded
    for _ in range(30):
        request(s, now)
        step(s, n)
        n += 1
    assert s.background.discarded > discarded and s.background.ready is not held
    assert batch_marker in s.ledger.messages, "nothing of the stale shadow was applied over the batch summary"
    users = [m for m in s.ledger.messages if m.get("role") == "user"]
    assert users and users[0]["content"] == "Run the numbered steps."


def test_a_fold_that_does_not_pay_is_never_started_ahead():
    now = [0.0]
    s = session(config(cached_read=0.0), now)  # reads are free: removing history saves nothing warm
    verdicts, aheads = [], []
    for n in range(36):
        before = policy(s).ahead
        _, verdict = request(s, now)
        verdicts.append(verdict)
        aheads.append(policy(s).ahead > before)
        step(s, n)
    assert Verdict.FOLD not in verdicts and Verdict.FORCED in verdicts, "only the cap folds"
    for i, ahead in enumerate(aheads):
        if ahead:  # only just before the cap forces a fold
            assert Verdict.FORCED in verdicts[i + 1 : i + 1 + AHEAD_REQUESTS], (i, verdicts)
    assert aheads.index(True) > 5


def test_a_fold_started_when_the_turn_ends_is_adopted_after_an_idle_gap():
    def cold_gap(ahead: bool) -> tuple[int, Session]:
        now = [0.0]
        s = session(config(compression={"min_tail_messages": 3}), now)  # no warm fold pays in 8 steps
        for n in range(8):
            request(s, now)
            step(s, n)
        s.append({"role": "assistant", "content": "All steps are done."})
        if ahead:
            s.fold_ahead()  # the proxy calls this when the answer ended the turn
            assert s.background is not None
            s.background.wait(60)
        s.append({"role": "user", "content": "Now the next ones."})
        absorbed, verdict = request(s, now, gap=600.0)  # back after the TTL: the cache is cold
        assert verdict == Verdict.COLD
        return absorbed, s

    absorbed, s = cold_gap(ahead=True)
    assert absorbed > 0 and s.background is not None and s.background.adopted_ahead == 1
    absorbed, _ = cold_gap(ahead=False)
    assert absorbed == 0, "without it the cold fold lands a request later, on a warm cache again"


def test_no_fold_starts_at_the_turn_end_when_even_a_cold_fold_would_not_pay():
    now = [0.0]
    s = session(config(summarizer_input=10_000.0, summarizer_output=10_000.0), now)  # a very dear summarizer
    for n in range(8):
        request(s, now)
        step(s, n)
    s.append({"role": "assistant", "content": "All steps are done."})
    s.fold_ahead()
    assert s.background is not None and not s.background.busy and s.background.ready is None
    assert policy(s).ahead == 0


def test_the_measured_fold_time_is_carried_to_the_next_process():
    now = [0.0]
    s = session(config(), now)
    p = policy(s)
    p.fold_timed(0.3, 30_000)
    assert p.seconds_per_token is not None
    carried = s.micro.memory()
    other = session(config(), now)
    policy(other).restore(carried)
    assert policy(other).seconds_per_token == p.seconds_per_token


def test_before_any_fold_was_timed_a_model_summarizer_starts_earlier_than_the_extractive_one():
    from microcompact.bill.cache_usage import CacheObservations
    from microcompact.bill.fold_price import CacheState, FoldQuote, requests_until_fold

    model = parse_config(
        {
            "compression": {"micro_compact": True},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic", "summarizer_input": 0.0, "summarizer_output": 0.0},
            "auxiliary": {"compression": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}},
        }
    )
    extractive = config(summarizer_input=0.0, summarizer_output=0.0)
    quote = FoldQuote(prompt_tokens=60_000, change_point_tokens=20_000, removed_tokens=20_000)
    cache = CacheState(warm=True, growth_per_request=6_000)
    due = requests_until_fold(quote, extractive.cache_pricing(), cache, extractive.threshold_tokens())
    assert due is not None and due >= 4
    starts = {}
    for name, cfg in (("extractive", extractive), ("model", model)):
        p = PricePolicy(cfg, cfg.cache_pricing(), CacheObservations())
        p.requested(0.0)
        p.requested(1.0)  # a request a second
        starts[name] = p.due_in(quote, cache)
    assert starts["extractive"] is None, "a tenth of a second of passes: not yet"
    assert starts["model"] == due, "seconds per pass: started now, several requests before it is due"


def test_a_dropped_shadows_summarizer_calls_are_counted_once_and_never_as_applied():
    """A shadow that no longer applies is dropped, but its summarizer calls were made: ``take_spent`` hands
    its passes to whoever bills the summarizer, each once, and never one that was applied."""
    now = [0.0]
    s = session(config(), now)
    bg = s.background
    assert bg is not None
    n = 0
    applied: list[Any] = []
    while bg.ready is None and n < 40:
        now[0] += 10.0
        applied += s.before_request()
        answered(s)
        step(s, n)
        n += 1
        applied += s.drain(60)
    held = bg.ready
    assert held is not None and held.results, "a fold was computed ahead and held"
    assert all(r.record.get("summarizer_input_tokens") for r in held.results)
    s.compact()  # the held shadow's base is gone: dropped at the next request
    spent: list[Any] = []
    for _ in range(30):
        now[0] += 10.0
        applied += s.before_request()
        answered(s)
        bg.wait(60)
        spent += bg.take_spent()
        step(s, n)
        n += 1
    assert bg.discarded >= 1
    ids = [id(r) for r in spent]
    assert len(ids) == len(set(ids)), "a pass counted twice"
    assert {id(r) for r in held.results} <= set(ids), "the dropped shadow's passes are counted"
    assert not set(ids) & {id(r) for r in applied}, "an applied pass is billed where it was applied"
    assert bg.take_spent() == []
