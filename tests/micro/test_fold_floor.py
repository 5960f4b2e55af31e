"""What a fold keeps after its marker: the low-water mark in tokens, at least the newest step whole (or
``min_tail_messages`` when the config sets it); and a fold computed ahead with nothing kept of the
transcript it ran on is adopted only once messages came after it, so no view ever ends in its marker."""

from __future__ import annotations

from typing import Any

from microcompact.config import Config
from microcompact.events import MICRO_ABSORBS
from microcompact.messages import is_marker
from microcompact.micro import FoldStage
from microcompact.micro.ahead import ShadowFolds
from microcompact.micro.policy import MAX_CATCH_UP_PASSES, Fold, PassMode
from microcompact.session import Session
from support.price_loop import answered, step
from support.price_loop import price_config as config
from support.price_loop import step_session as session


def after_marker(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (index,) = [i for i, m in enumerate(messages) if is_marker(m)]
    return messages[index + 1 :]


def first_fold(s: Session, now: list[float]) -> tuple[int, list[dict[str, Any]]]:
    """Steps until a request folds: the step it folded at, and the view that went up."""
    for n in range(60):
        step(s, n)
        now[0] += 10
        if any(r.outcome in MICRO_ABSORBS for r in s.before_request()):
            return n, [dict(m) for m in s.ledger.messages]
        answered(s)
    raise AssertionError("no fold in 60 steps")


def calls(messages: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or []]


def test_config_fold_min_messages_is_one_unless_min_tail_messages_is_set():
    assert config().fold_min_messages() == 1
    assert config(min_tail_messages=3).fold_min_messages() == 3
    assert config(min_tail_messages=1).fold_min_messages() == 1
    # Unset is explicit (None): a dumped and reloaded config derives the same floors (no "was it set").
    for c in (config(), config(min_tail_messages=3)):
        again = Config.model_validate(c.model_dump())
        assert (again.fold_min_messages(), again.tail_min_messages()) == (c.fold_min_messages(), c.tail_min_messages())


def test_a_fold_keeps_only_the_newest_step_when_it_is_above_the_low_water_mark():
    now = [0.0]
    s = session(config(), now)
    n, view = first_fold(s, now)
    kept = after_marker(view)
    assert calls(kept) == [f"c{n}"] and [m["role"] for m in kept] == ["assistant", "tool"]
    assert sum(map(s.counter.count_message, kept)) > s.config.low_water_tokens(), "one step is more than the mark"


def test_min_tail_messages_set_keeps_the_step_before_the_newest_too():
    now = [0.0]
    s = session(config(min_tail_messages=3), now)
    n, view = first_fold(s, now)
    assert calls(after_marker(view)) == [f"c{n - 1}", f"c{n}"]


def test_small_steps_are_kept_down_to_the_low_water_mark():
    now = [0.0]
    s = session(config(micro_compact_low_water_tokens=20_000), now)  # about three of these steps
    _, view = first_fold(s, now)
    kept = after_marker(view)
    assert len(calls(kept)) >= 3
    assert sum(map(s.counter.count_message, kept[2:])) <= 20_000


def test_a_fold_computed_ahead_with_an_empty_tail_waits_for_the_next_message():
    now = [0.0]
    s = session(config(), now)
    for n in range(6):
        step(s, n)
    micro, ledger = s.micro, s.ledger
    micro.sync(ledger)
    shadows = ShadowFolds(micro)
    job = micro.fold_job(ledger, stage=FoldStage.RUNNING_AHEAD)
    shadows.run(ledger.snapshot(), (Fold(PassMode.DRAIN, MAX_CATCH_UP_PASSES, None, 0, 0),), job)
    assert job.open_end and job.events, "it absorbed through the newest step of its snapshot"
    before = [dict(m) for m in ledger.messages]
    # The same request again (a client's retry): adopting now would end the view in the marker.
    assert micro.applies(ledger, job) and not shadows.adoptable(ledger, job)
    assert micro.adopt_fold(ledger, job) is None
    assert [dict(m) for m in ledger.messages] == before and ledger.messages[-1]["role"] == "tool"
    step(s, 6)
    assert shadows.adoptable(ledger, job)
    assert micro.adopt_fold(ledger, job)
    kept = after_marker(list(ledger.messages))
    assert calls(kept) == ["c6"], "the new step is the tail of the view it switched to"
