"""A Session backed by a store, end to end: flush-once appends, commit-before-apply passes, resume with
``Session.open``, recall (expand/search), skip memory, a SIGKILLed ``replay --db`` resumed to the same output,
and store faults (read-only, full, locked, PostgreSQL restarted or down) that the session must ride out.

The store contract itself (single events, schema, errors) is in ``test_store.py``; this file drives the real
engine through ``Session`` and checks the store and memory against each other after every hook call.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors, tool_pairing_errors
from microcompact.events import apply_event
from microcompact.messages import marker_body, marker_kind
from microcompact.replay import load_transcript, replay, resume_point
from microcompact.session import Session
from microcompact.store import (
    PostgresStore,
    SQLiteStore,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    open_store,
)
from microcompact.tokens import EstimateCounter, TokenCounter
from support.paths import NORMALIZED

SID = "sess-1"

# Outcomes after which the in-memory transcript has changed (everything else must leave it as it was).
CHANGED = {"absorbed", "defrag", "defrag_failed", "pruned", "compacted", "user_floor_exceeded", "fallback"}


# --------------------------------------------------------------------------- a deterministic summarizer


def call_ids(messages):
    return [tc["id"] for m in messages for tc in (m.get("tool_calls") or [])]


class Recorder:
    """Deterministic summarizer: remembers every call (kind, tool-call ids it was shown); can fail on ids."""

    name = "recorder"

    def __init__(self, fail_on: set[str] | None = None):
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail_on = fail_on or set()

    def merge(self, summary, exchange):
        ids = call_ids(exchange)
        self.calls.append(("merge", tuple(ids)))
        if self.fail_on & set(ids):
            raise RuntimeError("model down")
        return (
            summary + "\n- " + (",".join(ids) or "answer") + " (ran it, read the output, nothing surprising, moved "
            "on to the next step)"
        ).strip()

    def batch(self, summary, messages, focus=None):
        self.calls.append(("batch", tuple(call_ids(messages))))
        return (summary + f"\n- batch of {len(messages)} messages").strip()

    def condense(self, summary, target_tokens):
        self.calls.append(("condense", ()))
        return summary[: len(summary) // 4]

    def mentions(self, cid: str, kind: str = "merge") -> int:
        return sum(1 for k, ids in self.calls if k == kind and cid in ids)


# --------------------------------------------------------------------------- transcripts and config


def tool_call(cid, command):
    return {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"command": command})}}


def make_turns(n, seed=7):
    """Seeded turns: a user request (20-200 words), 1-4 tool iterations (50-600-word outputs, each with a
    unique searchable word ``needle{t}q{k}``), a closing answer."""
    rng = random.Random(seed)
    turns = []
    for t in range(n):
        msgs = [{"role": "user", "content": f"request {t}: " + "please " * rng.randint(20, 200)}]
        for k in range(rng.randint(1, 4)):
            cid = f"c{t}_{k}"
            msgs.append(
                {"role": "assistant", "content": f"step {t}.{k}", "tool_calls": [tool_call(cid, f"cmd{t}x{k}")]}
            )
            msgs.append(
                {"role": "tool", "tool_call_id": cid, "content": f"needle{t}q{k} " + "word " * rng.randint(50, 600)}
            )
        msgs.append({"role": "assistant", "content": f"done {t}"})
        turns.append(msgs)
    return turns


def flat_transcript(n, seed=7):
    return [{"role": "system", "content": "You are a coding agent."}] + [m for t in make_turns(n, seed) for m in t]


def small_config(**compression):
    """A 12K context (6K threshold, 1.2K tail): micro passes every turn, batch compaction now and then."""
    base = {
        "micro_compact": True,
        "protect_first_n": 3,
        "micro_compact_max_exchange_tokens": 1000,
        "micro_compact_defrag_threshold_tokens": 200,
    }
    base.update(compression)
    return parse_config({"compression": base, "model": {"context_length": 12_000}})


def micro_config(**compression):
    """test_micro.py's config (20K context): turn-end passes, no batch compaction in 10 turns."""
    base = {"micro_compact": True, "protect_first_n": 3, "micro_compact_max_exchange_tokens": 4000}
    base.update(compression)
    return parse_config({"compression": base, "model": {"context_length": 20_000}})


