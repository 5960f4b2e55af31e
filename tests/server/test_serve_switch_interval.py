"""``serve --switch-interval``: the interpreter's thread switch interval while the proxy serves (a request
waits at most that long for a pass computing on a worker thread at each hand-off), checked up front and put
back when serving ends."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.server import run
from microcompact.server.run import SWITCH_INTERVAL_MS, ServeOptions, serve


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "mchome"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    return home


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """uvicorn's ``run`` replaced by one that notes the switch interval it would serve with and returns."""
    intervals: list[float] = []

    def noted(self: Any, sockets: Any = None) -> None:
        intervals.append(sys.getswitchinterval())
        for sock in sockets or ():
            sock.close()

    monkeypatch.setattr(run.uvicorn.Server, "run", noted)
    return intervals


@pytest.mark.parametrize("value", ["0", "0.01", "101", "-1", "nan", "inf"])
def test_an_interval_out_of_range_is_a_one_line_error(home: Path, tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--port", "0", "--db", str(tmp_path / "s.db"), "--switch-interval", value]
    )
    assert result.exit_code == 2
    assert "--switch-interval: expected 0.05 to 100 ms" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "expected_ms"), [([], SWITCH_INTERVAL_MS), (["--switch-interval", "0.5"], 0.5)])
def test_serve_runs_with_the_interval_and_puts_it_back(
    home: Path, tmp_path: Path, seen: list[float], args: list[str], expected_ms: float
) -> None:
    before = sys.getswitchinterval()
    result = CliRunner().invoke(app, ["serve", "--port", "0", "--db", str(tmp_path / "s.db"), *args])
    assert result.exit_code == 0, result.stderr
    assert len(seen) == 1 and math.isclose(seen[0], expected_ms / 1000, rel_tol=1e-6)
    assert sys.getswitchinterval() == before


def test_the_default_is_below_pythons(home: Path, tmp_path: Path, seen: list[float]) -> None:
    """The point of the setting: shorter waits than the interpreter's own 5 ms."""
    serve(ServeOptions(port=0, db=str(tmp_path / "s.db")), say=lambda line: None)
    assert seen and seen[0] < 0.005
