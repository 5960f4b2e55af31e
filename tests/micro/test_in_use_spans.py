"""Folding by use: the working set stays verbatim inside folded spans, placed so the contract holds, and
leaves with the next fold once the agent stops using it."""

from __future__ import annotations

import random
from collections.abc import Collection
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.bill.fold_price import keep_budget
from microcompact.config import Config, parse_config
from microcompact.messages import is_marker, marker_count
from microcompact.micro.in_use_spans import kept_zone
from microcompact.micro.state import RollingSummary
from microcompact.micro.working_set import PENDING, RECENT_REPLIES, iterations_of, working_set
from microcompact.properties import contract_errors
from microcompact.store import open_store
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import Window, WindowBudget
from support.agent_steps import bash, edit, filler, read, reply, user
from support.in_use_folds import Fold, fold_once
from support.strategies import examples, isolated_config_data, micro_configs, transcripts

Message = dict[str, Any]
SOURCE = "def pane_exists(name):\n    return name in ActiveSessionRegistry.panes\n" * 20
FOLDS = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
MODES = ("drain", "turn", "request")


def _config(tail_tokens: int = 300) -> Config:
    return parse_config(isolated_config_data(tail_tokens, protect_first_n=1, min_tail_messages=1))


def _ledger(msgs: list[Message]) -> Ledger:
    return Ledger(TokenCounter(EstimateCounter()), msgs)


def _present(msgs: list[Message], run: list[Message]) -> bool:
    """Every message of ``run`` is in ``msgs``, verbatim (a splice copies the dicts it keeps)."""
    return all(any(m == other for other in msgs) for m in run)


def _fold_all(ledger: Ledger, state: RollingSummary, config: Config, budget: int | None) -> list[Fold]:
    """Fold in drain mode until nothing is left, keeping the working set within ``budget`` (None: by age)."""
    folds: list[Fold] = []
    for _ in range(50):
        keep: Collection[int] | None = None
        if budget is not None:
            keep = working_set(ledger.messages).keep_within(ledger.tokens, budget)
        done = fold_once(ledger, state, config, keep, "drain")
        if done is None:
            break
        folds.append(done)
    return folds


def test_a_read_the_agent_keeps_mentioning_stays_and_a_stale_read_goes() -> None:
    msgs = [user("fix the pane check"), *read("src/app/panes.py", SOURCE)]
    msgs += [*read("src/app/other_mod.py", "old_helper_name " * 40), *edit("src/app/other_mod.py", "a", "b")]
    ledger, state, config = _ledger(msgs), RollingSummary(), _config()
    kept_read = ledger.messages[1:3]
    stale_read = ledger.messages[3:5]
    for k in range(12):
        for m in [*filler(1, f"s{k}"), reply(f"step {k}: pane_exists still needs the fix")]:
            ledger.append(m)
        _fold_all(ledger, state, config, budget=10_000)
        assert _present(ledger.messages, kept_read), k
    assert not _present(ledger.messages, stale_read)
    assert state.marker_index is not None and ledger.messages.index(kept_read[0]) < state.marker_index
    for m in filler(RECENT_REPLIES + 1, "after"):
        ledger.append(m)
    _fold_all(ledger, state, config, budget=10_000)
    assert not _present(ledger.messages, kept_read)
    assert marker_count(ledger.messages, "micro") == 1


def test_without_a_working_set_the_same_run_folds_the_read() -> None:
    msgs = [user("fix the pane check"), *read("src/app/panes.py", SOURCE)]
    ledger, state, config = _ledger(msgs), RollingSummary(), _config()
    the_read = ledger.messages[1:3]
    for k in range(4):
        for m in [*filler(1, f"s{k}"), reply(f"step {k}: pane_exists still needs the fix")]:
            ledger.append(m)
        _fold_all(ledger, state, config, budget=None)
    assert not _present(ledger.messages, the_read)


def test_a_kept_iteration_sits_before_the_marker_after_its_user_message() -> None:
    msgs = [user("u0"), *read("src/app/panes.py", "def pane_exists"), user("u1"), *bash("make check_all", "passed")]
    msgs += [reply("pane_exists is fine"), *filler(40)]
    ledger, state = _ledger(msgs), RollingSummary()
    first = ledger.messages[:4]
    done = fold_once(ledger, state, _config(), keep={1}, mode="drain")
    assert done is not None
    after = ledger.messages
    assert after[:4] == first
    assert is_marker(after[4]) and state.marker_index == 4
    assert done.span.kept == (1, 2, 3)


def _check(fold: Fold, keep: Collection[int]) -> None:
    before, after, span, w = fold.before, fold.after, fold.span, fold.window
    assert contract_errors(before, after, head=w.head, tail=w.tail) == []
    assert marker_count(after, "micro") == 1
    ends = iterations_of(before)
    for s in keep:
        if span.start <= s < span.end and s in ends and s != fold.event.removed_marker:
            assert _present(after, before[s : ends[s]]), s
    last = span.end - 1
    assert last in fold.event.absorbed or last == fold.event.removed_marker
    assert is_marker(after[fold.event.marker_index_after])
    start = span.start - (1 if fold.event.removed_marker is not None and fold.event.removed_marker < span.start else 0)
    assert after[start : start + len(span.kept)] == [before[i] for i in span.kept]


