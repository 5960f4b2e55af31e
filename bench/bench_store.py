"""Rows written and time per micro-compaction pass: microcompact's store versus a Hermes-style full rewrite.

Run: ``.venv/bin/python bench/bench_store.py`` (about 30-60 s). Prints figures; asserts nothing.

What is compared, per pass, side by side in one run:

* **microcompact** -- ``archive_and_compact`` as the engine calls it through ``Session``'s commit hook: the
  absorbed rows are marked ``absorbed``, the previous micro marker ``superseded``, the new marker inserted.
  Rows per pass = its return value (rows updated + inserted); time = wall time of that call (one transaction).
* **full rewrite** -- what Hermes Agent does on every compression: the whole active transcript written again.
  Rows per pass = ``len(active transcript)`` after the pass. Time = one transaction that DELETEs the session's
  rows and INSERTs the whole active transcript (role, content, extra as JSON), on a separate minimal table
  in the same database (``hermes_messages``: no full-text index, one (session_id, position) index), through
  its own connection with the same durability settings. Leaving out the full-text index favours the
  baseline, so the time ratio is conservative.

Method: seeded synthetic agent transcripts of ~1K, ~5K and ~20K messages (system prompt; turns of a user
request, 1-6 tool-calling iterations with log-uniform 100-4,000-character outputs, a closing answer) are
appended to a fresh store in one call, then ``Session.open`` loads them and ``finalize_turn`` runs one real
micro pass per call (stub summarizer, estimated token counts, a tail of ~2K tokens and no batch threshold in
reach, so every call absorbs the next exchange). Before the timed passes the baseline table holds the session
once. The first two passes of each size are a warm-up and not reported. Medians over the timed passes.

SQLite always (a file in a temporary directory: WAL, synchronous=NORMAL, as ``SQLiteStore`` opens it);
PostgreSQL when ``$MICROCOMPACT_TEST_PG_DSN`` is set (a fresh database is created and dropped on it) or a
throwaway server can be started with ``tests/support/pg.py`` (PostgreSQL binaries under /usr/lib/postgresql/*/bin).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from microcompact.config import parse_config
from microcompact.session import Session
from microcompact.store import PostgresStore, SQLiteStore
from microcompact.tokens import EstimateCounter, TokenCounter

SIZES = (("1K", 1_000), ("5K", 5_000), ("20K", 20_000))
WARMUP = 2
PASSES = {"sqlite": 20, "postgres": 10}  # timed passes per size
SID = "bench"

CONFIG = parse_config(
    {
        "compression": {
            "micro_compact": True,
            "protect_first_n": 3,
            "threshold": 0.5,
            "target_ratio": 0.0001,  # tail budget 0.0001 * 0.5 * 40M = 2,000 tokens
            "micro_compact_every_n_turns": 1,
            "micro_compact_max_exchange_tokens": 8_000,
        },
        "model": {"context_length": 40_000_000},  # no batch compaction in reach: every pass is a micro pass
    },
    source="bench_store",
)

Message = dict[str, Any]


class StubSummarizer:
    """A fixed short summary: the pass costs what the engine and the store do, nothing else."""

    name = "stub"
    SUMMARY = "- Worked through the earlier requests; files and commands are in the messages that follow."

    def merge(self, summary: str, exchange: list[Message]) -> str:
        return self.SUMMARY

    def condense(self, summary: str, target_tokens: int) -> str:
        return self.SUMMARY

    def batch(self, summary: str, messages: list[Message], focus: str | None = None) -> str:
        return self.SUMMARY


# --------------------------------------------------------------------------- synthetic transcripts

_WORDS = (
    "config session ledger token window cursor summary marker parser loader handler request response "
    "client server cache index record buffer stream reader writer schema model field value item entry "
    "batch queue worker task job result error retry timeout limit offset status state event hook plugin"
).split()


def transcript(n_messages: int, seed: int = 1) -> list[Message]:
    r = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(r.choice(_WORDS) for _ in range(k))

    msgs: list[Message] = [{"role": "system", "content": "You are a coding agent. " + words(60)}]
    t = 0
    while len(msgs) < n_messages:
        msgs.append({"role": "user", "content": f"request {t}: " + words(r.randint(8, 50))})
        for k in range(r.randint(1, 6)):
            cid = f"call_{t}_{k}"
            cmd = f"grep -rn {r.choice(_WORDS)} src/{r.choice(_WORDS)}"
            msgs.append(
                {
                    "role": "assistant",
                    "content": words(r.randint(3, 20)),
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
                        }
                    ],
                }
            )
            size = int(math.exp(r.uniform(math.log(100), math.log(4_000))))
            msgs.append({"role": "tool", "tool_call_id": cid, "content": (words(size // 6 + 1))[:size]})
        msgs.append({"role": "assistant", "content": f"done {t}: " + words(r.randint(5, 30))})
        t += 1
    return msgs


# --------------------------------------------------------------------------- the two writers


class TimedStore:
    """Wraps a store: times ``archive_and_compact`` and records the rows it reports writing."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.passes: list[tuple[int, float]] = []  # (rows written, ms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def search_backend(self) -> str:
        return self.inner.search_backend

    def archive_and_compact(self, session_id: str, event: Any, messages: list[Message]) -> int:
        t = time.perf_counter()
        written = self.inner.archive_and_compact(session_id, event, messages)
        self.passes.append((written, (time.perf_counter() - t) * 1000))
        return written


