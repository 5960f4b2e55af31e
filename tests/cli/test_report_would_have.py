"""``microcompact report`` shows what rewriting would have cost an audited conversation (``serve --audit``) and
saved against its requests as sent: the same cost lines' ``would_have`` dollars the page and the headers sum;
a table of the audited sessions beside the cost table; none when no session was audited."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from microcompact.bill.cost_line import CostLine
from microcompact.telemetry import format_line
from support.cli_runs import RUNNERS, from_here

PREFIX = "2026-05-01 10:00:{:02d},000 INFO microcompact.telemetry: "


def _log(tmp_path: Path, lines: list[CostLine]) -> Path:
    """A serve log: one micro pass (report reads a log that has one), then the cost lines."""
    path = tmp_path / "proxy.log"
    fold = {"event": "micro_compaction", "session_id": lines[0].session_id, "outcome": "absorbed", "mode": "turn"}
    fold |= {"tokens_before": 9000, "tokens_after": 5000, "tokens_delta": -4000, "passes_total": 1}
    text = PREFIX.format(0) + format_line("micro", fold) + "\n"
    text += "".join(PREFIX.format(n + 1) + line.text() + "\n" for n, line in enumerate(lines))
    path.write_text(text)
    return path


def _audited(sid: str, would_have: float) -> CostLine:
    return CostLine(sid, "anthropic", 9000, 9000, 4000, 1000, False, 0.03, 0.03, 40.0, would_have=would_have)


@pytest.fixture(params=RUNNERS)
def cli(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``microcompact ARGS``: in-process in the fast suite, a real process in the slow one (support.cli_runs);
    tests/server/test_figures_agree.py runs ``report`` as a real process in the fast suite."""
    return from_here(request.param)


def test_an_audited_session_shows_what_rewriting_would_have_cost_and_saved(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    rewritten = CostLine("rewritten-one", "anthropic", 5000, 9000, 4000, 1000, True, 0.01, 0.03)
    log = _log(tmp_path, [_audited("audited-one", 0.012), _audited("audited-one", 0.0105), rewritten])
    shown = cli(tmp_path / "home", "report", str(log))
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout[shown.stdout.index("Audit: what rewriting would have cost") :]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│ ")]
    assert rows == [["audited-one", "anthropic", "2", "0.0600", "0.0225", "+0.0375"]]  # not the rewritten one

    data = json.loads(cli(tmp_path / "home", "report", "--json", str(log)).stdout)
    by_id = {c["session_id"]: c for c in data["cost"]}
    assert by_id["audited-one"]["would_have"] == 0.0225 and by_id["audited-one"]["would_have_saved"] == 0.0375
    assert by_id["rewritten-one"]["would_have"] is None


def test_no_audited_session_no_would_have_column(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    log = _log(tmp_path, [CostLine("s", "anthropic", 5000, 9000, 4000, 1000, True, 0.01, 0.03)])
    shown = cli(tmp_path / "home", "report", str(log))
    assert shown.returncode == 0, shown.stderr
    assert "Cost against not compacting" in shown.stdout and "Audit:" not in shown.stdout
