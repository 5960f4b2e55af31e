"""``serve --api-key`` that cannot work is one line and exit 2 before anything listens: an empty key (from
``--api-key "$UNSET"`` or an empty MICROCOMPACT_PROXY_KEY) used to serve with no key at all, silently; a key
with spaces around it or outside printable ASCII could never match the header a client sends."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.serve_process import CLI, cli_env


def serve(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**cli_env(home), **(env or {})}
    command = [*CLI, "serve", "--port", "0", "--db", str(home / "s.db"), *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=20, check=False)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [  # a serve started for each; make test runs one key of each message, CI the other spellings as well
        pytest.param(["--api-key", ""], None, "--api-key is empty", id="empty"),
        pytest.param(["--api-key", "   "], None, "--api-key is empty", id="blank", marks=pytest.mark.slow),
        pytest.param([], {"MICROCOMPACT_PROXY_KEY": ""}, "MICROCOMPACT_PROXY_KEY is set to nothing", id="empty-env"),
        pytest.param(["--api-key", " key-with-space"], None, "--api-key has spaces around it", id="spaces"),
        pytest.param(["--api-key", "k\u00e9y"], None, "--api-key must be printable ASCII", id="non-ascii"),
        pytest.param(
            ["--api-key", "line\nbreak"],
            None,
            "--api-key must be printable ASCII",
            id="newline",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_key_that_cannot_work_is_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str] | None, says: str
) -> None:
    result = serve(tmp_path / "home", *args, env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-1000:]
    assert len(lines) == 1 and says in lines[0] and "listening" not in result.stderr, lines
    assert not (tmp_path / "home" / "s.db").exists(), "nothing was opened"
