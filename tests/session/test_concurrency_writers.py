"""One writer per stored session (issue 8, item 1): a second writer, in this process or another, is refused
with a clear error; the lease dies with a killed writer; a writer that lost its lease cannot write; readers
never need the lease. Both backends, real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from microcompact.session import Session
from microcompact.store import SessionBusy, SQLiteStore, open_store
from microcompact.tokens import EstimateCounter, TokenCounter
from support.builders import config
from support.paths import NORMALIZED

SID = "shared"
SRC = str(Path(__file__).resolve().parents[2] / "src")
RACE_FILE = NORMALIZED / "cc_ae4a77f8.jsonl"


def open_session(store, sid=SID):
    return Session.open(store, sid, config(), counter=TokenCounter(EstimateCounter()))


def turn(n):
    return [{"role": "user", "content": f"request {n}"}, {"role": "assistant", "content": f"answer {n}"}]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


# --------------------------------------------------------------------------- in one process


def test_a_second_session_on_the_same_stored_session_is_refused(store_factory):
    first_store, second_store = store_factory.open(), store_factory.open()
    first = open_session(first_store)
    first.extend(turn(0))
    first.flush()
    # Another connection (another process, in effect) and the same store object are both refused.
    for store in (second_store, first_store):
        with pytest.raises(SessionBusy) as info:
            open_session(store)
        assert f"session {SID!r}" in one_line(info.value) and "refused" in str(info.value)
    # A new session (nothing stored yet) is leased from construction.
    fresh = Session(config(), session_id="fresh", store=first_store, counter=TokenCounter(EstimateCounter()))
    with pytest.raises(SessionBusy):
        Session(config(), session_id="fresh", store=second_store, counter=TokenCounter(EstimateCounter()))
    fresh.close()
    # Readers need no lease.
    assert [m["content"] for m in second_store.load_active(SID)] == ["request 0", "answer 0"]
    assert [r["id"] for r in second_store.list_sessions()] == [SID]
    assert second_store.search(SID, "request", include_active=True)
    assert len(second_store.export(SID, include_absorbed=True)) == 2
    # Another session id is free, and once the first writer closes, the session is free again.
    other = open_session(second_store, "another")
    other.close()
    first.extend(turn(1))
    first.close()
    again = open_session(second_store)
    assert [m["content"] for m in again.transcript] == ["request 0", "answer 0", "request 1", "answer 1"]
    again.close()


def test_sqlite_writer_that_lost_its_lease_writes_nothing(tmp_path, caplog):
    """The fence: a writer whose lease was taken over (here: removed behind its back, as after missed
    heartbeats) has its writes refused instead of mixing with the new writer's."""
    db = tmp_path / "s.db"
    first_store, second_store = SQLiteStore(db), SQLiteStore(db)
    first = open_session(first_store)
    first.extend(turn(0))
    assert first.flush()
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM session_leases")
    raw.commit()
    raw.close()
    second = open_session(second_store)
    second.extend(turn(1))
    assert second.flush()
    first.extend(turn(2))
    assert first.flush() is False  # refused, logged, kept pending; the first session goes on
    assert "SessionBusy" in caplog.text and "lost its lease" in caplog.text
    first.finalize_turn()  # the hooks still never raise
    second.close()
    assert [m["content"] for m in second_store.load_active(SID)] == ["request 0", "answer 0", "request 1", "answer 1"]
    first_store.close()
    second_store.close()


def test_postgres_writer_reconnecting_after_another_took_the_session_is_fenced(pg_dsn, caplog):
    from microcompact.store import PostgresStore
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_dsn)
    try:
        with PostgresStore(db.dsn) as st1, PostgresStore(db.dsn) as st2, PostgresStore(db.dsn) as admin:
            first = open_session(st1)
            first.extend(turn(0))
            assert first.flush()
            backend = st1._conn.info.backend_pid
            admin._conn.execute("SELECT pg_terminate_backend(%s)", (backend,))
            admin._conn.commit()
            time.sleep(0.2)
            second = open_session(st2)  # the lease went with the dropped connection
            first.extend(turn(1))
            assert first.flush() is False  # reconnected, but the lease is someone else's now
            assert "took session" in caplog.text
            second.extend(turn(2))
            second.close()
            assert [m["content"] for m in admin.load_active(SID)] == ["request 0", "answer 0", "request 2", "answer 2"]
    finally:
        db.drop()


def test_sqlite_lease_of_another_host_lapses_without_heartbeats(tmp_path, caplog):
    db = tmp_path / "s.db"
    holder = SQLiteStore(db, lease_ttl=0.6)
    holder.acquire_lease(SID)
    raw = sqlite3.connect(db)
    raw.execute("UPDATE session_leases SET host = 'elsewhere'")  # no process to check: only the heartbeat counts
    raw.commit()
    time.sleep(1.5)  # more than the TTL: the heartbeat kept it alive
    contender = SQLiteStore(db, lease_ttl=0.6)
    with pytest.raises(SessionBusy, match=r"pid .* on host elsewhere"):
        contender.acquire_lease(SID)
    holder._stop_heartbeat.set()  # the holder's host vanishes: no more heartbeats
    holder._heartbeat.join()
    time.sleep(1.0)
    assert contender.acquire_lease(SID)
    assert "took over the writer lease" in caplog.text and "no heartbeat" in caplog.text
    assert raw.execute("SELECT host FROM session_leases").fetchone()[0] != "elsewhere"
    raw.close()
    contender.close()
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM session_leases").fetchone()[0] == 0  # released
    holder.close()


# --------------------------------------------------------------------------- across processes

