"""A stdout that cannot take the output, as a user meets it (real processes): ``> /dev/full`` (a full disk)
is one line on stderr and exit 2, a reader that leaves early (``| head -c 10``) a quiet exit 1; both used to
end in a traceback (or the interpreter's "Exception ignored" at exit)."""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path

import pytest

from support.serve_process import CLI, cli_env

DEMO = str(resources.files("microcompact") / "data" / "demo_transcript.jsonl")
COMMANDS = {
    "replay-json": ["replay", DEMO, "--context-limit", "20000", "--json"],
    "replay-table": ["replay", DEMO, "--context-limit", "20000"],
    "import": ["import", DEMO, "--from", "openai"],  # 130 KB of JSONL: more than a pipe holds
    "help": ["--help"],
}


@pytest.mark.parametrize(  # make test: the JSON replay; CI also its table (the same replay, a second each)
    "command", [pytest.param(c, marks=pytest.mark.slow) if c == "replay-table" else c for c in sorted(COMMANDS)]
)
def test_a_full_stdout_is_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*CLI, *COMMANDS[command]],
            env=cli_env(tmp_path / "home"),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    errors = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert errors == ["error: cannot write to stdout: No space left on device; the output is incomplete"], errors
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


def test_a_reader_that_leaves_is_a_quiet_exit(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*CLI, *COMMANDS["import"]],
        env=cli_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(10)
    process.stdout.close()  # as `| head -c 10` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1, stderr[-2000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr and "BrokenPipe" not in stderr, stderr