def micro_turn(n, iterations=2, size=200):
    msgs = [{"role": "user", "content": f"request {n}"}]
    for k in range(iterations):
        cid = f"c{n}_{k}"
        msgs.append({"role": "assistant", "content": f"step {k}", "tool_calls": [tool_call(cid, "ls")]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": "word " * size})
    msgs.append({"role": "assistant", "content": f"done {n}"})
    return msgs


def counter():
    return TokenCounter(EstimateCounter())


def new_session(store, summarizer, cfg=None, sid=SID):
    return Session(cfg or small_config(), summarizer, session_id=sid, counter=counter(), store=store)


def open_session(store, summarizer, cfg=None, sid=SID):
    return Session.open(store, sid, cfg or small_config(), summarizer, counter=counter())


# --------------------------------------------------------------------------- checks


def proj(m):
    """What must agree between memory and store: the message itself and whether it is a marker."""
    return (m.get("role"), m.get("content"), m.get("tool_calls"), m.get("tool_call_id"), marker_kind(m))


def proj_pos(m):
    return (*proj(m), m.get("_pos"), m.get("_row"))


def check_store_matches(session, store, sid=SID):
    """The stored active transcript is the in-memory one minus a suffix of not-yet-flushed appends."""
    mem = session.transcript
    flushed = [m for m in mem if "_row" in m]
    first_pending = next((i for i, m in enumerate(mem) if "_row" not in m), len(mem))
    assert all("_row" not in m for m in mem[first_pending:]), "a stored message after a pending one"
    assert len(flushed) == first_pending
    active = store.load_active(sid)
    assert [proj_pos(m) for m in active] == [proj_pos(m) for m in flushed]
    return active


def check_consistent(store, sid):
    """Database invariants of one session; returns the active transcript."""
    rows = store.export(sid, include_absorbed=True)
    by_row = {m["_row"]: m for m in rows}
    assert len(by_row) == len(rows)
    active = [m for m in rows if m["_state"] == "active"]
    positions = [m["_pos"] for m in active]
    assert len(positions) == len(set(positions)), "two active rows at one position"
    assert sum(1 for m in active if marker_kind(m) == "micro") <= 1, "more than one active micro marker"
    for m in rows:
        if m["_state"] == "active":
            assert "_absorbed_by" not in m
        else:
            assert m.get("_absorbed_by") in by_row, f"row {m['_row']} ({m['_state']}) points at a missing row"
            assert m["_absorbed_by"] != m["_row"]
    loaded = store.load_active(sid)
    assert [m["_row"] for m in loaded] == [m["_row"] for m in sorted(active, key=lambda m: m["_pos"])]
    assert tool_pairing_errors(loaded) == []
    assert role_sequence_errors(loaded) == []
    return loaded


class Spy:
    """A store proxy that counts calls and can inject faults into write methods."""

    WRITES = ("append", "archive_and_compact", "remember_skip", "create_session")

    def __init__(self, inner, session=None):
        self.inner = inner
        self.session = session
        self.fault: type[StoreError] | None = None
        self.fault_methods: tuple[str, ...] = self.WRITES
        self.fault_rate = 1.0
        self.rng = random.Random(1)
        self.calls: Counter[str] = Counter()
        self.appended: list[int] = []  # id() of every message dict handed to append (kept alive below)
        self._alive: list[dict] = []
        self.appended_rows: list[int] = []  # the rows append gave them
        self.failures: Counter[str] = Counter()
        self.before_apply_checks = 0

    @property
    def search_backend(self):
        return self.inner.search_backend

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _gate(self, name):
        self.calls[name] += 1
        if self.fault is not None and name in self.fault_methods and self.rng.random() < self.fault_rate:
            self.failures[name] += 1
            raise self.fault(f"injected {self.fault.__name__} in {name}")

    def create_session(self, *a, **k):
        self._gate("create_session")
        return self.inner.create_session(*a, **k)

    def remember_skip(self, *a, **k):
        self._gate("remember_skip")
        return self.inner.remember_skip(*a, **k)

    def append(self, session_id, messages):
        self._gate("append")
        msgs = list(messages)
        self.inner.append(session_id, msgs)
        self._alive += msgs
        self.appended += [id(m) for m in msgs]
        self.appended_rows += [m["_row"] for m in msgs]

    def archive_and_compact(self, session_id, event, messages):
        self._gate("archive_and_compact")
        s = self.session
        new = inserted_by(event)
        if s is not None:
            # Committed before applied: memory does not hold the event's new messages yet...
            assert not any(m is n for m in s.ledger.messages for n in new)
            before = [proj_pos(m) for m in s.ledger.messages]
        written = self.inner.archive_and_compact(session_id, event, messages)
        if s is not None:
            # ...and once the store has committed them, memory is still untouched (the engine applies next).
            assert [proj_pos(m) for m in s.ledger.messages] == before
            stored = {m["_row"] for m in self.inner.load_active(session_id)}
            assert all(n["_row"] in stored for n in new)
            self.before_apply_checks += 1
        return written


def inserted_by(event):
    """The new messages a compaction event inserts (micro Absorb/Rewrite, batch Prune/BatchCompact)."""
    if hasattr(event, "marker"):
        return [event.marker]
    if hasattr(event, "replacements"):
        return [new for _, new in event.replacements]
    return [marker for marker, _ in event.markers]  # (a batch keeps its user messages: not new)


def drive(session, turns, after_hook=None):
    """Play ``turns`` like an agent loop; ``after_hook(kind, results, before)`` after every hook call, where
    ``before`` is the transcript just before the call. Returns the outcomes seen."""
    outcomes: Counter[str] = Counter()
    for t in turns:
        for m in t:
            if m["role"] == "assistant":
                before = [proj_pos(x) for x in session.transcript]
                results = session.before_request()
                outcomes.update(r.outcome for r in results)
                if after_hook:
                    after_hook("request", results, before)
            session.append(m)
        before = [proj_pos(x) for x in session.transcript]
        results = session.finalize_turn()
        outcomes.update(r.outcome for r in results)
        if after_hook:
            after_hook("turn", results, before)
    return outcomes


# --------------------------------------------------------------------------- flush once, commit before apply


def test_appends_are_flushed_once(store):
    spy = Spy(store)
    session = new_session(spy, Recorder())
    msgs = flat_transcript(3)
    session.extend(msgs)
    assert all("_row" not in m for m in session.transcript) and spy.calls["append"] == 0  # nothing written yet
    assert session.flush() is True
    assert spy.calls["append"] == 1
    rows = [m["_row"] for m in session.transcript]
    assert all(isinstance(r, int) for r in rows) and len(set(rows)) == len(msgs)
    assert [m["_pos"] for m in session.transcript] == list(range(len(msgs)))
    stored = store.export(SID, include_absorbed=True)
    assert session.flush() is True  # nothing pending: no write at all
    assert spy.calls["append"] == 1
    assert store.export(SID, include_absorbed=True) == stored
    assert [proj(m) for m in store.load_active(SID)] == [proj(m) for m in msgs]

    # Through the hooks: every appended message is written exactly once, whatever the passes do.
    more = make_turns(30, seed=3)
    outcomes = drive(session, more)
    assert outcomes["absorbed"] >= 5, outcomes
    session.close()
    appended = len(msgs) + sum(len(t) for t in more)
    assert len(spy.appended) == len(set(spy.appended)) == appended
    assert len(set(spy.appended_rows)) == appended
    stored = {m["_row"]: m for m in store.export(SID, include_absorbed=True)}
    assert set(spy.appended_rows) <= set(stored)
    assert all(isinstance(m.get("_row"), int) for m in session.transcript)
    calls = spy.calls["append"]
    session.close()  # nothing pending: no write
    assert spy.calls["append"] == calls and len(spy.appended) == appended


def test_passes_are_committed_before_they_are_applied(store):
    spy = Spy(store)
    session = new_session(spy, Recorder())
    spy.session = session
    session.extend(flat_transcript(0))
    checks = []

    def after(kind, results, before):
        checks.append(kind)
        check_store_matches(session, store)
        assert all("_row" in m for m in session.transcript)  # every hook flushes first

    outcomes = drive(session, make_turns(40), after)
    assert outcomes["absorbed"] >= 10, outcomes
    assert outcomes["compacted"] + outcomes["user_floor_exceeded"] >= 1, outcomes  # batch events too
    assert outcomes["defrag"] + outcomes["defrag_failed"] >= 1, outcomes  # and rewrites of the marker
    assert spy.before_apply_checks == sum(outcomes[o] for o in CHANGED)
    assert "turn" in checks and "request" in checks
    loaded = check_consistent(store, SID)
    assert [proj(m) for m in loaded] == [proj(m) for m in session.transcript]


class Replica:
    """A caller's own copy of the transcript, kept only from what the commit hook is told."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def splice(self, start, end, replacement):
        self.messages[start:end] = [dict(m) for m in replacement]


def test_a_commit_hook_can_mirror_every_pass_from_the_events_alone():
    """A custom store (``Session(commit=...)``) is given each event with the transcript it applies to; applying
    the event to a copy of that transcript gives exactly what the session holds after the pass: absorbs,
    marker rewrites and batch compactions alike."""
    mirrored = Replica()
    kinds: Counter[str] = Counter()

    def commit(event, messages):
        mirrored.messages = [dict(m) for m in messages]
        apply_event(mirrored, event)
        kinds[type(event).__name__] += 1

    session = Session(small_config(), Recorder(), session_id=SID, counter=counter(), commit=commit)
    session.extend(flat_transcript(0))

    def after(kind, results, before):
        if any(r.outcome in CHANGED for r in results):
            assert [proj(m) for m in mirrored.messages] == [proj(m) for m in session.transcript], kind

    outcomes = drive(session, make_turns(40), after)
    assert outcomes["absorbed"] >= 10 and outcomes["defrag"] + outcomes["defrag_failed"] >= 1, outcomes
    assert kinds["Absorb"] and kinds["Rewrite"] and kinds["BatchCompact"], kinds


# --------------------------------------------------------------------------- resume


class Crash(Exception):
    pass


def crash_at(index):
    def on_message(i):
        if i == index:
            raise Crash(i)

    return on_message


def abandon(session):
    """What a crash leaves behind: pending messages never written, and the writer lease gone with the dead
    process (here the session object lives on, so its lease is released by hand)."""
    session.store.release_lease(session.session_id)


def test_resume_gives_the_same_transcript_as_an_uninterrupted_session(store):
    msgs = flat_transcript(45, seed=11)
    # Crash points: just after a user message, mid-turn after a tool call and after a tool result, and near
    # the end; what was appended since the last flush is lost, as in a real crash.
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    tools = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
    calls = [i for i, m in enumerate(msgs) if m.get("tool_calls")]
    cuts = sorted({users[5], calls[len(calls) // 3], tools[len(tools) // 2], users[-4] + 1, len(msgs) - 2})

    whole_summ = Recorder()
    whole = open_session(store, whole_summ, sid="whole")
    whole_stats = replay(msgs, whole)
    whole.close()

    crash_summ = Recorder()
    starts = []
    for cut in cuts:
        s = open_session(store, crash_summ, sid="crashy")
        start = resume_point(s)
        starts.append(start)
        assert start <= cut
        with pytest.raises(Crash):
            replay(msgs, s, on_message=crash_at(cut), start=start)
        abandon(s)
        check_consistent(store, "crashy")  # the abandoned session left a consistent store
    s = open_session(store, crash_summ, sid="crashy")
    starts.append(resume_point(s))
    replay(msgs, s, start=starts[-1])
    s.close()

    assert starts == sorted(starts) and starts[0] == 0 and starts[-1] > cuts[-2]
    assert whole_stats.outcomes["absorbed"] >= 10 and whole.batch.compactions >= 1
    # Same final transcript, message for message (positions included), in memory and in the store.
    assert [(*proj(m), m["_pos"]) for m in s.transcript] == [(*proj(m), m["_pos"]) for m in whole.transcript]
    assert [proj(m) for m in check_consistent(store, "crashy")] == [proj(m) for m in check_consistent(store, "whole")]
    # No work redone and none lost: the same summarizer calls in the same order.
    assert crash_summ.calls == whole_summ.calls


def test_expand_returns_what_the_final_micro_marker_absorbed(store):
    # No defrag: the rolling summary keeps one line per pass, which names the calls it absorbed.
    session = open_session(store, Recorder(), small_config(micro_compact_defrag_threshold_tokens=100_000))
    replay(flat_transcript(44, seed=11), session)
    session.close()
    marker = next(m for m in session.transcript if marker_kind(m) == "micro")
    originals = store.expand(SID, marker["_row"])
    assert len(originals) >= 4 and all(marker_kind(m) is None for m in originals)
    assert all(m["role"] in ("assistant", "tool") for m in originals)
    # The rolling summary names every tool call it absorbed ("- c3_0,c3_1 ..." per pass, since the last
    # batch compaction): exactly the calls among the originals expand() returns.
    body_ids = {
        cid
        for line in marker_body(marker).splitlines()
        if line.startswith("- ")
        for cid in line[2:].split(" ")[0].split(",")
        if cid.startswith("c")
    }
    assert body_ids == set(call_ids(originals))
    # The expanded originals are the recorded messages, verbatim.
    src = flat_transcript(44, seed=11)
    for m in originals:
        o = src[m["_src"]]
        assert (m["role"], m.get("content"), m.get("tool_calls"), m.get("tool_call_id")) == (
            o["role"],
            o.get("content"),
            o.get("tool_calls"),
            o.get("tool_call_id"),
        )
    state = {m["_row"]: m["_state"] for m in store.export(SID, include_absorbed=True)}
    assert all(state[m["_row"]] == "absorbed" for m in originals)


def test_search_finds_absorbed_text(store):
    session = open_session(store, Recorder())
    msgs = flat_transcript(45, seed=11)
    replay(msgs, session)
    session.close()
    active_text = "\n".join(str(m.get("content")) for m in session.transcript)
    absorbed = [
        m
        for m in store.export(SID, include_absorbed=True)
        if m["_state"] == "absorbed" and m["role"] == "tool" and "needle" in m["content"]
    ]
    assert len(absorbed) >= 10
    for m in absorbed[:: max(1, len(absorbed) // 8)]:
        word = m["content"].split()[0]
        assert word not in active_text  # gone from the transcript...
        hits = store.search(SID, word)
        assert [h["row"] for h in hits] == [m["_row"]]  # ...but found again, exactly
        assert hits[0]["state"] == "absorbed" and word in hits[0]["snippet"]
        assert hits[0]["absorbed_by"] == m["_absorbed_by"]


# --------------------------------------------------------------------------- skip memory


def test_skipped_exchange_is_not_retried_after_open(store):
    turns = [micro_turn(i) for i in range(18)]
    summ = Recorder(fail_on={"c1_0"})
    s1 = new_session(store, summ, micro_config())
    outcomes: Counter[str] = Counter()
    done = 0
    while not outcomes["exchange_skipped"]:  # play turns until the third failure skips the exchange
        outcomes += drive(s1, turns[done : done + 1])
        done += 1
        assert done < 10, outcomes
    assert outcomes["exchange_skipped"] == 1 and outcomes["summarize_failed"] == 2, outcomes
    assert summ.mentions("c1_0") == 3
    assert len(store.skipped(SID)) == 1
    assert any("c1_0" in call_ids([m]) for m in store.load_active(SID))  # still verbatim, at the cursor

    # Control: the same stored transcript without skip memory would try the exchange again.
    control_summ = Recorder(fail_on={"c1_0"})
    control = Session(micro_config(), control_summ, counter=counter(), messages=store.load_active(SID))
    drive(control, turns[done : done + 1])
    assert control_summ.mentions("c1_0") >= 1

    # A resumed session remembers the skip: never retried, and the other exchanges still get absorbed.
    s1.close()
    summ2 = Recorder(fail_on={"c1_0"})
    s2 = open_session(store, summ2, micro_config())
    assert s2.micro.state.skipped == store.skipped(SID)
    outcomes2 = drive(s2, turns[done:])
    assert summ2.mentions("c1_0") == 0
    assert outcomes2["absorbed"] >= 5 and not outcomes2["summarize_failed"], outcomes2
    assert any("c1_0" in call_ids([m]) for m in s2.transcript)  # left verbatim (for batch compaction)
    check_consistent(store, SID)


# --------------------------------------------------------------------------- SIGKILL during replay --db

TRANSCRIPTS = NORMALIZED
CRASH_FILE = TRANSCRIPTS / "cc_fa812bfe.jsonl"
CRASH_SEED = 20240611


def _cli() -> str:
    exe = Path(sys.executable).parent / "microcompact"
    return str(exe) if exe.exists() else (shutil.which("microcompact") or "")


def _remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def _stored_rows(db: Path) -> int:
    """Rows in the messages table, read without disturbing a running writer (0 when not there yet)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            return conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _check_crashed_db(db: Path, n_messages: int) -> int:
    """Consistency after a SIGKILL; returns how many recorded messages the session holds (resume point)."""
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        if "messages_fts" in tables:
            raw.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        dup = (
            raw.execute(
                "SELECT session_id, position, COUNT(*) FROM messages WHERE state = 'active' "
                "GROUP BY session_id, position HAVING COUNT(*) > "
                "1"
            ).fetchall()
            if "messages" in tables
            else []
        )
        assert dup == []
        dangling = (
            raw.execute(
                "SELECT m.id FROM messages m LEFT JOIN messages r ON r.id = m.absorbed_by "
                "WHERE m.state != 'active' AND r.id IS NULL"
            ).fetchall()
            if "messages" in tables
            else []
        )
        assert dangling == []
    finally:
        raw.close()
    with open_store(str(db)) as st:
        if not any(r["id"] == "s" for r in st.list_sessions()):
            return 0
        active = check_consistent(st, "s")
        src = [m["_src"] for m in active if isinstance(m.get("_src"), int)]
        assert src == sorted(src) and len(src) == len(set(src))
        point = max(src, default=-1) + 1
        assert point <= n_messages
        return point


@pytest.mark.slow  # a kill loop of real processes; the in-process crash/resume tests above run in the fast suite
def test_sigkill_during_replay_resumes_to_the_same_output(tmp_path):
    if not CRASH_FILE.exists():
        pytest.skip(f"{CRASH_FILE} not available")
    cli = _cli()
    if not cli:
        pytest.skip("the microcompact command is not installed")
    n_messages = len(load_transcript(CRASH_FILE))
    env = {**os.environ, "MICROCOMPACT_HOME": str(tmp_path / "home")}

    def start(db: Path, out: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [
                cli,
                "replay",
                str(CRASH_FILE),
                "--context-limit",
                "64000",
                "--db",
                str(db),
                "--session",
                "s",
                "--out",
                str(out),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    # An uninterrupted run into a fresh database: the reference output, and when rows get written.
    ref_db, ref_out = tmp_path / "ref.db", tmp_path / "ref.jsonl"
    t0 = time.monotonic()
    proc = start(ref_db, ref_out)
    first_write = last_write = None
    rows = 0
    while proc.poll() is None:
        now_rows = _stored_rows(ref_db)
        if now_rows != rows:
            rows, last_write = now_rows, time.monotonic() - t0
            first_write = first_write or last_write
        time.sleep(0.01)
    full_run = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr.read()
    reference = ref_out.read_bytes()
    assert reference and first_write is not None
    _check_crashed_db(ref_db, n_messages)

    # Kill at seeded random moments. Every third run: a delay anywhere in [0.3 s, full run]. The others: a
    # seeded offset into the run's own writing phase (from the moment this run first adds a row, so that a
    # slow start-up on a loaded machine does not push every kill before the first write). Each kill is
    # followed by a consistency check; the next run resumes the same database (so resumed runs get killed
    # too). A run that finishes before its kill ends a chain: its output must equal the reference, and the
    # next chain starts from a fresh database.
    rng = random.Random(CRASH_SEED)
    writing = max(0.05, last_write - first_write)
    deadline = time.monotonic() + 45
    kills, mid_run, chains, attempts = [], 0, 0, 0
    db, out = tmp_path / "c0.db", tmp_path / "c0.jsonl"
    while (len(kills) < 6 or mid_run < 3) and attempts < 20 and time.monotonic() < deadline:
        attempts += 1
        anywhere = attempts % 3 == 1
        delay = rng.uniform(0.3, full_run) if anywhere else rng.uniform(0.0, writing)
        rows_before = _stored_rows(db)
        proc = start(db, out)
        t0 = time.monotonic()
        if anywhere:
            kill_at = t0 + delay
        else:
            kill_at = None
            while proc.poll() is None and time.monotonic() - t0 < 30:
                if _stored_rows(db) > rows_before:
                    kill_at = time.monotonic() + delay
                    break
                time.sleep(0.005)
        try:
            proc.wait(timeout=max(0.0, (kill_at or time.monotonic()) - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if proc.returncode == -signal.SIGKILL:
            point = _check_crashed_db(db, n_messages)
            kills.append((("any " if anywhere else "write+") + f"{delay:.2f}s", point))
            mid_run += 0 < point < n_messages
            continue
        assert proc.returncode == 0, proc.stderr.read()
        assert out.read_bytes() == reference, f"chain {chains} (kills so far {kills}) ended differently"
        _check_crashed_db(db, n_messages)
        chains += 1
        db, out = tmp_path / f"c{chains}.db", tmp_path / f"c{chains}.jsonl"
    # The last chain runs to completion.
    proc = start(db, out)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert out.read_bytes() == reference, f"the last chain ended differently (kills {kills})"
    assert _check_crashed_db(db, n_messages) == n_messages
    print(
        f"uninterrupted run {full_run:.2f} s (rows written {first_write:.2f}-{last_write:.2f} s); "
        f"kills (when, resume point): {kills}; chains completed: {chains + 1}"
    )
    assert len(kills) >= 4, kills
    assert mid_run >= 2, f"too few kills landed while the replay was writing: {kills}"


# --------------------------------------------------------------------------- store faults


def fault_phase(session, store, turns, *, expect_failed=True):
    """Drive turns while the store fails: never raises, failed passes leave memory as it was, and the
    store always equals memory minus not-yet-flushed appends."""
    failed = 0

    def after(kind, results, before):
        nonlocal failed
        outcomes = {r.outcome for r in results}
        failed += "store_failed" in outcomes
        if not outcomes & CHANGED:  # (a flush may have given pending messages their rows meanwhile)
            assert [proj(m) for m in session.transcript] == [b[:5] for b in before]
        check_store_matches(session, store)

    outcomes = drive(session, turns, after)
    if expect_failed:
        assert failed and outcomes["store_failed"] >= 1, outcomes
    return outcomes


def recovery_phase(session, store, turns):
    """Once the fault has cleared: pending messages are flushed and passes run again."""
    outcomes = drive(session, turns, lambda kind, results, before: check_store_matches(session, store))
    assert all("_row" in m for m in session.transcript), "pending messages were not flushed"
    assert outcomes["absorbed"] >= 1 and not outcomes["store_failed"], outcomes
    loaded = check_consistent(store, session.session_id)
    assert [proj_pos(m) for m in loaded] == [proj_pos(m) for m in session.transcript]
    return outcomes


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgres_url_stores_the_session_in_that_database(pg_dsn, tmp_path, monkeypatch, scheme):
    """``--db postgresql://.../name`` (and ``postgres://``) keeps the session in that PostgreSQL database, where
    another store opened on the same database resumes it; no SQLite file is created instead."""
    from urllib.parse import urlsplit, urlunsplit

    from support.stores import FreshPgDatabase

    if not pg_dsn.startswith(("postgresql://", "postgres://")):
        pytest.skip("the test server's DSN is not a URL")
    monkeypatch.chdir(tmp_path)
    db = FreshPgDatabase(pg_dsn)
    try:
        url = urlunsplit(urlsplit(pg_dsn)._replace(scheme=scheme, path="/" + db.name))
        msgs = flat_transcript(2)
        with open_store(url) as st:
            session = new_session(st, Recorder())
            session.extend(msgs)
            session.close()
        with PostgresStore(db.dsn) as other:
            assert [proj(m) for m in other.load_active(SID)] == [proj(m) for m in msgs]
        assert list(tmp_path.iterdir()) == []
    finally:
        db.drop()


def test_read_only_store(store_factory):
    turns = make_turns(36)
    rw = store_factory.open()
    spy = Spy(rw)
    session = open_session(spy, Recorder())
    drive(session, turns[:8])
    ro = store_factory.open(read_only=True)
    spy.inner = ro  # the store turns read-only mid-session
    with pytest.raises(StoreReadOnly):
        ro.append(SID, [{"role": "user", "content": "x"}])
    outcomes = fault_phase(session, ro, turns[8:20])
    assert set(outcomes) <= {"store_failed", "nothing_to_compact", "no_reclaim"}, outcomes  # nothing applied
    pending = [m for m in session.transcript if "_row" not in m]
    assert len(pending) == sum(len(t) for t in turns[8:20])
    spy.inner = rw  # writable again
    recovery_phase(session, rw, turns[20:])


@pytest.mark.parametrize("rate", [0.5, pytest.param(1.0, marks=pytest.mark.slow)])  # 1.0: 28 turns of failures
def test_full_disk_some_of_the_time(store, rate):
    spy = Spy(store)
    session = new_session(spy, Recorder())
    turns = make_turns(50, seed=5)
    drive(session, turns[:6])
    spy.fault, spy.fault_methods, spy.fault_rate = StoreFull, ("append", "archive_and_compact"), rate
    outcomes = fault_phase(session, store, turns[6:34])
    assert (spy.failures["append"] and spy.failures["archive_and_compact"]) or rate == 1.0
    if rate < 1.0:
        assert outcomes["absorbed"] >= 1, outcomes  # passes got through between failures
    spy.fault = None
    recovery_phase(session, store, turns[34:])


def test_sqlite_database_full(tmp_path):
    """A real SQLITE_FULL (max_page_count) rather than an injected error."""
    st = SQLiteStore(tmp_path / "full.db")
    session = new_session(st, Recorder())
    turns = make_turns(40, seed=5)
    drive(session, turns[:6])
    pages = st._conn.execute("PRAGMA page_count").fetchone()[0]
    st._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    with pytest.raises(StoreFull):
        st.append("probe", [{"role": "user", "content": "x" * 50_000}])
    fault_phase(session, st, turns[6:16])
    st._conn.execute("PRAGMA max_page_count = 1073741823")
    recovery_phase(session, st, turns[16:])
    st.close()


def test_locked_sqlite_database(tmp_path):
    path = tmp_path / "locked.db"
    st = SQLiteStore(path, busy_timeout=0.02)
    session = new_session(st, Recorder())
    turns = make_turns(30, seed=9)
    drive(session, turns[:8])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA busy_timeout = 100")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreLocked):
            st.append("probe", [{"role": "user", "content": "x"}])
        t0 = time.perf_counter()
        fault_phase(session, st, turns[8:12])
        assert time.perf_counter() - t0 < 30
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    recovery_phase(session, st, turns[12:])
    st.close()


def test_postgres_restarted_mid_session(pg_server, caplog):
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    try:
        with PostgresStore(db.dsn, busy_timeout=2.0) as st:
            session = open_session(st, Recorder())
            turns = make_turns(40, seed=13)
            outcomes: Counter[str] = Counter()
            for i in range(0, 40, 10):
                outcomes += drive(
                    session, turns[i : i + 10], lambda kind, results, before: check_store_matches(session, st)
                )
                if i < 30:
                    pg_server.restart()
            assert "reconnecting once" in caplog.text
            assert outcomes["absorbed"] >= 10 and not outcomes["store_failed"], outcomes
            session.close()
            loaded = check_consistent(st, SID)
            assert [proj_pos(m) for m in loaded] == [proj_pos(m) for m in session.transcript]
        # A new connection (a resumed agent) finds the same session.
        with PostgresStore(db.dsn) as st2:
            resumed = open_session(st2, Recorder())
            assert [proj_pos(m) for m in resumed.transcript] == [proj_pos(m) for m in session.transcript]
    finally:
        db.drop()


def test_postgres_down_for_a_while(pg_server):
    """The server stops between turns (connections refused): passes are store_failed, appends wait; once it
    is back, pending messages are flushed and passes resume."""
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    try:
        with PostgresStore(db.dsn, busy_timeout=2.0, connect_timeout=2, retry_seconds=1.0) as st:
            session = open_session(st, Recorder())
            turns = make_turns(36, seed=17)
            drive(session, turns[:8])
            # A clean (fast) shutdown: the throwaway server runs with synchronous_commit=off, so an immediate
            # one (a crash) could lose the last acknowledged commits, which no client can guard against.
            pg_server._run("pg_ctl", "-D", str(pg_server.data), "-m", "fast", "-w", "stop")
            try:
                failed = Counter()

                def after(kind, results, before):
                    outcomes = {r.outcome for r in results}
                    failed.update(outcomes)
                    if not outcomes & CHANGED:
                        assert [proj(m) for m in session.transcript] == [b[:5] for b in before]

                drive(session, turns[8:16], after)
                assert failed["store_failed"] >= 1 and not failed["absorbed"], failed
            finally:
                pg_server.start()
            recovery_phase(session, st, turns[16:])
    finally:
        db.drop()


# --------------------------------------------------------------------------- regressions: resume, lost acknowledgements


def _replay_with_crash(store, sid, msgs, cfg, summarizer, cut):
    """Replay ``msgs`` into ``sid``, crash (abandon the session) after message ``cut`` is appended, then
    resume with ``Session.open`` + ``resume_point`` and replay to the end, as ``replay --db`` does."""
    s = Session.open(store, sid, cfg, summarizer, counter=counter())
    with pytest.raises(Crash):
        replay(msgs, s, on_message=crash_at(cut), start=resume_point(s))
    abandon(s)
    s = Session.open(store, sid, cfg, summarizer, counter=counter())
    replay(msgs, s, start=resume_point(s))
    s.close()
    return s


@pytest.mark.slow
def test_resume_right_after_a_finished_turn_does_not_finalize_it_twice(tmp_path):
    st = SQLiteStore(tmp_path / "s.db")
    cfg = small_config()
    msgs = flat_transcript(20, seed=11)
    whole_summ = Recorder()
    whole = Session.open(st, "whole", cfg, whole_summ, counter=counter())
    replay(msgs, whole)
    whole.close()
    diverged = []
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    for cut in users[1:]:  # crash just after a user message: the turn before it was finalized already
        summ = Recorder()
        s = _replay_with_crash(st, f"cut-{cut}", msgs, cfg, summ, cut)
        if summ.calls != whole_summ.calls or [proj(m) for m in s.transcript] != [proj(m) for m in whole.transcript]:
            diverged.append(cut)
    st.close()
    assert diverged == []


def test_resume_keeps_the_turn_cadence(tmp_path):
    st = SQLiteStore(tmp_path / "s.db")
    cfg = small_config(micro_compact_every_n_turns=2)
    msgs = flat_transcript(45, seed=11)
    whole_summ = Recorder()
    whole = Session.open(st, "whole", cfg, whole_summ, counter=counter())
    replay(msgs, whole)
    whole.close()
    tools = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
    cut = tools[5]  # mid-turn: no hook at the resume point is run twice
    summ = Recorder()
    s = _replay_with_crash(st, "crashy", msgs, cfg, summ, cut)
    st.close()
    assert summ.calls == whole_summ.calls
    assert [proj(m) for m in s.transcript] == [proj(m) for m in whole.transcript]


class _LoseCommitAck:
    """A psycopg connection whose next COMMIT succeeds on the server but whose acknowledgement is lost (the
    connection drops): what a network failure or a server restart during COMMIT looks like to a client."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def commit(self):
        import psycopg

        self._conn.commit()
        self._conn.close()
        raise psycopg.OperationalError("server closed the connection unexpectedly")


def test_lost_commit_ack_on_append_does_not_duplicate_messages(pg_dsn):
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_dsn)
    try:
        with PostgresStore(db.dsn) as st:
            session = open_session(st, Recorder())
            turns = make_turns(12, seed=5)
            drive(session, turns[:4])
            session.append(turns[4][0])  # the next user message...
            st._conn = _LoseCommitAck(st._conn)  # ...is written, but the client never hears so
            session.before_request()  # flush (ack lost), then passes flush again before committing
            session.flush()
            copies = [m for m in st.load_active(SID) if m.get("content") == turns[4][0]["content"]]
            assert len(copies) == 1, f"the message is stored {len(copies)} times"
            drive(session, [turns[4][1:], *turns[5:]])
            session.close()
            resumed = open_session(st, Recorder())
            assert [proj(m) for m in resumed.transcript] == [proj(m) for m in session.transcript]
    finally:
        db.drop()


def test_lost_commit_ack_on_a_pass_does_not_stop_compaction(pg_dsn):
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_dsn)
    try:
        with PostgresStore(db.dsn) as st:
            session = open_session(st, Recorder())
            turns = make_turns(30, seed=5)
            drive(session, turns[:6])
            real = st.archive_and_compact

            def lose_ack(session_id, event, messages):  # the next pass commits, but the client never hears so
                st._conn = _LoseCommitAck(st._conn)
                del st.archive_and_compact  # only once
                return real(session_id, event, messages)

            st.archive_and_compact = lose_ack
            outcomes = drive(session, turns[6:])
            assert outcomes["store_failed"] <= 2 and outcomes["absorbed"] >= 10, outcomes
            check_store_matches(session, st)
    finally:
        db.drop()


def test_messages_copied_from_another_session_are_written_as_new(store):
    """Store bookkeeping (_row/_pos) on a caller's message never passes for 'already stored'."""
    old = new_session(store, Recorder(), sid="old")
    replay(flat_transcript(6), old)
    old.close()
    fork = Session(
        micro_config(), Recorder(), session_id="fork", store=store, counter=counter(), messages=old.transcript
    )
    fork.append(dict(old.transcript[-1]))
    assert fork.flush()
    stored = store.load_active("fork")
    assert len(stored) == len(fork.ledger.messages)
    assert {m["_row"] for m in stored}.isdisjoint({m["_row"] for m in store.load_active("old")})


def test_constructing_over_an_existing_session_points_to_open(store):
    s = new_session(store, Recorder(), sid="dup")
    s.extend(flat_transcript(2))
    s.close()
    with pytest.raises(ValueError, match=r"Session\.open"):
        Session(micro_config(), Recorder(), session_id="dup", store=store, counter=counter())


# --------------------------------------------------------------------------- issue 8, item 4: NaN and logged content


def test_nan_never_reaches_the_store_and_the_session_goes_on(store):
    """PostgreSQL's json type refuses NaN/Infinity (SQLite took them): one such message used to make every
    later write fail. Now it is refused at the door, naming the message and the value's place in it."""
    from microcompact.messages import TranscriptError

    session = new_session(store, Recorder(), micro_config())
    session.extend(flat_transcript(1))
    bad = {"role": "tool", "tool_call_id": "c9", "content": [{"type": "text", "text": "x", "score": float("nan")}]}
    with pytest.raises(TranscriptError, match=r"message 7: content\[0\]\.score is nan"):
        session.append(bad)
    with pytest.raises(TranscriptError, match=r"message 1: tool_calls\[0\]\.function\.arguments\.n is inf"):
        Session(
            micro_config(),
            Recorder(),
            counter=counter(),
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"n": float("inf")}}}
                    ],
                },
            ],
        )
    with pytest.raises(ValueError, match="JSON"):  # the store itself never writes what JSON cannot hold
        store.append(SID, [{"role": "user", "content": "x", "weight": float("-inf")}])
    outcomes = drive(session, make_turns(12, seed=4))
    assert outcomes["absorbed"] >= 3 and not outcomes["store_failed"], outcomes
    session.close()
    check_store_matches(session, store)


