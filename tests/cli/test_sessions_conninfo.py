"""``sessions`` reads a libpq ``host=... password=...`` DSN as PostgreSQL, as ``replay`` and ``serve`` do: it
used to take it for a SQLite file name and print it back whole, password included ("no session store at
host=... password=..."). Against a closed loopback port (in-process, and as real processes in the slow
suite): one line, non-zero, no password."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from microcompact.store import is_postgres
from support.cli_runs import RUNNERS, CliRun

PASSWORD = "PgConninfoSecret42"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize(
    "command",
    [["list"], ["show", "some-session"], ["export", "some-session"], ["search", "some-session", "word"]],
    ids=["list", "show", "export", "search"],
)
def test_a_conninfo_dsn_is_postgresql_and_its_password_never_printed(
    tmp_path: Path, command: list[str], run: CliRun
) -> None:
    dsn = f"host=127.0.0.1 port={closed_port()} dbname=x user=admin password={PASSWORD}"
    result = run(tmp_path, tmp_path / "home", "sessions", *command, "--db", dsn)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot connect to PostgreSQL" in lines[0], lines[0]
    assert PASSWORD not in result.stderr + result.stdout
    assert not list(tmp_path.glob("host=*")), "no SQLite file of that name"


def test_is_postgres_reads_locations_as_open_store_does() -> None:
    for dsn in ("postgresql://h/db", "postgres://u@h/db", "host=h dbname=d", "  dbname=d", "PASSWORD=x host=h"):
        assert is_postgres(dsn), dsn
    for path in ("sessions.db", "/tmp/host=x/s.db", "sqlite:///s.db", "hostname.db", Path("postgresql.db")):
        assert not is_postgres(path), path
