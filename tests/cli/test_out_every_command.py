"""Every command that writes a file writes a file and nothing else (test_out_targets.py has replay --out and
the --plot refusals): ``import --out`` refuses a device, a FIFO, a socket or a folder with one line and a
non-zero exit and leaves it as it was, writes a symlink's target (and says so), and replaces a regular file
by an atomic rename; the plots of ``report`` and ``replay --compare`` are renamed into place too, at the path
given; the library's ``write_jsonl`` to a path is file-only, checked when it writes."""

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

from microcompact.importers import write_jsonl
from microcompact.outfile import NotAFile
from support.builders import turns_file
from support.cli_runs import RUNNERS, from_here, in_process

DEMO = str(resources.files("microcompact") / "data" / "demo_transcript.jsonl")
IMPORT = ("import", DEMO, "--from", "openai")


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


def link_to(target: Path, folder: Path) -> Path:
    link = folder / "link.out"
    link.symlink_to(target)
    return link


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


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


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What import --out holds when it is a plain new file."""
    tmp = tmp_path_factory.mktemp("import-reference")
    out = tmp / "reference.jsonl"
    result = in_process(tmp, tmp / "home", *IMPORT, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize(("make", "says", "kind"), [case[1:] for case in NOT_FILES], ids=[c[0] for c in NOT_FILES])
def test_import_out_refuses_what_is_not_a_regular_file(
    run_cli: Cli, home: Path, tmp_path: Path, make: Make, says: str, kind: Callable[[int], bool]
) -> None:
    target = make(tmp_path)
    result = run_cli(home, *IMPORT, "--out", str(target))
    one_line_error(result, f"--out {target}: ", says, "not a regular file")
    assert result.stdout == ""
    assert kind(os.stat(target).st_mode)  # left as it was: still a device, a FIFO, a folder
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_import_out_refuses_a_socket(run_cli: Cli, home: Path, unix_socket: Path) -> None:
    one_line_error(run_cli(home, *IMPORT, "--out", str(unix_socket)), f"--out {unix_socket}: is a socket")
    assert stat.S_ISSOCK(os.stat(unix_socket).st_mode)


def test_import_out_through_a_symlink_writes_its_target_and_says_so(
    run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "imported.jsonl"
    target.write_text("old\n", encoding="utf-8")
    link = link_to(target, tmp_path)
    result = run_cli(home, *IMPORT, "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert f"--out {link} is a symlink: writing through it to {target}" in result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text(encoding="utf-8") == reference
    assert all(json.loads(line) for line in reference.splitlines())


def test_import_out_through_a_dangling_symlink_creates_its_target(
    run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    target = tmp_path / "not-yet.jsonl"
    link = link_to(target, tmp_path)
    result = run_cli(home, *IMPORT, "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and target.read_text(encoding="utf-8") == reference


def test_import_out_replaces_a_regular_file_by_a_rename_keeping_its_mode(
    run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n", encoding="utf-8")
    out.chmod(0o640)
    before = os.stat(out).st_ino
    keep = tmp_path / "hardlink"
    os.link(out, keep)  # the old inode, as a reader holding it open would still see it
    result = run_cli(home, *IMPORT, "--out", str(out))
    assert result.returncode == 0 and "symlink" not in result.stderr, result.stderr
    assert os.stat(out).st_ino != before and keep.read_text(encoding="utf-8") == "old\n"
    assert out.read_text(encoding="utf-8") == reference
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_import_out_still_creates_a_missing_folder_and_dash_is_stdout(
    run_cli: Cli, home: Path, tmp_path: Path, reference: str
) -> None:
    nested = tmp_path / "new" / "deeper" / "t.jsonl"
    result = run_cli(home, *IMPORT, "--out", str(nested))
    assert result.returncode == 0, result.stderr
    assert nested.read_text(encoding="utf-8") == reference
    dash = run_cli(home, *IMPORT, "--out", "-")
    assert dash.returncode == 0 and dash.stdout == reference and not Path("-").exists()


def test_write_jsonl_to_a_path_is_file_only_when_it_writes(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    for target, says in ((Path("/dev/null"), "character device"), (fifo(tmp_path), "FIFO"), (tmp_path, "folder")):
        with pytest.raises(NotAFile, match=says):
            write_jsonl(messages, target)  # a FIFO would block an open(); it is refused before any open
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    out = tmp_path / "ok.jsonl"
    assert (
        write_jsonl(iter(messages), out) == 1
        and out.read_text(encoding="utf-8") == '{"role": "user", "content": "hi"}\n'
    )


# ---------------------------------------------------------------------- plots, renamed into place


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("telemetry")
    log = tmp / "agent.log"
    result = in_process(
        tmp, tmp / "home", "replay", str(turns_file(tmp)), "--context-limit", "20000", "--log", str(log)
    )
    assert result.returncode == 0, result.stderr
    return log


def replaced_by_a_png(path: Path, run: Callable[[], object]) -> None:
    path.write_bytes(b"old")
    before = os.stat(path).st_ino
    keep = path.parent / "old-inode"
    os.link(path, keep)
    result = run()
    assert getattr(result, "returncode", None) == 0, getattr(result, "stderr", result)
    assert path.read_bytes().startswith(b"\x89PNG") and os.stat(path).st_ino != before
    assert keep.read_bytes() == b"old"  # the old file was renamed over, never written in place
    assert not [p for p in path.parent.iterdir() if ".tmp" in p.name]


def test_report_plot_replaces_a_regular_file_by_a_rename(
    run_cli: Cli, home: Path, tmp_path: Path, telemetry: Path
) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "occupancy.png"
    replaced_by_a_png(plot, lambda: run_cli(home, "report", str(telemetry), "--plot", str(plot)))


@pytest.fixture(scope="module")
def first_turn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo's first turn (106 messages, up to its second user message): what a plot is written from
    matters here, not how long the five replays of --compare take."""
    path = tmp_path_factory.mktemp("first-turn") / "first-turn.jsonl"
    lines = Path(DEMO).read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:106]), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_compare_plot_replaces_a_regular_file_by_a_rename(
    run_cli: Cli, home: Path, tmp_path: Path, first_turn: str
) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "compare.png"
    compare = ("replay", first_turn, "--context-limit", "50000", "--compare")
    replaced_by_a_png(plot, lambda: run_cli(home, *compare, "--plot", str(plot)))


def test_compare_plot_without_a_suffix_is_written_at_that_path(
    run_cli: Cli, home: Path, tmp_path: Path, first_turn: str
) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "occupancy"
    result = run_cli(home, "replay", first_turn, "--context-limit", "50000", "--compare", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "mchome") == ["occupancy"]  # not occupancy.png
