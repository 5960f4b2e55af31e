"""The session store contract, run against both backends (``store``/``store_factory`` fixtures in conftest).

Every test that uses ``store`` or ``store_factory`` runs once on SQLite and once on PostgreSQL (a fresh
database each time). Backend-specific faults (a corrupt file, a full SQLite database, a restarted server)
are exercised on the backend that has them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors
from microcompact.events import Absorb, Rewrite, Span, apply_event
from microcompact.messages import MARKER_PREFIX, marker_kind, render_marker, render_micro_marker
from microcompact.session import Session
from microcompact.store import (
    SCHEMA_VERSION,
    PostgresStore,
    SQLiteStore,
    StoreConflict,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    default_store_path,
    open_store,
)
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter

SID = "sess-1"


# --------------------------------------------------------------------------- helpers


def call(cid, command="ls"):
    return {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"command": command})}}


def exchange(n, iterations=1, text="output"):
    """assistant(tool call) + tool result per iteration, then a final assistant answer."""
    out = []
    for k in range(iterations):
        cid = f"c{n}_{k}"
        out.append({"role": "assistant", "content": f"step {n}.{k}", "tool_calls": [call(cid, f"cmd{n}_{k}")]})
        out.append({"role": "tool", "tool_call_id": cid, "content": f"{text} {n}.{k}"})
    out.append({"role": "assistant", "content": f"done {n}"})
    return out


def transcript(turns, iterations=1):
    msgs = [{"role": "system", "content": "You are a coding agent."}]
    for n in range(turns):
        msgs.append({"role": "user", "content": f"request {n}"})
        msgs += exchange(n, iterations)
    return msgs


def strip(messages):
    """Drop the token cache (never stored) so in-memory and stored transcripts compare equal."""
    return [{k: v for k, v in m.items() if k != "_tokens"} for m in messages]


def ledger_of(messages):
    return Ledger(TokenCounter(EstimateCounter()), messages)


def absorb(ledger, start, end, summary, removed=None, kept=()):
    absorbed = tuple(i for i in range(start, end) if i not in kept)
    return Absorb(Span(start, end, 0, tuple(kept)), removed, render_micro_marker(summary), summary, absorbed)


def commit_and_apply(store, sid, ledger, event):
    """What a Session does: store first, then memory; stored and in-memory transcripts must agree."""
    written = store.archive_and_compact(sid, event, ledger.messages)
    apply_event(ledger, event)
    assert store.load_active(sid) == strip(ledger.messages)
    return written


def states(store, sid):
    return {m["_row"]: m["_state"] for m in store.export(sid, include_absorbed=True)}


def stored_session(store, sid=SID, turns=3):
    msgs = transcript(turns)
    store.append(sid, msgs)
    return ledger_of(store.load_active(sid))


# --------------------------------------------------------------------------- append, load, resume


def test_append_and_load_round_trip(store):
    msgs = [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "cat x")]},
        {"role": "tool", "tool_call_id": "c1", "name": "Bash", "content": "naïve ✓ 日本語 \x00 NUL"},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "assistant", "tool_calls": [call("c3")]},  # no content key at all
        {"role": "tool", "tool_call_id": "c3", "content": "ok", "_tokens": 7},  # cache: not stored
        render_micro_marker("what happened", turns=3),
        {"role": "assistant", "content": "answer", "_mc": {"note": "library metadata"}},
    ]
    store.append(SID, msgs)
    assert [m["_pos"] for m in msgs] == list(range(len(msgs)))
    assert len({m["_row"] for m in msgs}) == len(msgs)
    loaded = store.load_active(SID)
    assert loaded == strip(msgs)
    assert "content" not in loaded[5]
    assert loaded[7]["_mc"] == {"marker": "micro", "turns": 3} and marker_kind(loaded[7]) == "micro"
    assert [marker_kind(m) for m in loaded].count("micro") == 1
    # appending continues after the last position
    more = [{"role": "user", "content": "again"}]
    store.append(SID, more)
    assert more[0]["_pos"] == len(msgs)
    assert store.load_active(SID)[-1] == more[0]


def test_each_message_is_written_once(store):
    msgs = transcript(1)
    store.append(SID, msgs)
    fresh = {"role": "user", "content": "new"}
    with pytest.raises(ValueError, match="already stored"):
        store.append(SID, [fresh, msgs[1]])
    assert "_row" not in fresh  # nothing of the rejected batch was written
    with pytest.raises(ValueError, match="twice"):
        store.append(SID, [fresh, fresh])
    with pytest.raises(ValueError, match="JSON"):
        store.append(SID, [{"role": "user", "content": "x", "blob": object()}])
    assert len(store.load_active(SID)) == len(msgs)
    store.append(SID, [])  # a no-op


def test_resume_after_reopen(store_factory):
    s1 = store_factory.open()
    assert s1.create_session(SID, {"agent": "test"}) is True
    assert s1.create_session(SID, {"agent": "other"}) is False  # idempotent
    ledger = stored_session(s1)
    commit_and_apply(s1, SID, ledger, absorb(ledger, 2, 5, "first"))
    before = s1.load_active(SID)
    s1.close()
    with pytest.raises(StoreError, match="closed"):
        s1.load_active(SID)
    s2 = store_factory.open()
    after = s2.load_active(SID)
    assert after == before
    assert [marker_kind(m) for m in after].count("micro") == 1
    (info,) = s2.list_sessions()
    assert info["id"] == SID and info["meta"] == {"agent": "test"}
    assert info["counts"] == {"active": len(after), "absorbed": 3, "superseded": 0} and info["markers"] == 1
    assert info["created_at"] <= info["updated_at"]
    nxt = [{"role": "user", "content": "after restart"}]
    s2.append(SID, nxt)
    assert nxt[0]["_pos"] == max(m["_pos"] for m in s2.export(SID, include_absorbed=True)) == 13


# --------------------------------------------------------------------------- compaction events


def test_absorb_then_absorb_supersedes_the_first_marker(store):
    ledger = stored_session(store, turns=4)  # sys, u0, a t a, u1, a t a, u2, a t a, u3, a t a
    first_rows = [ledger.messages[i]["_row"] for i in (2, 3, 4)]
    e1 = absorb(ledger, 2, 5, "summary one")
    assert commit_and_apply(store, SID, ledger, e1) == 4  # 3 absorbed + 1 marker
    m1 = e1.marker
    assert m1["_pos"] == 4 and isinstance(m1["_row"], int)  # the position of the last absorbed message
    st = states(store, SID)
    assert [st[r] for r in first_rows] == ["absorbed"] * 3 and st[m1["_row"]] == "active"
    # memory is now sys, u0, M1, u1, a t a, u2, ...; the next pass absorbs 4..6 and removes M1
    e2 = absorb(ledger, 4, 7, "summary one and two", removed=2)
    assert commit_and_apply(store, SID, ledger, e2) == 5  # 3 absorbed + 1 superseded + 1 marker
    st = states(store, SID)
    assert st[m1["_row"]] == "superseded" and st[e2.marker["_row"]] == "active"
    active = store.load_active(SID)
    assert [m["role"] for m in active[:4]] == ["system", "user", "user", "assistant"]
    assert marker_kind(active[3]) == "micro" and active[3]["_pos"] == 8
    assert role_sequence_errors(active) == []
    rows = {m["_row"]: m for m in store.export(SID, include_absorbed=True)}
    assert rows[m1["_row"]]["_absorbed_by"] == e2.marker["_row"]
    assert all(rows[r]["_absorbed_by"] == m1["_row"] for r in first_rows)


def test_absorb_keeps_user_messages_inside_the_span(store):
    ledger = stored_session(store, turns=4)
    # one span over two exchanges: the user message between them (index 5) stays, before the marker
    e = absorb(ledger, 2, 9, "two exchanges", kept=(5,))
    assert commit_and_apply(store, SID, ledger, e) == 7
    active = store.load_active(SID)
    assert [m["role"] for m in active[:4]] == ["system", "user", "user", "assistant"]
    assert active[2]["content"] == "request 1" and marker_kind(active[3]) == "micro"
    assert e.marker["_pos"] == 8


def test_rewrite_supersedes_the_marker_in_place(store):
    ledger = stored_session(store, turns=3)
    e1 = absorb(ledger, 2, 5, "long summary " * 20)
    commit_and_apply(store, SID, ledger, e1)
    rewrite = Rewrite(2, render_micro_marker("short"), "short")
    assert commit_and_apply(store, SID, ledger, rewrite) == 2  # 1 superseded + 1 marker
    assert rewrite.marker["_pos"] == e1.marker["_pos"]
    st = states(store, SID)
    assert st[e1.marker["_row"]] == "superseded" and st[rewrite.marker["_row"]] == "active"
    with pytest.raises(StoreConflict, match="not a marker"):  # a Rewrite must point at a marker
        store.archive_and_compact(SID, Rewrite(1, render_micro_marker("x"), "x"), ledger.messages)


@pytest.mark.parametrize("bad", ["unflushed", "marker_stored"])
def test_archive_refuses_unflushed_messages(store, bad):
    ledger = stored_session(store, turns=2)
    msgs = ledger.messages
    before = store.export(SID, include_absorbed=True)
    if bad == "unflushed":
        msgs = [dict(m) for m in msgs]
        del msgs[3]["_row"]
        event = absorb(ledger, 2, 5, "s")
        match = "flush"
    else:
        event = Absorb(Span(2, 5, 0), None, dict(msgs[0]), "s", (2, 3, 4))
        match = "already stored"
    with pytest.raises(ValueError, match=match):
        store.archive_and_compact(SID, event, msgs)
    assert store.export(SID, include_absorbed=True) == before


def test_rows_written_per_pass_do_not_depend_on_transcript_length(store):
    written = {}
    for size in (10, 2000):
        sid = f"len-{size}"
        store.append(sid, transcript(500)[:size])
        ledger = ledger_of(store.load_active(sid))
        assert len(ledger) == size
        first = commit_and_apply(store, sid, ledger, absorb(ledger, 2, 5, "one"))
        second = store.archive_and_compact(sid, absorb(ledger, 4, 7, "two", removed=2), ledger.messages)
        written[size] = (first, second)
    assert written[10] == written[2000] == (4, 5)


def test_generic_apply_fits_a_batch_event(store):
    """The internal write every event goes through also expresses a batch compaction: absorb rows of
    several exchanges, replace two user messages by one joined message, insert one batch marker."""
    ledger = stored_session(store, turns=3)  # sys u0 a t a u1 a t a u2 a t a
    msgs = ledger.messages
    row = [m["_row"] for m in msgs]
    joined = {"role": "user", "content": "request 0\n\nrequest 1"}
    marker = render_marker("batch summary", "batch")

    def txn(cur):
        assert store._touch_session(cur, SID, create=False)
        pos = store._lock_rows(cur, SID, [row[i] for i in (1, 2, 3, 4, 5, 6, 7, 8)], {})
        return store._apply(
            cur,
            SID,
            absorb=[row[i] for i in (2, 3, 4, 6, 7, 8)],
            supersede=[(row[1], 1), (row[5], 1)],
            insert=[(pos[row[8]], marker), (pos[row[5]], joined)],
        )

    written, ids = store._txn(txn, write=True)
    assert written == 6 + 2 + 2
    active = store.load_active(SID)
    assert [m["_row"] for m in active[:3]] == [row[0], ids[1], ids[0]]
    assert active[1]["content"] == "request 0\n\nrequest 1" and marker_kind(active[2]) == "batch"
    assert store.expand(SID, ids[0]) == strip([msgs[i] for i in (2, 3, 4, 6, 7, 8)])
    rows = {m["_row"]: m for m in store.export(SID, include_absorbed=True)}
    assert rows[row[1]]["_state"] == "superseded" and rows[row[1]]["_absorbed_by"] == ids[1]


def test_batch_with_several_runs_round_trips_and_keeps_user_rows(store_factory):
    """A chronological batch (one marker per run of work between user messages) is one transaction: every
    marker absorbs exactly its run, the user messages stay the same active rows, and a reopened store gives
    the identical transcript; a second batch keeps an earlier marker with nothing new around it as it is."""
    from microcompact.batch import BatchCompactor
    from microcompact.summarizers import ExtractiveSummarizer

    store = store_factory.open()

    def turns(first, last):
        return [
            m
            for n in range(first, last)
            for m in [{"role": "user", "content": f"request {n}"}, *exchange(n, 2, "word " * 300)]
        ]

    store.append(SID, [{"role": "system", "content": "You are a coding agent."}, *turns(0, 8)])
    ledger = ledger_of(store.load_active(SID))
    counter = TokenCounter(EstimateCounter())
    cfg = parse_config(
        {
            "compression": {"tokenizer": "estimate", "protect_first_n": 2, "min_tail_messages": 3},
            "model": {"context_length": 20_000},
        }
    )
    engine = BatchCompactor(
        cfg,
        ExtractiveSummarizer(counter.count_text),
        counter,
        commit=lambda event, msgs: store.archive_and_compact(SID, event, msgs),
    )
    users_before = {m["_row"]: m["_pos"] for m in ledger.messages if m["role"] == "user"}
    rows_before = {m["_row"]: m for m in ledger.messages}
    result = engine.compact(ledger, force=True)
    assert result.outcome == "compacted" and result.record["runs"] >= 3
    markers = [m for m in ledger.messages if marker_kind(m) == "batch"]
    assert len(markers) == result.record["runs"]
    assert {m["_row"]: m["_pos"] for m in ledger.messages if m["role"] == "user"} == users_before
    st = states(store, SID)
    assert all(st[row] == "active" for row in users_before)
    for k, marker in enumerate(markers):  # each marker stands for the messages between its neighbours
        at = ledger.messages.index(marker)
        low, high = ledger.messages[at - 1]["_pos"], ledger.messages[at + 1]["_pos"]
        run = [m for row, m in rows_before.items() if low < m["_pos"] < high]
        assert store.expand(SID, marker["_row"]) == strip(run), f"marker {k}"
    reopened = store_factory.open()
    assert reopened.load_active(SID) == strip(ledger.messages)
    assert role_sequence_errors(reopened.load_active(SID)) == []
    # a second batch after more work: the old markers with nothing new around them are the same rows
    store.append(SID, turns(8, 16))
    ledger = ledger_of(store.load_active(SID))
    old = [m["_row"] for m in ledger.messages if marker_kind(m) == "batch"]
    again = engine.compact(ledger, force=True)
    assert again.outcome == "compacted"
    now = [m["_row"] for m in ledger.messages if marker_kind(m) == "batch"]
    assert old[:-1] == now[: len(old) - 1]  # (the newest old marker may take in new work of its run)
    assert store_factory.open().load_active(SID) == strip(ledger.messages)


# --------------------------------------------------------------------------- recall: search and expand


def test_search_finds_absorbed_originals(store):
    msgs = transcript(3)
    msgs[3]["content"] = "traceback: ZeroDivisionError in parser.py line 12"
    msgs[9]["content"] = "ZeroDivisionError again, still active"
    store.append(SID, msgs)
    ledger = ledger_of(store.load_active(SID))
    e = absorb(ledger, 2, 5, "fixed a crash")
    commit_and_apply(store, SID, ledger, e)
    hits = store.search(SID, "ZeroDivisionError")
    assert [h["row"] for h in hits] == [msgs[3]["_row"]]
    (hit,) = hits
    assert hit["state"] == "absorbed" and hit["role"] == "tool" and hit["position"] == 3
    assert hit["absorbed_by"] == e.marker["_row"] and hit["is_marker"] is False
    assert "[ZeroDivisionError]" in hit["snippet"]
    both = store.search(SID, "zerodivisionerror", include_active=True)
    assert {h["row"] for h in both} == {msgs[3]["_row"], msgs[9]["_row"]}
    assert {h["state"] for h in both} == {"absorbed", "active"}
    assert store.search(SID, '"parser.py" line') and not store.search(SID, "parser nothere")
    assert store.search(SID, "cmd0_0")  # tool call arguments are searchable
    assert store.search(SID, "!!! ???") == [] and store.search(SID, "") == []
    for odd in (
        "NEAR(a b)",
        'foo"bar',
        "request OR done",
        "-step",
        "*",
        "col:val",
        "'; DROP TABLE x; --",
        '"unterminated',
        "a\x00b",
        "\\%_",
    ):
        assert isinstance(store.search(SID, odd, include_active=True), list)  # never a syntax error
    assert store.search("other-session", "ZeroDivisionError") == []
    assert len(store.search(SID, "step", include_active=True, limit=2)) == 2


def test_search_never_returns_superseded_markers(store):
    ledger = stored_session(store, turns=3)
    commit_and_apply(store, SID, ledger, absorb(ledger, 2, 5, "alpha summary"))
    commit_and_apply(store, SID, ledger, Rewrite(2, render_micro_marker("beta summary"), "beta"))
    assert store.search(SID, "alpha", include_active=True) == []
    (hit,) = store.search(SID, "beta", include_active=True)
    assert hit["is_marker"] and hit["state"] == "active"


def test_expand_follows_the_supersede_chain(store):
    ledger = stored_session(store, turns=4)
    originals = [dict(m) for m in ledger.messages]
    e1 = absorb(ledger, 2, 5, "one")
    commit_and_apply(store, SID, ledger, e1)
    e2 = absorb(ledger, 4, 7, "one two", removed=2)
    commit_and_apply(store, SID, ledger, e2)
    e3 = Rewrite(3, render_micro_marker("condensed"), "condensed")
    commit_and_apply(store, SID, ledger, e3)
    first = strip(originals[2:5])
    both = strip(originals[2:5] + originals[6:9])
    assert store.expand(SID, e1.marker["_row"]) == first
    assert store.expand(SID, e2.marker["_row"]) == both
    assert store.expand(SID, e3.marker["_row"]) == both  # the rewrite covers what it replaced
    with pytest.raises(ValueError, match="not a marker"):
        store.expand(SID, originals[1]["_row"])
    with pytest.raises(ValueError, match="not a marker"):
        store.expand("other-session", e3.marker["_row"])


# --------------------------------------------------------------------------- skip memory, markers


def test_skip_memory_survives_reopen(store_factory):
    s1 = store_factory.open()
    s1.remember_skip(SID, "12:abcdef")
    s1.remember_skip(SID, "12:abcdef")
    s1.remember_skip(SID, "40:123456")
    s1.remember_skip("other", "1:x")
    s1.close()
    s2 = store_factory.open()
    assert s2.skipped(SID) == {"12:abcdef", "40:123456"}
    assert s2.skipped("nobody") == set()


def test_marker_text_in_a_tool_output_is_not_a_marker_after_reload(store_factory):
    s1 = store_factory.open()
    quoted = render_micro_marker("fake")["content"]
    assert quoted.startswith(MARKER_PREFIX)
    msgs = [
        {"role": "user", "content": "cat the log"},
        {"role": "assistant", "content": "reading", "tool_calls": [call("c1", "cat log")]},
        {"role": "tool", "tool_call_id": "c1", "content": quoted},
        {"role": "user", "content": quoted},
        {"role": "assistant", "content": "Quoting: " + quoted},
    ]
    s1.append(SID, msgs)
    s1.close()
    s2 = store_factory.open()
    loaded = s2.load_active(SID)
    assert loaded == msgs
    assert [marker_kind(m) for m in loaded] == [None] * 5
    assert all("_mc" not in m for m in loaded)
    assert s2.list_sessions()[0]["markers"] == 0
    assert s2.search(SID, "compacted", include_active=True)  # still searchable as text


# --------------------------------------------------------------------------- concurrency


def test_concurrent_sessions_in_one_database(store_factory):
    shared = store_factory.open()
    errors: list[BaseException] = []

    def worker(n, own):
        try:
            st = store_factory.open() if own else shared
            sid = f"worker-{n}"
            msgs = transcript(6)
            for i in range(0, len(msgs), 5):
                st.append(sid, msgs[i : i + 5])
            ledger = ledger_of(st.load_active(sid))
            e = absorb(ledger, 2, 5, f"summary {n}")
            st.archive_and_compact(sid, e, ledger.messages)
            apply_event(ledger, e)
            assert st.load_active(sid) == strip(ledger.messages)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n, n % 2 == 0)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = {s["id"]: s for s in shared.list_sessions()}
    assert len(info) == 6
    assert all(s["counts"] == {"active": 23, "absorbed": 3, "superseded": 0} for s in info.values())


def test_second_writer_on_one_session_gets_a_conflict(store_factory):
    a, b = store_factory.open(), store_factory.open()
    stored_session(a, turns=3)
    view_a, view_b = ledger_of(a.load_active(SID)), ledger_of(b.load_active(SID))
    a.archive_and_compact(SID, absorb(view_a, 2, 5, "a wins"), view_a.messages)
    before = a.export(SID, include_absorbed=True)
    late = absorb(view_b, 2, 5, "b is stale")
    with pytest.raises(StoreConflict, match="already absorbed"):
        b.archive_and_compact(SID, late, view_b.messages)
    assert "_row" not in late.marker
    assert b.export(SID, include_absorbed=True) == before
    # rows of another session are refused too
    stored_session(a, "other", turns=2)
    other = ledger_of(a.load_active("other"))
    with pytest.raises(StoreConflict, match="not a message of session"):
        a.archive_and_compact(SID, absorb(other, 2, 5, "wrong session"), other.messages)
    assert b.export(SID, include_absorbed=True) == before


def test_racing_writers_one_wins_the_other_conflicts(store_factory):
    stores = [store_factory.open() for _ in range(4)]
    stored_session(stores[0], turns=3)
    views = [ledger_of(s.load_active(SID)) for s in stores]
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def writer(st, view):
        barrier.wait()
        try:
            st.archive_and_compact(SID, absorb(view, 2, 5, "race"), view.messages)
            outcomes.append("ok")
        except StoreConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=writer, args=(s, v)) for s, v in zip(stores, views, strict=False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 3 + ["ok"]
    info = stores[0].list_sessions()[0]
    assert info["counts"] == {"active": 11, "absorbed": 3, "superseded": 0} and info["markers"] == 1


# --------------------------------------------------------------------------- faults


def _set_version(factory, version):
    if factory.kind == "sqlite":
        conn = sqlite3.connect(factory.target)
        with conn:
            conn.execute("UPDATE schema_version SET version = ?", (version,))
        conn.close()
    else:
        import psycopg

        with psycopg.connect(factory.target, autocommit=True) as conn:
            conn.execute("UPDATE schema_version SET version = %s", (version,))


def test_newer_schema_version_is_refused(store_factory):
    store_factory.open().close()
    _set_version(store_factory, SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1} is newer.*version {SCHEMA_VERSION}"):
        store_factory.open()


def test_corrupt_file_names_the_path(tmp_path):
    not_db = tmp_path / "notes.db"
    not_db.write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(StoreCorrupt) as info:
        SQLiteStore(not_db)
    assert str(not_db) in str(info.value) and "not a SQLite database" in str(info.value)
    # a real store whose pages were overwritten
    damaged = tmp_path / "damaged.db"
    with SQLiteStore(damaged) as st:
        st.append(SID, transcript(30))
    data = bytearray(damaged.read_bytes())
    data[4096 : len(data)] = b"\xa5" * (len(data) - 4096)
    damaged.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info, SQLiteStore(damaged) as st:
        st.load_active(SID)
    assert str(damaged) in str(info.value) and "corrupt" in str(info.value)


def test_foreign_sqlite_database_is_not_taken_over(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (x)")
    conn.close()
    with pytest.raises(StoreError, match="not a microcompact store"):
        SQLiteStore(path)


def test_read_only_store_refuses_writes(store_factory):
    rw = store_factory.open()
    ledger = stored_session(rw)
    rw.close()
    ro = store_factory.open(read_only=True)
    assert ro.load_active(SID) == strip(ledger.messages)  # reads work
    with pytest.raises(StoreReadOnly, match="read-only"):
        ro.append(SID, [{"role": "user", "content": "x"}])
    with pytest.raises(StoreReadOnly):
        ro.archive_and_compact(SID, absorb(ledger, 2, 5, "s"), ledger.messages)
    # the database itself refuses as well (bypass the store's own early check)
    ro.read_only = False
    with pytest.raises(StoreReadOnly, match="read-only"):
        ro.append(SID, [{"role": "user", "content": "x"}])
    assert len(ro.load_active(SID)) == len(ledger)


def test_read_only_file_permissions(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only files; covered with read_only=True (mode=ro)")
    path = tmp_path / "ro.db"
    with SQLiteStore(path) as st:
        st.append(SID, transcript(1))
    os.chmod(path, 0o444)
    try:
        with SQLiteStore(path) as st, pytest.raises(StoreReadOnly):
            st.append(SID, [{"role": "user", "content": "x"}])
    finally:
        os.chmod(path, 0o644)


def test_read_only_store_cannot_create_a_schema(tmp_path):
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    with pytest.raises(StoreReadOnly, match="needs creating"):
        SQLiteStore(path, read_only=True)


def test_locked_database_raises_store_locked(store_factory):
    st = store_factory.open(busy_timeout=0.3)
    st.append(SID, transcript(1))
    if store_factory.kind == "sqlite":
        holder = sqlite3.connect(store_factory.target, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        release = lambda: (holder.execute("ROLLBACK"), holder.close())  # noqa: E731
    else:
        import psycopg

        holder = psycopg.connect(store_factory.target)
        holder.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        release = lambda: (holder.rollback(), holder.close())  # noqa: E731
    try:
        t0 = time.perf_counter()
        with pytest.raises(StoreLocked, match="locked"):
            st.append(SID, [{"role": "user", "content": "blocked"}])
        assert time.perf_counter() - t0 < 0.3 + 2.0
    finally:
        release()
    st.append(SID, [{"role": "user", "content": "free again"}])
    assert st.load_active(SID)[-1]["content"] == "free again"


def test_full_database_raises_store_full(tmp_path):
    with SQLiteStore(tmp_path / "full.db") as st:
        st.append(SID, transcript(1))
        pages = st._conn.execute("PRAGMA page_count").fetchone()[0]
        st._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(StoreFull, match="full"):
            st.append(SID, [{"role": "tool", "tool_call_id": "c", "content": "x" * 200_000}])
        assert len(st.load_active(SID)) == len(transcript(1))


def test_postgres_restart_mid_session_reconnects(pg_server, caplog):
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    try:
        with PostgresStore(db.dsn) as st:
            st.append(SID, transcript(2))
            pg_server.restart()
            st.append(SID, [{"role": "user", "content": "after the restart"}])
            assert "reconnecting once" in caplog.text
            assert st.load_active(SID)[-1]["content"] == "after the restart"
            pg_server.restart()
            ledger = ledger_of(st.load_active(SID))
            commit_and_apply(st, SID, ledger, absorb(ledger, 2, 5, "after restart"))
    finally:
        db.drop()


# --------------------------------------------------------------------------- SQLite specifics, entry points


def test_like_fallback_without_fts(tmp_path):
    path = tmp_path / "nofts.db"
    with SQLiteStore(path, fts=False) as st:
        assert st.search_backend == "like"
        ledger = stored_session(st)
        commit_and_apply(st, SID, ledger, absorb(ledger, 2, 5, "s"))
        (hit,) = st.search(SID, '"output 0.0"')
        assert hit["state"] == "absorbed" and "[output 0.0]" in hit["snippet"]
        assert [h["position"] for h in st.search(SID, "0.0 output")] == [3]
        assert st.search(SID, "100%") == []
    with SQLiteStore(path) as st:  # FTS5 available now: the index is built from the stored rows
        assert st.search_backend == "fts5"
        assert [h["position"] for h in st.search(SID, '"output 0.0"')] == [3]


def test_wal_mode_and_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "sessions.db"
    with open_store() as st:
        assert isinstance(st, SQLiteStore) and st.path == str(default_store_path())
        assert st._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert st._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with open_store(f"sqlite:///{tmp_path}/x.db") as st:
        assert st.path == f"{tmp_path}/x.db"


# --------------------------------------------------------------------------- with the real engine


def test_session_commit_hook_keeps_store_and_memory_identical(store_factory):
    """The micro-compaction engine commits through the store: after every turn, the stored active
    transcript equals the in-memory one, and a resumed session finds the marker."""
    st = store_factory.open()
    writes: list[int] = []

    def commit(event, msgs):
        st.append(SID, [m for m in msgs if "_row" not in m])  # flush what is not yet stored
        writes.append(st.archive_and_compact(SID, event, msgs))

    cfg = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 3, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
        }
    )
    session = Session(cfg, counter=TokenCounter(EstimateCounter()), session_id=SID, commit=commit)
    for n in range(12):
        session.append({"role": "user", "content": f"request {n}"})
        for m in exchange(n, iterations=3, text="word " * 150):
            if m["role"] == "assistant":
                session.before_request()
            session.append(m)
        session.finalize_turn()
        st.append(SID, [m for m in session.ledger.messages if "_row" not in m])
        assert st.load_active(SID) == strip(session.transcript)
    assert len(writes) >= 3 and max(writes) <= 12
    marker = next(m for m in session.transcript if marker_kind(m) == "micro")
    covered = st.expand(SID, marker["_row"])
    assert covered and all(m["role"] in ("assistant", "tool") for m in covered)
    assert st.search(SID, "cmd0_1")
    resumed = Session(cfg, counter=TokenCounter(EstimateCounter()), messages=st.load_active(SID))
    resumed.micro.sync(resumed.ledger)
    assert resumed.micro.state.marker_index == next(
        i for i, m in enumerate(resumed.transcript) if marker_kind(m) == "micro"
    )


# --------------------------------------------------------------------------- issue 8, item 10 (store part): file modes


def test_sqlite_database_and_its_wal_files_are_private(tmp_path):
    """Sessions hold whatever the agent saw: the database, its WAL and shared-memory files, and a directory
    the store creates are readable by the owner only, whatever the umask."""
    old = os.umask(0)
    try:
        path = tmp_path / "home" / "sessions.db"
        with SQLiteStore(path) as st:
            st.append(SID, transcript(2))
            files = [path, Path(str(path) + "-wal"), Path(str(path) + "-shm")]
            assert all(f.exists() for f in files)
            modes = {f.name: oct(os.stat(f).st_mode & 0o777) for f in files}
            assert modes == {f.name: "0o600" for f in files}
        assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
        # An existing database keeps the mode its owner gave it.
        os.chmod(path, 0o640)
        with SQLiteStore(path) as st:
            assert st.load_active(SID)
        assert oct(os.stat(path).st_mode & 0o777) == "0o640"
    finally:
        os.umask(old)