def _row(session_id: str, pos: int, m: Message) -> tuple[Any, ...]:
    extra = {k: v for k, v in m.items() if k not in ("role", "content") and not k.startswith("_")}
    return (
        session_id,
        pos,
        m["role"],
        json.dumps(m.get("content"), ensure_ascii=False),
        json.dumps(extra, ensure_ascii=False),
    )


class SQLiteRewrite:
    """Hermes-style: every pass deletes the session's rows and inserts the whole transcript again."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS hermes_messages (id INTEGER PRIMARY KEY, session_id TEXT NOT "
            "NULL, position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT, extra TEXT)"
        )
        self.conn.execute("CREATE INDEX IF NOT EXISTS hermes_session ON hermes_messages (session_id, position)")

    def rewrite(self, session_id: str, messages: list[Message]) -> tuple[int, float]:
        rows = [_row(session_id, i, m) for i, m in enumerate(messages)]
        t = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("DELETE FROM hermes_messages WHERE session_id = ?", (session_id,))
        self.conn.executemany(
            "INSERT INTO hermes_messages (session_id, position, role, content, extra) VALUES (?, ?, ?, ?, ?)", rows
        )
        self.conn.execute("COMMIT")
        return len(rows), (time.perf_counter() - t) * 1000

    def close(self) -> None:
        self.conn.close()


class PostgresRewrite:
    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS hermes_messages (id BIGSERIAL PRIMARY KEY, session_id TEXT NOT "
            "NULL, position BIGINT NOT NULL, role TEXT NOT NULL, content JSON, extra JSON)"
        )
        self.conn.execute("CREATE INDEX IF NOT EXISTS hermes_session ON hermes_messages (session_id, position)")
        self.conn.commit()

    def rewrite(self, session_id: str, messages: list[Message]) -> tuple[int, float]:
        rows = [_row(session_id, i, m) for i, m in enumerate(messages)]
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute("DELETE FROM hermes_messages WHERE session_id = %s", (session_id,))
            cur.executemany(
                "INSERT INTO hermes_messages (session_id, position, role, content, extra) "
                "VALUES (%s, %s, %s, %s::json, %s::json)",
                rows,
            )
        self.conn.commit()
        return len(rows), (time.perf_counter() - t) * 1000

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- one size on one backend


@contextlib.contextmanager
def no_gc():
    """Collect first, then keep the garbage collector out of the timed call (the baseline allocates a tuple
    per row; a collection it triggers would otherwise land in whichever call comes next)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_size(store: Any, baseline: Any, n_messages: int, passes: int) -> dict[str, Any]:
    msgs = transcript(n_messages)
    t = time.perf_counter()
    store.append(SID, [dict(m) for m in msgs])
    append_s = time.perf_counter() - t
    timed = TimedStore(store)
    session = Session.open(timed, SID, CONFIG, StubSummarizer(), counter=TokenCounter(EstimateCounter()))
    baseline.rewrite(SID, session.transcript)  # the baseline holds the session once before the passes
    micro_rows, micro_ms, full_rows, full_ms = [], [], [], []
    while len(timed.passes) < WARMUP + passes:
        before = len(timed.passes)
        with no_gc():
            results = session.finalize_turn()
        if len(timed.passes) == before:
            raise RuntimeError(f"no pass ran: {[r.outcome for r in results]}")
        rows, ms = timed.passes[-1]
        with no_gc():
            b_rows, b_ms = baseline.rewrite(SID, session.transcript)
        if len(timed.passes) > WARMUP:
            micro_rows.append(rows)
            micro_ms.append(ms)
            full_rows.append(b_rows)
            full_ms.append(b_ms)
    return {
        "messages": len(msgs),
        "active": len(session.transcript),
        "append_s": append_s,
        "passes": passes,
        "micro_rows": statistics.median(micro_rows),
        "micro_ms": statistics.median(micro_ms),
        "micro_ms_max": max(micro_ms),
        "full_rows": statistics.median(full_rows),
        "full_ms": statistics.median(full_ms),
    }