HOLDER = textwrap.dedent("""
    import sys, time
    from microcompact.config import parse_config
    from microcompact.session import Session
    from microcompact.store import open_store
    store = open_store(sys.argv[1])
    session = Session.open(store, sys.argv[2], parse_config({}))
    session.append({"role": "user", "content": "holder was here"})
    session.flush()
    print("holding", flush=True)
    time.sleep(600)
""")


def _env(home: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "MICROCOMPACT_HOME": str(home), "PYTHONPATH": SRC + (os.pathsep + path if path else "")}


def _start_holder(target: str, home: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, target, SID],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.strip() == "holding", proc.stderr.read()
    return proc


def _pg_url(pg_dsn: str, dbname: str) -> str:
    parts = urlsplit(pg_dsn)
    return urlunsplit(parts._replace(path="/" + dbname))


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    """A fresh database, as the --db value the CLI takes."""
    if request.param == "sqlite":
        yield str(tmp_path / "sessions.db")
        return
    from support.stores import FreshPgDatabase

    pg_dsn = request.getfixturevalue("pg_dsn")
    if not pg_dsn.startswith(("postgresql://", "postgres://")):
        pytest.skip("needs a URL-style DSN")
    db = FreshPgDatabase(pg_dsn)
    try:
        yield _pg_url(pg_dsn, db.name)
    finally:
        db.drop()


def _cli() -> str:
    exe = Path(sys.executable).parent / "microcompact"
    return str(exe) if exe.exists() else (shutil.which("microcompact") or "")


def test_a_killed_writer_loses_its_lease_at_once(target, tmp_path):
    holder = _start_holder(target, tmp_path / "home")
    try:
        with open_store(target) as st:
            with pytest.raises(SessionBusy) as info:
                open_session(st)
            assert f"pid {holder.pid}" in one_line(info.value)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            t0 = time.monotonic()
            while True:  # PostgreSQL notices the closed socket at once; SQLite checks the process
                try:
                    session = open_session(st)
                    break
                except SessionBusy:
                    assert time.monotonic() - t0 < 5, "the dead writer's lease still blocks"
                    time.sleep(0.05)
            assert [m["content"] for m in session.transcript] == ["holder was here"]
            session.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.slow
def test_replay_into_a_session_another_process_writes_exits_2(target, tmp_path):
    cli = _cli()
    if not cli or not RACE_FILE.exists():
        pytest.skip("needs the microcompact command and the shared transcripts")
    holder = _start_holder(target, tmp_path / "home")
    try:
        proc = subprocess.run(
            [cli, "replay", str(RACE_FILE), "--context-limit", "64000", "--db", target, "--session", SID],
            env=_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is being written by another writer" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    with open_store(target) as st:
        assert [m["content"] for m in st.load_active(SID)] == ["holder was here"]  # nothing mixed in


def _originals(st, sid):
    """Recorded messages stored for ``sid``: source index -> how many rows hold it (first writes only)."""
    rows = [m for m in st.export(sid, include_absorbed=True) if isinstance(m.get("_src"), int)]
    return Counter(m["_src"] for m in rows)


@pytest.mark.slow
def test_two_replays_racing_on_one_session_end_as_one_writer(target, tmp_path):
    """The issue's repro: two ``replay --db F --session S`` started together. Exactly one writes; the other
    is refused (exit 2, one line) or, if it came after, resumes a finished session; the store holds every
    recorded message once and the transcript one writer produces."""
    cli = _cli()
    if not cli or not RACE_FILE.exists():
        pytest.skip("needs the microcompact command and the shared transcripts")
    n = sum(1 for line in RACE_FILE.read_text(encoding="utf-8").splitlines() if line.strip())
    env = _env(tmp_path / "home")
    ref_out = tmp_path / "ref.jsonl"
    ref = subprocess.run(
        [
            cli,
            "replay",
            str(RACE_FILE),
            "--context-limit",
            "64000",
            "--db",
            str(tmp_path / "ref.db"),
            "--session",
            SID,
            "--out",
            str(ref_out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ref.returncode == 0, ref.stderr
    refused = 0
    for trial in range(3):
        sid = f"{SID}-{trial}"
        outs = [tmp_path / f"t{trial}-{k}.jsonl" for k in range(2)]
        procs = [
            subprocess.Popen(
                [
                    cli,
                    "replay",
                    str(RACE_FILE),
                    "--context-limit",
                    "64000",
                    "--db",
                    target,
                    "--session",
                    sid,
                    "--out",
                    str(out),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for out in outs
        ]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        codes = sorted(code for code, _ in results)
        assert codes in ([0, 0], [0, 2]), results
        for code, stderr in results:
            assert "Traceback" not in stderr
            if code == 2:
                refused += 1
                # Refused by the writer lease, or (seen in full CI runs, cause not yet found) by SQLite at
                # connection setup after its busy timeout: either way one clear line and nothing written.
                assert "is being written by another writer" in stderr or "busy timeout" in stderr, stderr
        for (code, _), out in zip(results, outs, strict=True):
            if code == 0 and out.exists() and out.stat().st_size:
                assert out.read_bytes() == ref_out.read_bytes()
        with open_store(target) as st:
            counts = _originals(st, sid)
            assert sorted(counts) == list(range(n)) and set(counts.values()) == {1}, "duplicates or loss"
            exported = [
                json.dumps({k: v for k, v in m.items() if not k.startswith("_")}, sort_keys=True)
                for m in st.load_active(sid)
            ]
        expected = [
            json.dumps({k: v for k, v in json.loads(line).items() if not k.startswith("_")}, sort_keys=True)
            for line in ref_out.read_text(encoding="utf-8").splitlines()
        ]
        assert exported == expected
    assert refused >= 1, "the two replays never overlapped"
