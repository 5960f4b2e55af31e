"""Inputs that never end and a log nobody reads, as a user runs them (real processes, memory capped so a
regression fails instead of filling the machine): ``replay /dev/zero`` and ``report /dev/urandom`` read until
memory ran out and ended in a traceback; ``--log FIFO`` with no reader blocked for ever. Each is now one line
and exit 2 at once; a pipe that is read (``<(...)``, a FIFO with a reader) still works."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
from importlib import resources
from pathlib import Path

import pytest

from support.serve_process import CLI, cli_env

DEMO = str(resources.files("microcompact") / "data" / "demo_transcript.jsonl")
MEMORY_CAP = 3 * 1024**3  # address space: plenty for a replay, far below what /dev/zero would take


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(home: Path, *args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=capped,
        **kwargs,  # type: ignore[arg-type]
    )


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# A process started for each (the check is the command's own, before it reads): make test runs /dev/zero.
DEVICES = ["/dev/zero", pytest.param("/dev/urandom", marks=pytest.mark.slow)]


@pytest.mark.parametrize("device", DEVICES)
def test_replay_of_an_endless_device_is_one_line(tmp_path: Path, device: str) -> None:
    result = run(tmp_path / "home", "replay", device, "--context-limit", "20000")
    one_line_error(result, f"TRANSCRIPT {device}: is a character device, not a file")


@pytest.mark.parametrize("device", DEVICES)
def test_report_of_an_endless_device_is_one_line(tmp_path: Path, device: str) -> None:
    one_line_error(run(tmp_path / "home", "report", device), f"LOGFILE {device}: is a character device")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["replay", DEMO, "--context-limit", "20000", "--config", "/dev/zero"], "--config"),
        (["replay", DEMO, "--context-limit", "20000", "--compare", "--pricing", "/dev/zero"], "--pricing"),
        (["serve", "--port", "0", "--config", "/dev/zero"], "--config"),
    ],
    ids=["replay-config", "compare-pricing", "serve-config"],
)
def test_an_endless_device_as_a_settings_file_is_one_line(tmp_path: Path, args: list[str], flag: str) -> None:
    one_line_error(run(tmp_path / "home", *args), f"{flag} /dev/zero: is a character device, not a file")


def test_a_log_fifo_that_nothing_reads_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "log.pipe"
    os.mkfifo(fifo)
    result = run(tmp_path / "home", "replay", DEMO, "--context-limit", "20000", "--log", str(fifo), timeout=30)
    one_line_error(result, f"--log {fifo}: is a FIFO (named pipe) that nothing reads")


@pytest.mark.slow
def test_a_log_fifo_with_a_reader_gets_the_whole_log(tmp_path: Path) -> None:
    fifo = tmp_path / "log.pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        with open(fifo, "rb") as pipe:  # blocks until the command opens the write end
            ready.set()
            received.append(pipe.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    opener = os.open(fifo, os.O_WRONLY)  # lets the reader's open return, as a waiting `cat FIFO` would
    assert ready.wait(10)
    try:
        result = run(tmp_path / "home", "replay", DEMO, "--context-limit", "20000", "--log", str(fifo))
    finally:
        os.close(opener)
    reader.join(30)
    assert result.returncode == 0, result.stderr[-2000:]
    assert received and b"micro" in received[0]


def test_a_transcript_from_a_pipe_still_replays(tmp_path: Path) -> None:
    reading, writing = os.pipe()
    feeder = threading.Thread(target=lambda: (os.write(writing, Path(DEMO).read_bytes()), os.close(writing)))
    feeder.start()
    try:
        result = run(tmp_path / "home", "replay", f"/dev/fd/{reading}", "--context-limit", "20000", pass_fds=(reading,))
    finally:
        feeder.join(10)
        os.close(reading)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "with micro" in result.stdout