def _plant_rejecting_trigger(store, marker, secret):
    """Make the database refuse rows holding ``marker`` with an error text quoting the row (PostgreSQL) or
    the secret (SQLite triggers take a literal): what a driver error that echoes parameters looks like."""
    if isinstance(store, PostgresStore):
        conn = store._conn
        conn.execute(f"""CREATE FUNCTION mc_reject() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.body LIKE '%{marker}%' THEN
                    RAISE EXCEPTION 'rejected row: %', NEW.content USING DETAIL = NEW.body;
                END IF;
                RETURN NEW;
            END $$""")
        conn.execute("CREATE TRIGGER mc_reject BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION mc_reject()")
        conn.commit()
    else:
        raw = sqlite3.connect(store.path)
        raw.execute(
            f"CREATE TRIGGER mc_reject BEFORE INSERT ON messages WHEN NEW.body LIKE '%{marker}%' "
            f"BEGIN SELECT RAISE(ABORT, 'rejected row: deploy with {secret}'); END"
        )
        raw.commit()
        raw.close()


def test_store_failures_never_log_message_content(store, caplog):
    caplog.set_level("DEBUG", logger="microcompact")
    marker = "PLANTEDCONTENT"
    secret = "sk-live-" + "9f3KqZ2xWmB7tLpR4vYc8NhD"
    _plant_rejecting_trigger(store, marker, secret)
    session = new_session(store, Recorder(), micro_config())
    turns = make_turns(10, seed=2)
    turns[1][0] = {"role": "user", "content": f"{marker}: deploy with {secret} and tell nobody"}
    outcomes = drive(session, turns)
    session.close()
    assert outcomes["store_failed"] >= 1, outcomes  # the failure did happen, and was logged...
    assert "could not write" in caplog.text
    for record in caplog.records:  # ...without the message or the secret, in any form
        text = record.getMessage() + (record.exc_text or "")
        assert secret not in text and marker not in text and "tell nobody" not in text, text
    # What the log says instead: the operation, and the driver's error class (and SQLSTATE).
    assert "append messages failed" in caplog.text
    assert (
        ("RaiseException P0001" in caplog.text)
        if isinstance(store, PostgresStore)
        else ("IntegrityError" in caplog.text)
    )
    with pytest.raises(StoreError) as info:
        store.append(SID, [{"role": "user", "content": f"{marker} {secret}"}])
    assert secret not in str(info.value) and marker not in str(info.value)
    assert "append messages failed" in str(info.value)
