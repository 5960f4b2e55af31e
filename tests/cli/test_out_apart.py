"""``--out`` and ``--plot`` never land on a file the command uses for something else (in-process, and as
real processes in the slow suite): ``replay --db s.db --out s.db`` replaced the session store with JSONL
and exited 0, ``report --plot LOG`` would replace the log it reads. Each is one line and exit 2, the file
left as it was. And ``--db sqlite:///REL.db`` is the relative file it says (it opened /REL.db at the root)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from microcompact.store import sqlite_path
from support.builders import turns_file
from support.cli_runs import RUNNERS

Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(params=RUNNERS)
def cli(request: pytest.FixtureRequest) -> Cli:
    """``microcompact ARGS`` from a folder, its home inside it: in-process (fast suite) or a real process."""
    runner = request.param

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return runner(cwd, cwd / "home", *args)  # type: ignore[no-any-return]

    return run


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-1500:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def store(tmp_path: Path, cli: Cli) -> Path:
    result = replay(cli, tmp_path, "--db", "s.db", "--session", "A")
    assert result.returncode == 0, result.stderr[-1500:]
    return tmp_path / "s.db"


def replay(cli: Cli, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``microcompact replay`` of the short turns at a 20K window, in ``folder``, with ``args``."""
    return cli(folder, "replay", str(turns_file(folder)), "--context-limit", "20000", *args)


def sessions_in(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("select count(*) from sessions").fetchone()[0])


@pytest.mark.parametrize(
    ("db", "out", "says"),
    [  # make test: the file itself and its WAL; CI also the other spellings of the same file
        pytest.param("s.db", "s.db", "the --db store's file s.db", id="same"),
        pytest.param("s.db", "./s.db", "the --db store's file s.db", id="dot-slash", marks=pytest.mark.slow),
        pytest.param("s.db", "s.db-wal", "the --db store's file s.db-wal", id="wal"),
        pytest.param("s.db", "link-to-store", "the --db store's file s.db", id="symlink", marks=pytest.mark.slow),
    ],
)
def test_out_on_the_store_is_refused_and_the_store_kept(
    tmp_path: Path, cli: Cli, store: Path, db: str, out: str, says: str
) -> None:
    (tmp_path / "link-to-store").symlink_to(store)
    before = store.read_bytes()
    result = replay(
        cli,
        tmp_path,
        "--db",
        db,
        "--session",
        "B",
        "--out",
        out,
    )
    one_line_error(result, f"--out {Path(out)}", f"is also {says}")
    assert store.read_bytes() == before and sessions_in(store) == 1


def test_out_on_the_log_or_the_plot_is_refused(tmp_path: Path, cli: Cli) -> None:
    log = tmp_path / "run.log"
    log.write_text("kept\n", encoding="utf-8")
    result = replay(
        cli,
        tmp_path,
        "--log",
        "run.log",
        "--out",
        "run.log",
    )
    one_line_error(result, "--out run.log", "is also the --log file")
    assert log.read_text(encoding="utf-8") == "kept\n"
    default_log = tmp_path / "home" / "logs" / "agent.log"
    default_log.parent.mkdir(parents=True)
    result = replay(cli, tmp_path, "--out", str(default_log))
    one_line_error(result, "is also the --log file")
    result = cli(
        tmp_path,
        "replay",
        str(turns_file(tmp_path)),
        "--context-limit",
        "50000",
        "--compare",
        "--plot",
        "p.png",
        "--out",
        "p.png",
    )
    one_line_error(result, "--out p.png", "is also the --plot file")


def test_out_may_replace_the_transcript_it_replays(tmp_path: Path, cli: Cli) -> None:
    transcript = turns_file(tmp_path)
    before = transcript.read_bytes()
    result = cli(tmp_path, "replay", transcript.name, "--context-limit", "20000", "--out", transcript.name)
    assert result.returncode == 0, result.stderr[-1500:]
    assert transcript.read_bytes() != before  # the replay's transcript, compacted


def test_report_plot_on_a_log_it_reads_is_refused(tmp_path: Path, cli: Cli) -> None:
    log = tmp_path / "agent.log"
    assert replay(cli, tmp_path, "--log", str(log)).returncode == 0
    before = log.read_bytes()
    one_line_error(cli(tmp_path, "report", str(log), "--plot", str(log)), f"--plot {log}", "is also the log file")
    assert log.read_bytes() == before
    default_log = tmp_path / "home" / "logs" / "agent.log"
    default_log.parent.mkdir(parents=True)
    default_log.write_bytes(before)
    one_line_error(cli(tmp_path, "report", "--plot", str(default_log)), "is also the log file")
    assert default_log.read_bytes() == before


def test_a_sqlite_url_names_the_relative_file(tmp_path: Path, cli: Cli) -> None:
    assert sqlite_path("sqlite:///s.db") == "s.db" and sqlite_path("sqlite:////abs/s.db") == "/abs/s.db"
    assert sqlite_path("plain.db") == "plain.db" and sqlite_path("postgresql://h/d") is None
    name = f"mc-relative-{uuid.uuid4().hex[:12]}.db"
    at_root = Path("/") / name
    try:
        result = replay(
            cli,
            tmp_path,
            "--db",
            f"sqlite:///{name}",
            "--session",
            "A",
        )
        assert result.returncode == 0, result.stderr[-1500:]
        assert (tmp_path / name).is_file() and not at_root.exists()
        listed = cli(tmp_path, "sessions", "list", "--db", f"sqlite:///{name}")
        assert listed.returncode == 0 and "A" in listed.stdout, listed.stderr
    finally:
        for leftover in (at_root, Path(f"{at_root}-wal"), Path(f"{at_root}-shm")):
            if leftover.exists():
                os.unlink(leftover)
