"""``--out`` (replay) and ``--plot`` (replay --compare, report) write files and nothing else, as a user runs
them (in-process, and as real ``microcompact`` processes in the slow suite): a device, a FIFO, a socket or
a folder at the path is refused with one line and a non-zero exit, and left as it was; a symlink is written
through to its target (the link stays, the command says so); a regular file is still replaced by an atomic
rename."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest

from support.builders import turns_file
from support.cli_runs import RUNNERS, from_here, in_process
from support.serve_process import CLI, cli_env

DEMO = str(resources.files("microcompact") / "data" / "demo_transcript.jsonl")


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """A replay to write --out: the short turns, since what --out is matters here, not the transcript."""
    return ("replay", str(turns_file(tmp_path_factory.mktemp("turns"))), "--context-limit", "20000")


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(params=RUNNERS)
def run_cli(request: pytest.FixtureRequest) -> Cli:
    """``microcompact ARGS`` with a home: in-process (the fast suite) or as a real process (the slow one)."""
    return from_here(request.param)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "mchome"


def fifo(folder: Path) -> Path:
    path = folder / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


def link_to(target: Path, folder: Path) -> Path:
    link = folder / "link.out"
    link.symlink_to(target)
    return link


def one_line_error(result: object, *fragments: str) -> str:
    assert getattr(result, "returncode", None) == 2, result
    err = str(getattr(result, "stderr", ""))
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


Make = Callable[[Path], Path]
NOT_FILES: list[tuple[str, Make, str, Callable[[int], bool]]] = [
    ("dev-null", lambda d: Path("/dev/null"), "is a character device", stat.S_ISCHR),
    ("fifo", fifo, "is a FIFO (named pipe)", stat.S_ISFIFO),
    ("folder", lambda d: d, "is a folder", stat.S_ISDIR),
    (
        "link-to-dev-null",
        lambda d: link_to(Path("/dev/null"), d),
        "(the target of the symlink, /dev/null)",
        stat.S_ISCHR,
    ),
    ("link-to-fifo", lambda d: link_to(fifo(d), d), "is a FIFO (named pipe) (the target of the symlink", stat.S_ISFIFO),
]


@pytest.mark.parametrize(("make", "says", "kind"), [case[1:] for case in NOT_FILES], ids=[c[0] for c in NOT_FILES])
def test_out_refuses_what_is_not_a_regular_file(
    replay: tuple[str, ...],
    run_cli: Cli,
    home: Path,
    tmp_path: Path,
    make: Make,
    says: str,
    kind: Callable[[int], bool],
) -> None:
    target = make(tmp_path)
    result = run_cli(home, *replay, "--out", str(target))
    one_line_error(result, f"--out {target}: ", says, "not a regular file")
    assert kind(os.stat(target).st_mode)  # left as it was: still a device, a FIFO, a folder
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_out_refuses_a_socket(replay: tuple[str, ...], run_cli: Cli, home: Path, unix_socket: Path) -> None:
    one_line_error(run_cli(home, *replay, "--out", str(unix_socket)), "is a socket")
    assert stat.S_ISSOCK(os.stat(unix_socket).st_mode)


@pytest.fixture(scope="module")
def reference(replay: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> str:
    """What --out holds when it is a plain new file."""
    tmp = tmp_path_factory.mktemp("reference")
    out = tmp / "reference.jsonl"
    assert in_process(tmp, tmp / "home", *replay, "--out", str(out)).returncode == 0
    return out.read_text(encoding="utf-8")


def test_out_through_a_symlink_writes_its_target_and_says_so(
    replay: tuple[str, ...], run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "final.jsonl"
    target.write_text("old\n", encoding="utf-8")
    link = link_to(target, tmp_path)
    result = run_cli(home, *replay, "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert f"--out {link} is a symlink: writing through it to {target}" in result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text(encoding="utf-8") == reference
    assert all(json.loads(line) for line in target.read_text(encoding="utf-8").splitlines())


def test_out_through_a_dangling_symlink_creates_its_target(
    replay: tuple[str, ...], run_cli: Cli, home: Path, tmp_path: Path
) -> None:
    target = tmp_path / "not-yet.jsonl"
    link = link_to(target, tmp_path)
    result = run_cli(home, *replay, "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and target.is_file() and target.read_text(encoding="utf-8")


def test_out_through_a_symlink_into_a_missing_folder_fails_before_the_replay(
    replay: tuple[str, ...], run_cli: Cli, home: Path, tmp_path: Path
) -> None:
    link = link_to(tmp_path / "gone" / "x.jsonl", tmp_path)
    one_line_error(run_cli(home, *replay, "--out", str(link)), f"folder {tmp_path / 'gone'} does not exist")


def test_a_regular_out_file_is_replaced_by_a_rename(
    replay: tuple[str, ...], run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n", encoding="utf-8")
    before = os.stat(out).st_ino
    keep = tmp_path / "hardlink"
    os.link(out, keep)  # the old inode, as a reader holding it open would still see it
    result = run_cli(home, *replay, "--out", str(out))
    assert result.returncode == 0 and "symlink" not in result.stderr
    assert os.stat(out).st_ino != before and keep.read_text(encoding="utf-8") == "old\n"
    assert out.read_text(encoding="utf-8") == reference


# ---------------------------------------------------------------------- --plot


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("telemetry")
    log = tmp / "agent.log"
    result = in_process(
        tmp, tmp / "home", "replay", str(turns_file(tmp)), "--context-limit", "20000", "--log", str(log)
    )
    assert result.returncode == 0, result.stderr
    assert "micro" in log.read_text(encoding="utf-8")
    return log


@pytest.mark.parametrize(("make", "says", "kind"), [case[1:] for case in NOT_FILES], ids=[c[0] for c in NOT_FILES])
def test_report_plot_refuses_what_is_not_a_regular_file(
    run_cli: Cli, home: Path, tmp_path: Path, telemetry: Path, make: Make, says: str, kind: Callable[[int], bool]
) -> None:
    target = make(tmp_path)
    one_line_error(run_cli(home, "report", str(telemetry), "--plot", str(target)), f"--plot {target}: ", says)
    assert kind(os.stat(target).st_mode)


def test_report_plot_through_a_symlink_writes_a_png_at_its_target(
    run_cli: Cli, home: Path, tmp_path: Path, telemetry: Path
) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "occupancy.png"
    link = link_to(target, tmp_path)
    result = run_cli(home, "report", str(telemetry), "--plot", str(link))
    assert result.returncode == 0, result.stderr
    assert f"--plot {link} is a symlink: writing through it to {target}" in result.stderr
    assert link.is_symlink() and target.read_bytes().startswith(b"\x89PNG")


def test_compare_plot_refuses_a_fifo_before_the_replays(run_cli: Cli, home: Path, tmp_path: Path) -> None:
    target = fifo(tmp_path)
    result = run_cli(home, "replay", DEMO, "--context-limit", "50000", "--compare", "--plot", str(target))
    one_line_error(result, f"--plot {target}: is a FIFO")
    assert stat.S_ISFIFO(os.stat(target).st_mode)


@pytest.mark.slow
def test_a_replay_writes_the_same_out_whatever_the_hash_seed(
    replay: tuple[str, ...], tmp_path: Path, reference: str
) -> None:
    """A marker is a function of the transcript: nothing in it may follow a set's order, which changes with
    the process's hash seed (the ledger's "used" and frequent names once did; the racing-writer and
    alternating-process tests of tests/session catch it on real sessions too)."""
    out = tmp_path / "seeded.jsonl"
    done = subprocess.run(
        [*CLI, *replay, "--out", str(out)],
        env={**cli_env(tmp_path / "home"), "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == reference