@FOLDS
@given(transcripts(), micro_configs(), st.randoms(use_true_random=False))
def test_any_transcript_any_in_use_set_keeps_the_contract(
    msgs: list[Message], cfg: dict[str, Any], rng: random.Random
) -> None:
    config = parse_config(cfg)
    ledger, state = _ledger(msgs), RollingSummary()
    for k in range(8):
        keep = {s for s in iterations_of(ledger.messages) if rng.random() < 0.5}
        done = fold_once(ledger, state, config, keep, MODES[k % 3])
        if done is not None:
            _check(done, keep)


@FOLDS
@given(transcripts(), micro_configs(), st.sampled_from([0, 200, 2_000, 20_000]))
def test_the_working_set_costs_at_most_its_budget_over_folding_by_age(
    msgs: list[Message], cfg: dict[str, Any], budget: int
) -> None:
    """No request over the window: what the working set keeps is bounded by the budget the window gives
    (``keep_budget``), so a drained transcript is at most that much above one drained by age, beside the
    newest iterations whose output no reply used yet (``WorkingSet.pending``, kept whatever the budget: at
    most ``PENDING`` + 1 of the newest, which the hard limits bound)."""
    config = parse_config(cfg)
    by_age = _ledger([dict(m) for m in msgs])
    _fold_all(by_age, RollingSummary(), config, budget=None)
    by_use, state = _ledger(msgs), RollingSummary()
    for fold in _fold_all(by_use, state, config, budget=budget):
        assert contract_errors(fold.before, fold.after, head=fold.window.head, tail=fold.window.tail) == []
    now = working_set(by_use.messages)
    assert len(now.pending) <= PENDING + 1
    pending = now.tokens(by_use.tokens, now.pending)
    if state.marker_index is not None:
        head = Window.of(by_use.messages, by_use.tokens, WindowBudget.of(config)).head
        zone = kept_zone(by_use.messages, state.marker_index, head) or head
        rows = zip(by_use.messages[zone : state.marker_index], by_use.tokens[zone : state.marker_index], strict=True)
        assert sum(t for m, t in rows if m.get("role") in ("assistant", "tool")) <= budget + pending
    assert by_use.total <= by_age.total + budget + pending


def test_keep_budget_bounds_the_working_set_by_the_window() -> None:
    assert keep_budget(4_000, 200_000) < 200_000


def _shape(msgs: list[Message]) -> list[tuple[Any, ...]]:
    return [(m.get("role"), str(m.get("content")), m.get("tool_call_id"), is_marker(m)) for m in msgs]


def test_the_store_holds_kept_iterations_and_the_marker_in_the_order_memory_does(tmp_path: Path) -> None:
    """A fold that keeps a read, then one that reaches back into the kept zone for it: the stored session
    (a real SQLite file) reloads as the transcript in memory, kept messages before the marker."""
    msgs = [user("u0"), *read("src/app/panes.py", "def pane_exists"), user("u1"), *bash("make check_all", "ok")]
    msgs += [reply("pane_exists is fine"), *filler(40)]
    with open_store(tmp_path / "s.db") as store:
        store.append("sid", msgs)
        ledger, state, config = _ledger(store.load_active("sid")), RollingSummary(), _config()
        first = fold_once(ledger, state, config, {1}, "drain", partial(store.archive_and_compact, "sid"))
        assert first is not None and 1 in first.span.kept
        assert _shape(store.load_active("sid")) == _shape(ledger.messages)
        for m in filler(3, "more"):
            ledger.append(m)
        store.append("sid", ledger.messages[-6:])
        second = fold_once(ledger, state, config, set(), "drain", partial(store.archive_and_compact, "sid"))
        assert second is not None and second.event.removes_marker_inside and second.span.start == 1
        assert _shape(store.load_active("sid")) == _shape(ledger.messages)
        assert not _present(ledger.messages, first.before[1:3])


def test_a_fold_of_the_kept_zone_alone_puts_the_marker_where_the_old_one_was(tmp_path: Path) -> None:
    msgs = [user("u0"), *read("src/app/panes.py", "def pane_exists"), user("u1"), *bash("make check_all", "ok")]
    msgs += [reply("pane_exists is fine"), *filler(40)]
    with open_store(tmp_path / "s.db") as store:
        store.append("sid", msgs)
        ledger, state, config = _ledger(store.load_active("sid")), RollingSummary(), _config()
        assert fold_once(ledger, state, config, {1}, "drain", partial(store.archive_and_compact, "sid"))
        old_marker = state.marker_index
        for m in filler(3, "more"):
            ledger.append(m)
        store.append("sid", ledger.messages[-6:])
        all_but_the_read = set(iterations_of(ledger.messages)) - {1}
        done = fold_once(ledger, state, config, all_but_the_read, "drain", partial(store.archive_and_compact, "sid"))
        assert done is not None and done.event.absorbed == (1, 2) and done.span.end == (old_marker or 0) + 1
        assert _shape(store.load_active("sid")) == _shape(ledger.messages)
        assert is_marker(ledger.messages[state.marker_index]) and state.marker_index == (old_marker or 0) - 2