def run_backend(name: str, open_store, open_baseline) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for label, n in SIZES:
        store, baseline = open_store(), open_baseline()
        try:
            out.append((label, run_size(store, baseline, n, PASSES[name])))
        finally:
            baseline.close()
            store.close()
    return out


# --------------------------------------------------------------------------- PostgreSQL, if available


def postgres_target() -> tuple[str | None, Any, str]:
    """(admin DSN, server to stop afterwards or None, where it came from)."""
    env = os.environ.get("MICROCOMPACT_TEST_PG_DSN")
    if env:
        return env, None, "$MICROCOMPACT_TEST_PG_DSN"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    try:
        from support import pg as pgserver
    except ImportError:
        return None, None, "tests/support/pg.py not found"
    if pgserver.find_bin_dir() is None:
        return None, None, "no PostgreSQL binaries under /usr/lib/postgresql/*/bin"
    try:
        server = pgserver.PgServer().start()
    except Exception as exc:  # report and go on with SQLite only
        return None, None, f"could not start a throwaway server: {exc}"
    return server.dsn, server, f"throwaway server from tests/support/pg.py ({pgserver.FAST_OPTIONS})"


def fresh_pg_database(admin_dsn: str) -> tuple[str, Any]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = "mc_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return make_conninfo(admin_dsn, dbname=name), drop


# --------------------------------------------------------------------------- report


def fmt_rows(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:g}"


def print_table(backend: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    head = (
        f"{'backend':<9}{'transcript':<16}{'passes':>7}  {'micro rows/pass':>15}{'micro ms/pass':>14}"
        f"{'full rows/pass':>15}{'full ms/pass':>13}{'rows ratio':>11}{'time ratio':>11}"
    )
    print(head)
    print("-" * len(head))
    for label, r in rows:
        print(
            f"{backend:<9}{label + ' (' + format(r['messages'], ',') + ')':<16}{r['passes']:>7}  "
            f"{fmt_rows(r['micro_rows']):>15}{r['micro_ms']:>14.2f}{fmt_rows(r['full_rows']):>15}"
            f"{r['full_ms']:>13.2f}{r['full_rows'] / r['micro_rows']:>10,.0f}x"
            f"{r['full_ms'] / r['micro_ms']:>10,.0f}x"
        )
    print()


def main() -> None:
    t_start = time.perf_counter()
    print(
        "bench_store: rows written and time per micro-compaction pass -- microcompact archive_and_compact "
        "vs a Hermes-style full rewrite (DELETE + INSERT of the whole active transcript, one transaction)"
    )
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.machine()}, "
        f"{os.cpu_count()} cpus; medians over the timed passes (after {WARMUP} warm-up passes per size)"
    )
    print()
    results: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="mc-bench-store-") as tmp:
        counter = iter(range(1000))

        def sqlite_store() -> SQLiteStore:
            path = os.path.join(tmp, f"s{next(counter)}.db")
            sqlite_store.path = path  # type: ignore[attr-defined]
            return SQLiteStore(path)

        # The baseline gets its own file: sharing one WAL, each writer would pay for the other's checkpoints.
        results["sqlite"] = run_backend("sqlite", sqlite_store, lambda: SQLiteRewrite(sqlite_store.path + ".hermes"))  # type: ignore[attr-defined]

    admin, server, origin = postgres_target()
    pg_note = f"PostgreSQL: skipped ({origin})"
    if admin:
        try:
            import psycopg

            with psycopg.connect(admin) as conn:
                version = conn.execute("SHOW server_version").fetchone()[0]
            pg_note = f"PostgreSQL {version}: {origin}"
            dbs: list[Any] = []

            def pg_store() -> PostgresStore:
                dsn, drop = fresh_pg_database(admin)
                dbs.append(drop)
                pg_store.dsn = dsn  # type: ignore[attr-defined]
                return PostgresStore(dsn)

            try:
                results["postgres"] = run_backend("postgres", pg_store, lambda: PostgresRewrite(pg_store.dsn))  # type: ignore[attr-defined]
            finally:
                for drop in dbs:
                    drop()
        except Exception as exc:  # report and keep the SQLite figures
            pg_note = f"PostgreSQL: failed ({type(exc).__name__}: {exc})"
        finally:
            if server is not None:
                server.stop()

    for backend, rows in results.items():
        print_table(backend, rows)
    print(pg_note)
    for backend, rows in results.items():
        loads = ", ".join(f"{label} {r['append_s']:.2f} s" for label, r in rows)
        print(f"{backend}: initial append of the whole transcript (one call, not compared): {loads}")
    print(
        "micro rows/pass = rows archive_and_compact updated or inserted (absorbed + superseded marker + new "
        "marker); full rows/pass = len(active transcript) re-inserted. Ratios are full / micro."
    )
    print(f"total {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
