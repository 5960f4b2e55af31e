"""Start and stop a throwaway PostgreSQL server for the store tests (stdlib only).

Usable from the tests (``PgServer``) and from a shell::

    eval "$(python3 tests/support/pg.py start /tmp/mc-pg)"   # prints export MICROCOMPACT_TEST_PG_DSN=...
    python3 tests/support/pg.py stop /tmp/mc-pg

The server runs from a private data directory with ``trust`` authentication, listens on 127.0.0.1 on a
free port and on a Unix socket in that directory, and is tuned for tests (no fsync). As root, initdb and
pg_ctl run as the ``postgres`` user (PostgreSQL refuses to run as root), so the directory is chowned to it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

FAST_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding initdb and pg_ctl (or $PG_BIN_DIR), else None."""
    env = os.environ.get("PG_BIN_DIR")
    candidates = [env] if env else []

    def version(path: str) -> tuple[int, ...]:
        m = re.search(r"/postgresql/([0-9.]+)/bin", path)
        return tuple(int(x) for x in m.group(1).split(".") if x) if m else (0,)

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One throwaway server: ``start()``, ``restart()``, ``stop()``; ``dsn`` connects as postgres."""

    def __init__(
        self, base: str | os.PathLike[str] | None = None, port: int | None = None, bin_dir: Path | None = None
    ) -> None:
        found = bin_dir or find_bin_dir()
        if found is None:
            raise RuntimeError(
                "no PostgreSQL binaries found under /usr/lib/postgresql/*/bin "
                "(install the postgresql package or set PG_BIN_DIR)"
            )
        self.bin_dir = found
        # Short paths: the Unix socket path must fit in ~107 bytes.
        self.base = Path(base) if base else Path(tempfile.mkdtemp(prefix="mcpg-", dir="/tmp"))
        self.data = self.base / "data"
        self.log = self.base / "log"
        self.port = port or free_port()
        self.started = False

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    # ------------------------------------------------------------------ running commands

    def _as_owner(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError(
                "running as root but there is no 'postgres' user to run the server as "
                "(create one: useradd --system --user-group postgres)"
            ) from None
        return ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        cmd = [*self._as_owner(), str(self.bin_dir / args[0]), *args[1:]]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{log}")

    def _options(self) -> str:
        return f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 {FAST_OPTIONS}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PgServer:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._as_owner()  # fails clearly without a postgres user
            shutil.chown(self.base, "postgres", "postgres")
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options(), "-l", str(self.log), "-w", "-t", "60", "start")
        self.started = True
        return self

    def restart(self) -> None:
        """Fast shutdown (clients are disconnected) and start again on the same port."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            self._options(),
            "-l",
            str(self.log),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "restart",
        )

    def stop(self, remove: bool = True) -> None:
        if self.data.exists():
            with contextlib.suppress(RuntimeError):  # not running
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.started = False
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: pg.py start|stop DIR", file=sys.stderr)
        return 2
    action, base = argv
    port_file = Path(base) / "port"
    if action == "start":
        server = PgServer(base).start()
        port_file.write_text(str(server.port))
        print(f"export MICROCOMPACT_TEST_PG_DSN={server.dsn}")
    else:
        port = int(port_file.read_text()) if port_file.exists() else None
        PgServer(base, port=port).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
