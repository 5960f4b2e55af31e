"""Transient store errors are retried before the session degrades (issue 20, item 7).

A PostgreSQL server restarted under running replays (``pg_ctl restart``, and a stop, a pause and a start
that goes through crash recovery: "the database system is starting up"), and a SQLite database locked by
another connection for longer than the busy timeout. Real servers, real processes, real files.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

import microcompact
from microcompact.replay import load_transcript, resume_start
from microcompact.session import Session
from microcompact.store import PostgresStore, SessionBusy, SQLiteStore, StoreError, open_store

DEMO = Path(str(resources.files("microcompact") / "data" / "demo_transcript.jsonl"))
SRC = str(Path(microcompact.__file__).resolve().parents[1])
REPLAYS = 4


def long_transcript(path: Path, copies: int = 5) -> Path:
    """The demo transcript ``copies`` times over, a day apart: long enough to be running at each restart
    (a call id reused by a later turn is valid: results pair with the message right before them)."""
    messages = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as fh:
        for k in range(copies):
            for m in messages:
                fh.write(json.dumps({**m, "_ts": m["_ts"] + k * 86400} if "_ts" in m else m) + "\n")
    return path


def start_replay(home: Path, transcript: Path, dsn: str, sid: str, out: Path, log: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(MICROCOMPACT_HOME=str(home), PYTHONPATH=SRC)
    cmd = [sys.executable, "-m", "microcompact.cli", "replay", str(transcript), "--context-limit", "20000"]
    cmd += ["--db", dsn, "--session", sid, "--out", str(out), "--log", str(log), "--json"]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    )


def stored_counts(dsn: str, sids: list[str]) -> dict[str, int]:
    """Rows stored per session so far (0 while the server is down or the session not yet created)."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT session_id, count(*) FROM messages WHERE session_id = ANY(%s) GROUP BY session_id", (sids,)
            ).fetchall()
    except psycopg.Error:
        return {}
    return {str(s): int(n) for s, n in rows}


