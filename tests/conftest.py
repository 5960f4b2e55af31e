"""Shared fixtures."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

import pg as pgserver
from chat_server import ChatServer
from upstream import ScriptedUpstream

# Property tests run the examples their decorators name (strategies.examples) under "ci", the default and
# what `make test-all` and CI run; `make test` passes --hypothesis-profile=fast for a quarter of them.
settings.register_profile("ci", max_examples=100)
settings.register_profile("fast", max_examples=25)
settings.load_profile("ci")


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A local OpenAI-compatible server (see ``chat_server.py``), closed after the test."""
    with ChatServer() as server:
        yield server


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    """A scripted OpenAI + Anthropic upstream on 127.0.0.1 (see ``upstream/``), closed after the test."""
    with ScriptedUpstream() as server:
        yield server


# --------------------------------------------------------------------------- session store (test_store.py)

PG_DSN_ENV = "MICROCOMPACT_TEST_PG_DSN"
_OWN_PG: dict[str, pgserver.PgServer] = {}


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server for the test session: ``$MICROCOMPACT_TEST_PG_DSN``, else a throwaway one."""
    env = os.environ.get(PG_DSN_ENV)
    if env:
        yield env
        return
    if pgserver.find_bin_dir() is None:
        pytest.skip(
            f"PostgreSQL tests need ${PG_DSN_ENV} or PostgreSQL binaries under "
            "/usr/lib/postgresql/*/bin (apt-get install postgresql)"
        )
    server = pgserver.PgServer().start()
    _OWN_PG["session"] = server
    try:
        yield server.dsn
    finally:
        _OWN_PG.pop("session", None)
        server.stop()


@pytest.fixture(scope="session")
def pg_server(pg_dsn: str) -> Iterator[pgserver.PgServer]:
    """A server the tests may restart: the session's own throwaway server, or a private one when the
    session uses an external server (``$MICROCOMPACT_TEST_PG_DSN``)."""
    own = _OWN_PG.get("session")
    if own is not None:
        yield own
        return
    if pgserver.find_bin_dir() is None:
        pytest.skip("restarting PostgreSQL needs PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    with pgserver.PgServer() as server:
        yield server


class FreshPgDatabase:
    """CREATE DATABASE with a random name on ``admin_dsn``; ``drop()`` removes it."""

    def __init__(self, admin_dsn: str) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self.admin_dsn = admin_dsn
        self.name = "mc_test_" + uuid.uuid4().hex[:12]
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.dsn = make_conninfo(admin_dsn, dbname=self.name)

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class StoreFactory:
    """Opens stores on one fresh database (SQLite file or PostgreSQL database); closes them all at the end."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind = kind
        self.target = target  # SQLite path or PostgreSQL DSN
        self.opened: list = []

    def open(self, **options):
        from microcompact.store import PostgresStore, SQLiteStore

        options.setdefault("busy_timeout", 2.0)
        store = SQLiteStore(self.target, **options) if self.kind == "sqlite" else PostgresStore(self.target, **options)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for s in self.opened:
            s.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path) -> Iterator[StoreFactory]:
    """One fresh, empty database per test, for each backend."""
    if request.param == "sqlite":
        factory = StoreFactory("sqlite", str(tmp_path / "sessions.db"))
        yield factory
        factory.close_all()
        return
    db = FreshPgDatabase(request.getfixturevalue("pg_dsn"))
    factory = StoreFactory("postgres", db.dsn)
    try:
        yield factory
    finally:
        factory.close_all()
        db.drop()


@pytest.fixture
def store(store_factory: StoreFactory):
    """A fresh store (both backends)."""
    return store_factory.open()
