"""The engines' replaceable scheduling policies and their memory.

A policy passed to ``BatchCompactor(policy=...)`` / ``MicroCompactor(policy=...)`` decides whether and how
far the engine folds, and is given what it needs (token counts, the time, the usage the session recorded);
each engine's ``memory()`` / ``restore()`` carry its state to the next process, which ``carry.py`` uses.
"""

from __future__ import annotations

from typing import Any

from microcompact import carry
from microcompact.batch import BatchCompactor, BatchPolicy, Fold, Moment, ThresholdPolicy
from microcompact.config import Config
from microcompact.micro import CadencePolicy, MicroCompactor, MicroPolicy
from microcompact.micro import Fold as MicroFold
from microcompact.micro import Moment as MicroMoment
from microcompact.tokens import Ledger
from support.batch_helpers import Scribe, build, config, counter


class Never:
    """A batch policy that never folds automatically and never settles for pruning."""

    def __init__(self) -> None:
        self.seen: list[Moment] = []
        self.settled: list[tuple[int, int, int]] = []

    def due(self, moment: Moment) -> bool:
        self.seen.append(moment)
        return False

    def fold(self, moment: Moment) -> Fold:
        self.seen.append(moment)
        return Fold(low_water=None, at_risk=False)

    def settle(self, tokens_before: int, tokens_after: int, pause_tokens: int) -> int | None:
        self.settled.append((tokens_before, tokens_after, pause_tokens))
        return 123

    def memory(self) -> dict[str, Any]:
        return {"never": True}

    def restore(self, memory: dict[str, Any]) -> None:
        assert memory.get("never") is True


def test_a_batch_policy_decides_whether_and_is_given_counts_time_and_usage() -> None:
    c = counter()
    c.calibrate(9_000, 9_500)  # the session recorded one request's usage
    policy = Never()
    b = BatchCompactor(config(), Scribe(), c, policy=policy, wall_clock=lambda: 42.0)
    ledger = Ledger(c, build(40, size=400))
    assert ledger.total > config().threshold_tokens()  # ThresholdPolicy would fold here
    assert ThresholdPolicy(config()).due(b.moment(ledger)) is True
    assert b.should_compress(ledger, prompt_tokens=30_000) is False
    moment = policy.seen[-1]
    assert (moment.counted_tokens, moment.prompt_tokens, moment.reported_tokens) == (ledger.total, 30_000, 30_000)
    assert moment.at == 42.0 and moment.usage == ((9_000, 9_500),)
    result = b.compact(ledger)
    assert result.changed
    assert result.outcome != "pruned"  # low_water=None: never stops at pruning
    assert policy.settled == [(result.record["tokens_before"], ledger.total, 0)]
    assert result.record["paused_until_tokens"] == 123  # what the policy said is what the record says
    assert b.memory() == {"never": True, "compactions": 1}


def test_a_policy_low_water_mark_decides_whether_pruning_alone_is_enough() -> None:
    """The same transcript, pruned only when the policy's low-water mark lets pruning suffice."""

    class Mark(ThresholdPolicy):
        def __init__(self, low_water: int | None) -> None:
            super().__init__(config())
            self.low_water = low_water

        def fold(self, moment: Moment) -> Fold:
            return Fold(low_water=self.low_water, at_risk=False)

    outcomes = []
    for low_water in (10**9, None):
        c = counter()
        b = BatchCompactor(config(), Scribe(), c, policy=Mark(low_water))
        outcomes.append(b.compact(Ledger(c, build(40, size=400))).outcome)
    assert outcomes[0] == "pruned" and outcomes[1] != "pruned"


def test_batch_memory_round_trips_through_restore_and_refuses_malformed_values() -> None:
    c = counter()
    b = BatchCompactor(config(), Scribe(), c)
    b.restore({"low_yield": 2, "paused_below": 12_345, "compactions": 7})
    assert b.memory() == {"low_yield": 2, "paused_below": 12_345, "compactions": 7}
    assert isinstance(b.policy, ThresholdPolicy) and b.policy.paused_below == 12_345
    try:
        b.restore({"paused_below": "soon"})
    except ValueError:
        pass
    else:
        raise AssertionError("a malformed pause was taken")