def wait_until(predicate: Any, seconds: float, what: str, procs: list[subprocess.Popen[str]]) -> None:
    """Poll ``predicate`` (a bound on the wait, not a timing assertion: a hung run fails here)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        ended = [p for p in procs if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            details = [(p.returncode, p.communicate()[1][-1000:]) for p in ended]
            raise AssertionError(f"gave up waiting for {what}; ended replays: {details}")
        time.sleep(0.1)


@pytest.mark.slow
def test_four_replays_survive_postgres_restarts(pg_server: Any, tmp_path: Path) -> None:
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    procs: list[subprocess.Popen[str]] = []
    try:
        transcript = long_transcript(tmp_path / "long.jsonl")
        sids = [f"restart-{i}" for i in range(REPLAYS)]
        home = tmp_path / "home"
        url = f"postgresql://postgres@127.0.0.1:{pg_server.port}/{db.name}"  # --db takes a URL
        procs = [
            start_replay(home, transcript, url, sid, tmp_path / f"{sid}.jsonl", tmp_path / f"{sid}.log") for sid in sids
        ]
        first = 20
        wait_until(lambda: all(stored_counts(db.dsn, sids).get(s, 0) >= first for s in sids), 120, "replays", procs)
        assert all(p.poll() is None for p in procs), "a replay ended before the first restart"
        pg_server.restart()  # pg_ctl restart -m fast: every connection is cut
        before = stored_counts(db.dsn, sids)
        wait_until(
            lambda: all(stored_counts(db.dsn, sids).get(s, 0) > before.get(s, 0) for s in sids), 120, "more", procs
        )
        assert all(p.poll() is None for p in procs), "a replay ended before the second restart"
        stop_cleanly(pg_server)
        time.sleep(1.0)  # refused connections meanwhile, then "the database system is starting up"
        pg_server.start()
        results = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    try:
        codes = [p.returncode for p in procs]
        assert codes == [0] * REPLAYS, [(c, err[-2000:]) for c, (_out, err) in zip(codes, results, strict=True)]
        for (stdout, stderr), sid in zip(results, sids, strict=True):
            assert "Traceback" not in stderr and "error:" not in stderr, stderr
            assert json.loads(stdout)["session_id"] == sid
        logs = "".join((tmp_path / f"{sid}.log").read_text(encoding="utf-8") for sid in sids)
        # The restarts hit the running replays, and the retries carried every write: the session never
        # degraded (no message left pending, no pass rolled back for a store failure).
        assert "Session store: could not write" not in logs
        assert all("store_failed" not in json.loads(out)["outcomes"] for out, _err in results)
        assert "reconnecting once the server answers" in logs
        messages = load_transcript(transcript)
        with PostgresStore(db.dsn) as store:
            for sid in sids:
                # Every recorded message stored exactly once, in order, and it is the transcript's.
                session = Session.open(store, sid)
                assert resume_start(session, messages) == len(messages)
                session.close()
                # What the store holds active is what the replay wrote as its final transcript.
                out = [json.loads(line) for line in (tmp_path / f"{sid}.jsonl").read_text().splitlines()]
                active = [
                    {k: v for k, v in m.items() if k not in ("_row", "_pos", "_src", "_tokens")}
                    for m in store.load_active(sid)
                ]
                assert [m.get("content") for m in active] == [m.get("content") for m in out]
    finally:
        db.drop()


def stop_cleanly(server: Any) -> None:
    """``pg_ctl stop -m fast``: clients are cut, but what was committed stays (the test server runs with
    ``synchronous_commit=off``, so an immediate stop could lose the last commits and the store with them)."""
    server._run("pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "stop")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_first_connection_to_nothing_fails_without_retrying(caplog: pytest.LogCaptureFixture) -> None:
    """A wrong host or port is not a restart: one attempt, the driver's reason, no retry budget spent."""
    pytest.importorskip("psycopg")
    with (
        caplog.at_level(logging.WARNING, logger="microcompact.store"),
        pytest.raises(StoreError, match="cannot connect to PostgreSQL") as exc,
    ):
        PostgresStore(f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres", retry_seconds=30)
    assert "gave up after retrying" not in str(exc.value)
    assert "reconnecting" not in caplog.text


def test_postgres_gives_up_after_its_retry_budget(pg_server: Any, tmp_path: Path) -> None:
    """A server that stays down: the write fails with one StoreError once ``retry_seconds`` is spent."""
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    try:
        with PostgresStore(db.dsn, retry_seconds=1.0) as st:
            st.append("s", [{"role": "user", "content": "before"}])
            stop_cleanly(pg_server)
            try:
                with pytest.raises(StoreError, match=r"gave up after retrying for 1 s|stayed lost after retrying"):
                    st.append("s", [{"role": "user", "content": "while down"}])
            finally:
                pg_server.start()
            st.append("s", [{"role": "user", "content": "after"}])
            assert [m["content"] for m in st.load_active("s")] == ["before", "after"]
    finally:
        db.drop()


def test_sqlite_locked_past_the_busy_timeout_is_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Another connection holds the write lock past the busy timeout, then lets go: the write goes through
    (it used to raise StoreLocked after the busy timeout); the retry is logged once."""
    path = tmp_path / "s.db"
    with SQLiteStore(path, busy_timeout=1.0) as st:
        st.append("s", [{"role": "user", "content": "first"}])
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        holding = threading.Event()

        def hold_then_release() -> None:
            holding.set()
            time.sleep(1.4)  # past the 1 s busy timeout, well inside the retry budget
            other.execute("COMMIT")

        holder = threading.Thread(target=hold_then_release)
        holder.start()
        holding.wait()
        try:
            with caplog.at_level(logging.WARNING, logger="microcompact.store"):
                st.append("s", [{"role": "user", "content": "second"}])
        finally:
            holder.join()
            other.close()
        assert [m["content"] for m in st.load_active("s")] == ["first", "second"]
        assert caplog.text.count("locked past the busy timeout; retrying") == 1


def test_open_store_on_a_restarted_server_keeps_the_lease(pg_server: Any) -> None:
    """After a restart the writer's advisory lease is taken again on the new connection: a second writer is
    still refused."""
    from support.stores import FreshPgDatabase

    db = FreshPgDatabase(pg_server.dsn)
    try:
        with open_store(db.dsn) as first, open_store(db.dsn) as second:
            first.acquire_lease("s")
            first.append("s", [{"role": "user", "content": "a"}])
            pg_server.restart()
            first.append("s", [{"role": "user", "content": "b"}])  # reconnects, retakes the lease
            with pytest.raises(SessionBusy):
                second.acquire_lease("s")
    finally:
        db.drop()
