"""``microcompact report`` puts recall beside cost: each proxy session's recall lines summed beside its bill,
the totals in their own table, and what folds kept because it was in use; from real log files, as the
command line reads them, and from a real ``serve``'s log."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from microcompact.bill.cost_line import CostLine
from microcompact.recall.watch import RecallLine
from microcompact.telemetry import format_line, log_telemetry
from support.cli_runs import RUNNERS, from_here
from support.proxy_server import ProxyServer
from support.serve_process import run_cli
from upstream import Reply, ScriptedUpstream, Text, ToolCall, text

PREFIX = "2026-05-01 10:00:{:02d},000 INFO microcompact.telemetry: "


def micro(second: int, sid: str, kept: int | None, kept_tokens: int = 0) -> str:
    """A pass line; ``kept`` None: a fold by age, which says nothing of what was in use."""
    record = {
        "event": "micro_compaction",
        "session_id": sid,
        "outcome": "absorbed",
        "tokens_before": 9000,
        "tokens_after": 5000,
        "tokens_delta": -4000,
        "exchange_tokens": 4200,
        "passes_total": 1,
        "tokens_saved_total": 4000,
        "duration_ms": 20.0,
        "occupancy_pct": 40.0,
    }
    if kept is not None:
        record |= {"kept_in_use_iterations": kept, "kept_in_use_tokens": kept_tokens}
    return PREFIX.format(second) + format_line("micro", record)


def cost(second: int, sid: str) -> str:
    line = CostLine(sid, "anthropic", 5000, 9000, 4000, 1000, False, 0.01, 0.03)
    return PREFIX.format(second) + line.text()


def recall(second: int, sid: str, targets: int, present: int) -> str:
    return PREFIX.format(second) + RecallLine(sid, targets, present).text()


def log_of(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "agent.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def proxy_log(tmp_path: Path) -> Path:
    return log_of(
        tmp_path,
        [
            micro(1, "alpha", 2, 3000),
            cost(2, "alpha"),
            recall(3, "alpha", 3, 3),
            micro(4, "alpha", 0, 0),
            cost(5, "alpha"),
            recall(6, "alpha", 1, 0),
            micro(7, "beta2", 1, 800),
            cost(8, "beta2"),
            recall(9, "beta2", 4, 4),
            'proxy recall telemetry: {"event": "proxy_recall", "session_id": "beta2", "targets": 1, "present": 2}',
        ],
    )


@pytest.fixture(params=RUNNERS)
def cli(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``microcompact ARGS``: in-process in the fast suite, a real process in the slow one (support.cli_runs);
    tests/server/test_figures_agree.py runs ``report`` as a real process in the fast suite."""
    return from_here(request.param)


def test_recall_stands_beside_each_sessions_cost(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path, proxy_log: Path
) -> None:
    shown = cli(tmp_path / "home", "report", "--per-session", str(proxy_log))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "Recall (proxy sessions)" in out
    assert "87.5% of 8 identifiers the agent's next replies took from tool results" in out
    assert "1 of 3 replies that used such an identifier" in out
    costs = out[out.index("Cost against not compacting") :]
    rows = {line.split("│")[1].strip(): line for line in costs.splitlines() if line.startswith(("│ alpha", "│ beta2"))}
    assert "75.0%" in rows["alpha"] and "+0.0400" in rows["alpha"]
    assert "100.0%" in rows["beta2"]
    assert "3 tool iteration(s), 3,800 tokens, left in place by 2 fold(s)" in out
    per_session = out[out.index("Per session") : out.index("Recall (proxy")]
    alpha = next(line for line in per_session.splitlines() if "alpha" in line)
    assert alpha.rstrip(" │").endswith("3,000")


