"""Shared fixtures."""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest
import typer.main
import typer.testing
from hypothesis import HealthCheck, settings

from support import pg as pgserver
from support.chat_server import ChatServer
from support.stores import FreshPgDatabase, StoreFactory
from upstream import ScriptedUpstream

# Property tests run the examples their decorators name (strategies.examples) under "ci", the default and
# what `make test-all` and CI run; `make test` passes --hypothesis-profile=fast for a tenth of them.
# Timing is the benchmarks' business (bench/), never a property test's: how fast examples are drawn or run
# depends on what else the machine is doing, so neither the deadline nor the too_slow check can fail a run.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=100, **_UNTIMED)
settings.register_profile("fast", max_examples=10, **_UNTIMED)
settings.load_profile("ci")

# typer's CliRunner builds the click command tree from the app at every invoke: ~16 ms of CPU, mostly
# get_type_hints evaluating every command's annotations, for each of the hundreds of in-process runs in
# make test. Nothing changes ``microcompact.cli.app`` after import, so each app's tree is built once.
# typer.testing names typer.main.get_command as its own private _get_command: checked, so that a typer which
# builds its commands another way fails here instead of quietly building them at every invoke again.
assert typer.testing._get_command is typer.main.get_command, "typer.testing no longer uses typer.main.get_command"
typer.testing._get_command = functools.cache(typer.main.get_command)

# --------------------------------------------------------------------------- $MICROCOMPACT_HOME

HOME_ENV = "MICROCOMPACT_HOME"
_HOMES: dict[str, str | None] = {}  # the developer's value ("real", None when unset) and the run's ("run")


def pytest_configure(config: pytest.Config) -> None:
    """The whole run, collection included, with ``$MICROCOMPACT_HOME`` in a temporary folder (and every
    subprocess a test starts inheriting it): whatever falls back to the default home (a ``Proxy`` without a
    salt file makes ``session-salt`` there, the CLI its log) writes there, never into the developer's
    ``~/.microcompact``, and no developer ``config.yaml`` changes a test. A test that needs a home of its own
    still sets one (``monkeypatch.setenv``, or the env of the process it starts)."""
    _HOMES["real"] = os.environ.get(HOME_ENV)
    _HOMES["run"] = os.environ[HOME_ENV] = tempfile.mkdtemp(prefix="mc-test-home-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if "run" not in _HOMES:
        return
    real, run = _HOMES.pop("real"), _HOMES.pop("run")
    if real is None:
        os.environ.pop(HOME_ENV, None)
    else:
        os.environ[HOME_ENV] = real
    if run is not None:
        shutil.rmtree(run, ignore_errors=True)


# --------------------------------------------------------------------------- what collection imports

_AFTER_COLLECTION: dict[str, frozenset[str]] = {}  # "modules": sys.modules' names when collection ended


def pytest_collection_finish(session: pytest.Session) -> None:
    _AFTER_COLLECTION["modules"] = frozenset(sys.modules)


@pytest.fixture
def modules_after_collection() -> frozenset[str]:
    """The modules this process had imported when its collection ended, before any test ran: what every
    xdist worker pays for before its first test (tests/harness/test_collection_imports.py)."""
    return _AFTER_COLLECTION["modules"]


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


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """Where one fresh, empty store lives, for each backend: a SQLite file's path or a PostgreSQL DSN
    (skipped without PostgreSQL), for tests that hand the location to a process or a proxy."""
    if request.param == "sqlite":
        yield str(tmp_path / "sessions.db")
        return
    db = FreshPgDatabase(request.getfixturevalue("pg_dsn"))
    try:
        yield db.dsn
    finally:
        db.drop()


@pytest.fixture
def store(store_factory: StoreFactory):
    """A fresh store (both backends)."""
    return store_factory.open()
