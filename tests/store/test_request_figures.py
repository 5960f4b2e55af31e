"""The per-request figures (schema v3) in both backends: appended in order, read back per session, the newest
``limit`` kept; and a version 2 store is migrated in place, its sessions kept."""

from __future__ import annotations

import sqlite3
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.store import SCHEMA_VERSION
from microcompact.store.request_figures import RequestFigures
from support.strategies import examples

SID = "conversation-a"


def test_rows_come_back_per_session_oldest_first(store: Any) -> None:
    store.append(SID, [{"role": "user", "content": "hi"}])
    store.append("other", [{"role": "user", "content": "hello"}])
    figures = RequestFigures(store)
    for n in range(5):
        figures.add(SID, 100.0 + n, {"occupancy_pct": 10.0 + n, "passes": [{"outcome": "absorbed"}] * (n % 2)})
    figures.add("other", 50.0, {"occupancy_pct": 1.5})
    rows = figures.of(SID)
    assert [r["at"] for r in rows] == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert [r["occupancy_pct"] for r in rows] == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert [len(r["passes"]) for r in rows] == [0, 1, 0, 1, 0]
    assert [r["at"] for r in figures.of(SID, limit=2)] == [103.0, 104.0]
    assert figures.summary() == {SID: {"requests": 5, "last_at": 104.0}, "other": {"requests": 1, "last_at": 50.0}}
    assert figures.of("nobody") == []


@settings(max_examples=examples(25), deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.one_of(st.none(), st.integers(), st.text(max_size=200)), max_size=6))
def test_any_json_object_round_trips(tmp_path_factory: Any, figures: dict[str, Any]) -> None:
    from microcompact.store import open_store

    with open_store(tmp_path_factory.mktemp("rt") / "s.db") as store:
        store.append(SID, [{"role": "user", "content": "hi"}])
        RequestFigures(store).add(SID, 1.0, figures)
        [row] = RequestFigures(store).of(SID)
    assert {k: v for k, v in row.items() if k != "at"} == {k: v for k, v in figures.items() if k != "at"}


def _downgrade_to_v2(factory: Any) -> None:
    """The store as version 2 left it: no request_figures table."""
    if factory.kind == "sqlite":
        conn = sqlite3.connect(factory.target)
        with conn:
            conn.execute("DROP TABLE request_figures")
            conn.execute("UPDATE schema_version SET version = 2")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(factory.target, autocommit=True) as conn:
            conn.execute("DROP TABLE request_figures")
            conn.execute("UPDATE schema_version SET version = 2")


def test_a_version_2_store_is_migrated_and_keeps_its_sessions(store_factory: Any) -> None:
    assert SCHEMA_VERSION == 3
    first = store_factory.open()
    first.append(SID, [{"role": "user", "content": "kept across the migration"}])
    first.close()
    _downgrade_to_v2(store_factory)
    again = store_factory.open()
    assert [m["content"] for m in again.load_active(SID)] == ["kept across the migration"]
    RequestFigures(again).add(SID, 7.0, {"cache_read": 12})
    assert RequestFigures(again).of(SID) == [{"cache_read": 12, "at": 7.0}]