def test_json_has_the_recall_totals_and_each_cost_its_recall(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path, proxy_log: Path
) -> None:
    shown = cli(tmp_path / "home", "report", "--json", str(proxy_log))
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert {k: data["recall"][k] for k in ("replies", "targets", "present", "recall_pct", "losing")} == {
        "replies": 3,
        "targets": 8,
        "present": 7,
        "recall_pct": 87.5,
        "losing": 1,
    }
    by_id = {c["session_id"]: c for c in data["cost"]}
    assert by_id["alpha"]["recall"] == {
        "session_id": "alpha",
        "replies": 2,
        "targets": 4,
        "present": 3,
        "recall_pct": 75.0,
        "losing": 1,
    }
    assert data["tokens"]["kept_in_use"] == {"passes": 2, "iterations": 3, "tokens": 3800, "logged": 3}
    kept = {s["session_id"]: s["kept_in_use"] for s in data["per_session"]}
    assert kept["beta2"] == {"passes": 1, "iterations": 1, "tokens": 800, "logged": 1}
    assert "kept_in_use" in data["definitions"] and "recall" in data["definitions"]


def test_a_library_log_says_nothing_of_recall(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    log = log_of(tmp_path, [micro(1, "lib", 0, 0)])
    shown = cli(tmp_path / "home", "report", str(log))
    assert shown.returncode == 0, shown.stderr
    assert "Recall" not in shown.stdout and "Cost against" not in shown.stdout
    assert "nothing (1 fold(s) by use left no tool iteration in place)" in shown.stdout
    data = json.loads(cli(tmp_path / "home", "report", "--json", str(log)).stdout)
    assert "recall" not in data and "cost" not in data


def test_passes_by_age_say_nothing_of_what_was_in_use(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    shown = cli(tmp_path / "home", "report", str(log_of(tmp_path, [micro(1, "aged", None)])))
    assert shown.returncode == 0, shown.stderr
    assert "not logged: the folds went by age (only folds by use, micro_compact_fold_by_use, log it)" in shown.stdout


# ------------------------------------------------------------------ through a real serve


TOOLS = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object", "properties": {}}}]


def step(n: int) -> Reply:
    """Step ``n``'s reply quotes what step ``n - 1`` printed, as an agent carries a value on."""
    quoted = f"step_{n - 1}_checksum is {n - 1}{n - 1:04d}. " if n > 1 else ""
    return Reply((Text(f"{quoted}Step {n}."), ToolCall("Bash", {"command": f"seq {n}"})))


def loop(proxy: ProxyServer, upstream: ScriptedUpstream, steps: int) -> None:
    upstream.enqueue(*[step(n) for n in range(1, steps + 1)], text("done"))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for n in range(1, steps + 2):
            body = {"model": "m", "max_tokens": 100, "tools": TOOLS, "messages": messages}
            answer = client.post("/v1/messages", json=body, headers={"x-session-id": "recall-loop"})
            assert answer.status_code == 200, answer.text
            content = answer.json()["content"]
            messages.append({"role": "assistant", "content": content})
            calls = [b for b in content if b["type"] == "tool_use"]
            if not calls:
                return
            output = f"step_{n}_checksum: {n}{n:04d}\n" + "\n".join(f"line {i} " + "x" * 60 for i in range(120))
            result = {"type": "tool_result", "tool_use_id": calls[0]["id"], "content": output}
            messages.append({"role": "user", "content": [result]})
            proxy.settle()


@pytest.mark.slow
def test_a_serve_log_gives_recall_beside_cost(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    handler = log_telemetry(log)
    try:
        with (
            ScriptedUpstream(min_cacheable=0) as upstream,
            ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=20_000) as proxy,
        ):
            loop(proxy, upstream, 12)
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    written = log.read_text()
    assert "step_3_checksum" not in written and "30003" not in written, "the log holds no identifier"
    data = json.loads(run_cli(tmp_path / "home", "report", "--json", str(log)).stdout)
    # steps 2-12 quote two values each (the name and the number) that step n - 1 printed; "done" quotes none
    assert data["recall"]["replies"] == 11 and data["recall"]["targets"] == 22
    assert data["recall"]["present"] == 22, "the step before is never folded away"
    (session,) = data["cost"]
    assert session["recall"]["targets"] == 22 and session["requests"] == 13