class Quiet(CadencePolicy):
    """A micro policy that runs no pass after turns and, before requests, up to 5 request passes that stop
    at ``low_water``; the rest of the protocol (folds planned ahead, by use, ...) as the cadence has it, as
    the protocol's docs say a custom policy should."""

    def __init__(self, config: Config, low_water: int | None = None) -> None:
        super().__init__(config)
        self.low_water = low_water
        self.turns: list[int] = []
        self.requests: list[float] = []

    def turn_ended(self, moment: MicroMoment, completed: bool) -> bool:
        self.turns.append(moment.turns)
        return False

    def before_request(self, moment: MicroMoment) -> tuple[MicroFold, ...]:
        return (MicroFold("request", 5, low_water=self.low_water),)

    def background_mode(self, moment: MicroMoment, busy: bool) -> str | None:
        return None

    def requested(self, at: float) -> None:
        self.requests.append(at)

    def memory(self) -> dict[str, Any]:
        return {}

    def restore(self, memory: dict[str, Any]) -> None:
        return None


def test_a_micro_policy_replaces_the_cadence() -> None:
    cfg = config(micro_compact=True, micro_compact_max_exchange_tokens=1000, protect_first_n=3)
    c = counter()
    policy = Quiet(cfg)
    m = MicroCompactor(cfg, Scribe(), c, policy=policy, wall_clock=lambda: 7.0)
    ledger = Ledger(c, build(30, size=400))
    for _ in range(3):
        assert m.finalize_turn(ledger) == []  # the policy says no: no pass, whatever the cadence says
    assert policy.turns == [1, 2, 3] and m.state.turns == 3
    assert isinstance(CadencePolicy(cfg).turn_ended(m.moment(ledger), True), bool)
    before = ledger.total
    results = m.before_request(ledger)
    passes = [r for r in results if r.record["mode"] == "request"]
    assert [r.outcome for r in passes] == ["absorbed"] * 5  # as many as the policy asked for, no more
    assert policy.requests == [7.0] and ledger.total < before


def test_a_micro_fold_stops_at_its_low_water_mark() -> None:
    """A long turn in progress: the same request passes run, unless the fold's low-water mark is met."""
    cfg = config(micro_compact=True, micro_compact_max_exchange_tokens=1000, protect_first_n=3)
    done = {}
    for low_water in (None, 10**9):
        c = counter()
        m = MicroCompactor(cfg, Scribe(), c, policy=Quiet(cfg, low_water))
        long_turn = build(1, iterations=40, size=300)
        ledger = Ledger(c, long_turn)
        done[low_water] = [r.outcome for r in m.before_request(ledger)]
    assert "absorbed" in done[None] and len(done[None]) <= 5
    assert done[10**9] == []


def test_micro_memory_is_what_carry_stores_and_restores_only_on_the_same_transcript() -> None:
    cfg = config(micro_compact=True, micro_compact_max_exchange_tokens=1000, protect_first_n=3)
    c = counter()
    m = MicroCompactor(cfg, Scribe(), c)
    b = BatchCompactor(cfg, Scribe(), c)
    ledger = Ledger(c, build(30, size=400))
    for _ in range(4):
        m.finalize_turn(ledger)
    assert m.stats().passes_total >= 1
    carried = carry.snapshot(ledger, c, m, b)
    assert carried["micro"] == m.memory() and carried["batch"] == b.memory()
    fresh = MicroCompactor(cfg, Scribe(), c)
    carry.restore(carried, ledger, c, fresh, BatchCompactor(cfg, Scribe(), c))
    assert fresh.memory() == m.memory()
    other = MicroCompactor(cfg, Scribe(), c)
    moved = Ledger(c, build(31, size=400))  # not the transcript the memory was taken on
    other.restore(m.memory(), moved, same_transcript=False)
    assert other.stats().passes_total == m.stats().passes_total  # running totals are taken
    assert other.state.cursor is None  # the cursor is not: recovered from the transcript at the next pass


def test_the_default_policies_satisfy_the_protocols() -> None:
    batch_policy: BatchPolicy = ThresholdPolicy(config())
    micro_policy: MicroPolicy = CadencePolicy(config())
    assert batch_policy.memory() == {"low_yield": 0, "paused_below": None}
    assert micro_policy.memory() == {}
