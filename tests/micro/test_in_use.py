"""Folding by use, wired into the engine: the price schedule keeps what the agent still uses, records it,
and its estimate prices what a fold drops; the cadence schedule folds by age alone."""

from __future__ import annotations

from typing import Any

import pytest

from microcompact.bill.cache_usage import CacheObservations
from microcompact.config import parse_config
from microcompact.events import MICRO_ABSORBS
from microcompact.micro import CadencePolicy, MicroCompactor, PassMode
from microcompact.micro.in_use import InUse, command_uses
from microcompact.micro.price import PricePolicy
from microcompact.micro.working_set import COMMAND_USES
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import Window, WindowBudget
from support.agent_steps import bash, filler, read, reply, user
from support.price_loop import Notes
from support.strategies import isolated_config_data

Message = dict[str, Any]
SOURCE = "def pane_exists(name):\n    return name in ActiveSessionRegistry.panes\n" * 20


def _engine(by_price: bool, by_use: bool = True) -> tuple[MicroCompactor, Ledger]:
    data = isolated_config_data(300, protect_first_n=1, min_tail_messages=1)
    data["compression"] = {**data.get("compression", {}), "micro_compact_fold_by_use": by_use}
    data["model"] = {**data.get("model", {}), "context_length": 200_000}
    config = parse_config(data)
    counter = TokenCounter(EstimateCounter())
    policy = None
    if by_price:
        policy = PricePolicy(config, config.pricing.resolve("anthropic", summarizer_free=True), CacheObservations())
    engine = MicroCompactor(config, Notes(), counter, policy=policy)
    msgs = [user("fix the pane check"), *read("src/app/panes.py", SOURCE)]
    msgs += [*filler(40), reply("pane_exists still needs the fix")]
    return engine, Ledger(counter, msgs)


def test_the_price_schedule_keeps_a_read_in_use_and_records_it() -> None:
    engine, ledger = _engine(by_price=True)
    the_read = ledger.messages[1:3]
    read_tokens = sum(ledger.tokens[1:3])
    results = engine.run_pass(ledger, PassMode.DRAIN)
    absorbed = [r for r in results if r.outcome in MICRO_ABSORBS]
    assert absorbed, results
    assert all(any(m == k for k in ledger.messages) for m in the_read), "the read in use stays verbatim"
    record = absorbed[0].record
    assert record["kept_in_use_iterations"] == 1
    assert record["kept_in_use_tokens"] == read_tokens


@pytest.mark.parametrize(("by_price", "by_use"), [(True, False), (False, True)], ids=["price-off", "cadence"])
def test_without_fold_by_use_the_same_read_is_folded_and_nothing_kept_is_recorded(by_price: bool, by_use: bool) -> None:
    """The price schedule with ``micro_compact_fold_by_use`` off, and the cadence schedule whatever it says,
    fold by age alone."""
    engine, ledger = _engine(by_price=by_price, by_use=by_use)
    assert isinstance(engine.policy, PricePolicy if by_price else CadencePolicy)
    assert not engine.policy.folds_by_use()
    the_read = ledger.messages[1:3]
    results = engine.run_pass(ledger, PassMode.DRAIN)
    absorbed = [r for r in results if r.outcome in MICRO_ABSORBS]
    assert absorbed, results
    assert not all(any(m == k for k in ledger.messages) for m in the_read)
    assert "kept_in_use_tokens" not in absorbed[0].record


def test_the_estimate_counts_the_kept_read_and_prices_a_dropped_one() -> None:
    engine, ledger = _engine(by_price=True)
    window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(engine.config))
    in_use = engine.in_use.keep(ledger.messages, ledger.tokens, window)
    assert in_use is not None and in_use[1] == frozenset({1})
    estimate = engine.moment(ledger).estimate()
    read_tokens = sum(ledger.tokens[1:3])
    assert estimate.kept_in_use == read_tokens
    assert (estimate.refetches, estimate.refetched) == (0, 0)
    engine.in_use.budget = lambda: 0  # type: ignore[method-assign]  # no room for the working set
    dropped = engine.moment(ledger).estimate()
    assert (dropped.kept_in_use, dropped.refetches, dropped.refetched) == (0, 1, read_tokens)
    assert dropped.absorbable == estimate.absorbable + read_tokens


def test_a_fold_after_a_refetch_keeps_the_step_the_agent_works_on() -> None:
    """Issue 26's cascade: the newest iteration re-runs an old command, and the step before it holds the key
    the next reply must quote. The fold keeps only the newest in its tail; it must not absorb that step."""
    engine, ledger = _engine(by_price=True)
    key = "8c41e07d2b9f3a16"
    numbers = " ".join(str(41_000_000 + k) for k in range(200))  # over the fold's tail: only the re-fetch fits
    used = bash("run step 40", "key of step 40: 3f9a0c2e7b1d4a65")
    working = bash("run step 41", f"{numbers}\nkey of step 41: {key}", text="step 40 key 3f9a0c2e7b1d4a65")
    refetch = bash("run step 2", "id of step 2: d2e5a9b04c7f1836")
    for m in [*used, *working, *refetch]:
        ledger.append(m)
    budget = engine._fold_budget(0, 1)
    assert Window.of(ledger.messages, ledger.tokens, budget).tail == len(ledger.messages) - 2
    results = engine.run_pass(ledger, PassMode.DRAIN, budget)
    assert any(r.outcome in MICRO_ABSORBS for r in results), results
    contents = [m.get("content") for m in ledger.messages]
    assert all(m["content"] in contents for m in working), "the working step stays verbatim"


def test_a_taken_command_output_goes_under_the_extractive_summarizer_only() -> None:
    """The extractive marker keeps the quoting reply's words; a model's summary may not, so one use keeps it."""
    extractive = parse_config({})
    model = parse_config(
        {"auxiliary": {"compression": {"provider": "openai", "model": "m", "base_url": "http://h/v1"}}}
    )
    assert command_uses(extractive) == COMMAND_USES == 2
    assert command_uses(model) == 1
    assert InUse(model).command_uses == 1
