"""A program using the library and the ``report`` command meet in one log: ``microcompact.log_telemetry()``."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

import microcompact
from microcompact import Session, parse_config
from microcompact.replay import load_transcript, replay
from microcompact.telemetry import default_log_path, parse_line
from support.import_checks import cli

DEMO = Path(str(resources.files("microcompact") / "data" / "demo_transcript.jsonl"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$MICROCOMPACT_HOME`` in the test's folder; the handlers a test adds are removed after it."""
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "mchome"))
    logger = logging.getLogger("microcompact")
    before, level = list(logger.handlers), logger.level
    yield tmp_path / "mchome"
    for handler in [h for h in logger.handlers if h not in before]:
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(level)


def _run_a_session() -> int:
    """What a program does with the library: a session with micro-compaction; returns its passes."""
    cfg = parse_config({"compression": {"micro_compact": True}, "model": {"context_length": 8192}})
    stats = replay(load_transcript(DEMO), Session(cfg, session_id="library-app"))
    return sum(stats.outcomes.values())


def _telemetry(log: Path) -> list[dict]:
    records = [parse_line(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return [record for kind, record in filter(None, records) if kind == "micro"]


def test_the_default_log_is_where_report_looks(home: Path) -> None:
    assert default_log_path() == home / "logs" / "agent.log"
    handler = microcompact.log_telemetry()
    assert microcompact.log_telemetry() is handler  # once per file: no line is written twice
    passes = _run_a_session()
    assert passes > 0
    micro = _telemetry(default_log_path())
    assert len(micro) == passes and {r["session_id"] for r in micro} == {"library-app"}
    code, stdout, stderr = cli("report", "--json")  # no file given: the default log
    assert code == 0, stderr
    assert '"library-app"' in stdout
    # The log names sessions and files: it and its folder are created for their owner only.
    assert stat.S_IMODE(default_log_path().stat().st_mode) == 0o600
    assert stat.S_IMODE(default_log_path().parent.stat().st_mode) == 0o700


def test_log_telemetry_takes_another_file(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "app" / "compaction.log"
    microcompact.log_telemetry(elsewhere)
    passes = _run_a_session()
    assert len(_telemetry(elsewhere)) == passes > 0
    assert not default_log_path().exists()
    code, _, stderr = cli("report", elsewhere)
    assert code == 0, stderr


def test_without_it_report_says_how_to_get_telemetry(home: Path) -> None:
    _run_a_session()  # the library only logs; nothing asked for a file
    assert not default_log_path().exists()
    code, stdout, stderr = cli("report")
    assert code == 1 and stdout == ""
    assert "microcompact.log_telemetry()" in stderr and str(default_log_path()) in stderr.replace("\n", "")
