"""The router's one record per conversation key, and SessionExists: a new session under a taken id.

The router used to keep seven dicts consistent by hand; now each key has one record (its lock, branch
list, open sessions and the store versions it let them go at) and one recency order across keys decides
eviction. These tests hold the invariant that ties the two together through routing, eviction, hand-over
and close, and check that a taken branch id is skipped because of the error's type, not its text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sync_history import small_config

from microcompact.router import SessionRouter, branch_id
from microcompact.session import Session
from microcompact.session.store_writer import SessionExists
from microcompact.store import open_store
from support.strategies import examples


def _history(key: str, turns: int) -> list[dict[str, str]]:
    history: list[dict[str, str]] = []
    for t in range(turns):
        history.append({"role": "user", "content": f"{key}: question {t}"})
        history.append({"role": "assistant", "content": f"{key}: answer {t}"})
    return history


def _assert_consistent(router: SessionRouter) -> None:
    """Every open session sits in its key's record and in the recency order, and nowhere else."""
    in_records = {sid: record for record in router._conversations.values() for sid in record.sessions}
    assert set(in_records) == set(router._recency), "the recency order and the records hold the same sessions"
    for sid, record in router._recency.items():
        assert in_records[sid] is record
        assert router._key_of[sid] == record.key
    for record in router._conversations.values():
        leftover = set(record.versions) - set(record.sessions) - {branch_id(record.key, 1)}
        assert not leftover, f"versions of sessions no longer open: {leftover}"
    assert len(router._recency) == len(router.sessions())


def test_a_new_session_under_a_stored_id_raises_session_exists(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        with Session(small_config(), store=store, session_id="s") as first:
            first.append({"role": "user", "content": "hello"})
        with pytest.raises(SessionExists) as raised:
            Session(small_config(), store=store, session_id="s")
        assert isinstance(raised.value, ValueError), "old `except ValueError` callers still catch it"
        assert raised.value.session_id == "s"
        assert "already exists in the store: resume it with Session.open" in str(raised.value)
        with Session.open(store, "s", small_config()) as resumed:  # the refused attempt left no lease behind
            assert [m["content"] for m in resumed.messages] == ["hello"]


def test_fork_into_a_taken_id_raises_session_exists(tmp_path: Path) -> None:
    history = _history("k", 2)
    with open_store(tmp_path / "s.db") as store:
        with Session(small_config(), store=store, session_id="taken") as other:
            other.append({"role": "user", "content": "someone else's"})
        with Session(small_config(), store=store, session_id="parent") as parent:
            parent.sync_history(history)
            with pytest.raises(SessionExists):
                parent.fork("taken", [*history[:-1], {"role": "assistant", "content": "edited"}], 3)


def test_the_router_skips_a_branch_id_another_process_took(tmp_path: Path) -> None:
    history = _history("k", 2)
    edited = [*history[:-1], {"role": "assistant", "content": "k: another answer"}]
    with open_store(tmp_path / "s.db") as store:
        router = SessionRouter(small_config(), store=store)
        try:
            router.route("k", history)
            with Session(small_config(), store=store, session_id=branch_id("k", 2)) as squatter:
                squatter.append({"role": "user", "content": "written by another process"})
            routed = router.route("k", edited)
            assert routed.session.session_id == branch_id("k", 3)
            assert routed.forked_from == "k"
            _assert_consistent(router)
        finally:
            router.close()


def test_eviction_leaves_no_partial_record(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        router = SessionRouter(small_config(), store=store, max_open=1, shared=True)
        try:
            for key in ("a", "b"):
                with router.lock(key):
                    router.route(key, _history(key, 2)).session.flush()
            assert [s.session_id for s in router.sessions()] == ["b"]
            a = router._conversations["a"]
            assert a.sessions == {} and set(a.versions) <= {"a"}, "a's session left its record entirely"
            assert list(router._recency) == ["b"]
            _assert_consistent(router)
            with router.lock("a"):  # reopened from the store: nothing was lost with the record
                again = router.route("a", [*_history("a", 2), {"role": "user", "content": "a: more"}])
                assert again.sync.matched == 4 and again.sync.appended == 1
            assert [s.session_id for s in router.sessions()] == ["a"]
            _assert_consistent(router)
        finally:
            router.close()
        assert router.sessions() == [] and not router._recency
        assert all(not r.sessions and not r.versions for r in router._conversations.values())


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 3), st.booleans()), min_size=1, max_size=8),
    max_open=st.integers(1, 3),
    shared=st.booleans(),
)
def test_records_stay_consistent_through_any_routing(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, bool]], max_open: int, shared: bool
) -> None:
    """Keys routed in any order, growing or editing their histories (forks), with any cache size."""
    db = tmp_path_factory.mktemp("record") / "s.db"
    with open_store(db) as store:
        router = SessionRouter(small_config(), store=store, max_open=max_open, shared=shared)
        grown: dict[str, int] = {}
        try:
            for key, turns, edit in steps:
                grown[key] = max(grown.get(key, 0), turns)
                history = _history(key, grown[key])
                if edit:
                    history[-1] = {"role": "assistant", "content": f"{key}: edited at {len(steps)}"}
                with router.lock(key):
                    routed = router.route(key, history)
                    assert routed.sync.diverged is None
                _assert_consistent(router)
                # Beyond max_open only sessions of the key just held stay (a held key's are never closed).
                open_keys = {router._key_of[s.session_id] for s in router.sessions()}
                assert len(router.sessions()) <= max_open or open_keys == {key}
        finally:
            router.close()
        _assert_consistent(router)
        assert router.sessions() == []
