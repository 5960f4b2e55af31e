"""Invariants checked around every batch compaction on the real transcripts in shared/transcripts/normalized
(micro off, and micro -> batch -> micro interleaved), and replays of the longest one.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import marker_count, marker_kind
from microcompact.replay import load_transcript, replay, summary_json
from microcompact.session import Session
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.telemetry import parse_line
from support.batch_helpers import (
    LONGEST,
    TRANSCRIPTS,
    Checked,
    check_markers,
    config,
    counter,
    run_generated,
)

# --------------------------------------------------------------------------- real transcripts


def real_transcripts() -> list[Path]:
    return sorted(TRANSCRIPTS.glob("*.jsonl"))


@pytest.fixture(scope="module")
def longest() -> list[dict[str, Any]]:
    if not LONGEST.exists():
        pytest.skip(f"{LONGEST} not available")
    return load_transcript(LONGEST)


@pytest.mark.parametrize("path", real_transcripts(), ids=lambda p: p.stem)
@pytest.mark.parametrize("micro", [False, True], ids=["batch-only", "micro+batch"])
def test_real_transcripts_keep_every_invariant(path: Path, micro: bool) -> None:
    messages = load_transcript(path)
    total = sum(counter().count_message(m) for m in messages)
    limit = max(8192, total // 3)  # threshold at 1/6 of the transcript: several batch compactions
    cfg = config(limit, protect_first_n=3, micro_compact=micro)
    summ = ExtractiveSummarizer(counter().count_text)
    s, checked = run_generated(messages, cfg, summ, set(), None, unique_lines=False)
    if micro and not checked.results:
        # a short session that micro-compaction alone kept under the threshold: nothing for batch to do
        assert s.micro.state.passes_total >= 1 and s.tokens < (cfg.threshold_tokens() or 0)
        return
    assert checked.results, "the threshold was never reached"
    # (or the middle held too little to be worth a summarizer call: low_yield, issue 8.7's convergence)
    assert s.batch.compactions >= 1 or {"pruned", "low_yield"} & set(checked.outcomes())
    out = s.transcript
    if not checked.folded:
        assert user_message_errors(messages, out) == []
    assert role_sequence_errors(out) == [] or role_sequence_errors(messages)
    for r in checked.results:
        if r.changed and r.record["tokens_after"] > cfg.threshold_tokens():
            assert r.record["still_over_threshold"]


@pytest.mark.parametrize("path", real_transcripts(), ids=lambda p: p.stem)
def test_real_transcripts_at_32k_keep_every_invariant(path: Path) -> None:
    """A 32K window, micro on (the small-window case of issue 8.7): every batch in time order (check_batch),
    at most batch_max_calls summarizer calls each."""
    messages = load_transcript(path)
    cfg = config(32_000, protect_first_n=3, micro_compact=True)
    s, checked = run_generated(
        messages, cfg, ExtractiveSummarizer(counter().count_text), set(), None, unique_lines=False
    )
    if not checked.folded:
        assert user_message_errors(messages, s.transcript) == []
    assert role_sequence_errors(s.transcript) == [] or role_sequence_errors(messages)
    for r in checked.results:
        assert (r.record.get("summarizer_calls") or 0) <= cfg.compression.batch_max_calls


def test_replay_longest_without_micro_via_cli(
    longest: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from microcompact.cli import app

    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path))  # no developer config.yaml

    out_file = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(LONGEST),
            "--no-micro",
            "--json",
            "--context-limit",
            "40000",
            "--log",
            str(tmp_path / "agent.log"),
            "--out",
            str(out_file),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["micro_compact"] is False and summary["micro_passes_per_batch"] is None
    assert summary["batch_compactions"] >= 3
    assert summary["passes"] == 0 and summary["outcomes"] == {}
    assert sum(summary["batch_outcomes"].values()) >= summary["batch_compactions"]
    assert summary["final_tokens"] < summary["uncompacted_tokens"] // 4
    final = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert user_message_errors(longest, final) == []
    assert role_sequence_errors(final) == []
    kinds = [marker_kind(m) for m in final]
    assert marker_count(final, "batch") >= 1 and marker_count(final, "micro") == 0
    assert not any(a == b == "batch" for a, b in itertools.pairwise(kinds))  # user messages separate the runs
    log = (tmp_path / "agent.log").read_text()
    records = [parse_line(line) for line in log.splitlines() if "batch compaction telemetry" in line]
    assert len(records) == sum(summary["batch_outcomes"].values())


def test_replay_longest_without_micro_checks_every_batch(longest: list[dict[str, Any]]) -> None:
    cfg = parse_config({"compression": {"micro_compact": False}, "model": {"context_length": 40_000}})
    s = Session(cfg, session_id="longest")
    checked = Checked(s.batch, cfg)
    stats = replay(longest, s)
    summary = summary_json(stats, s)
    assert summary["batch_compactions"] >= 3 and s.micro.state.passes_total == 0
    assert len(checked.results) == len(stats.batches)
    assert user_message_errors(longest, s.transcript) == []
    assert summary["peak_tokens"] < cfg.model.context_length


def test_replay_longest_with_micro_reports_passes_per_batch(longest: list[dict[str, Any]]) -> None:
    cfg = parse_config(
        {"compression": {"micro_compact": True, "tokenizer": "estimate"}, "model": {"context_length": 30_000}}
    )
    s = Session(cfg, session_id="longest-micro")
    checked = Checked(s.batch, cfg)
    stats = replay(longest, s, on_message=lambda i: check_markers(s, f"message {i}", unique_lines=False))
    summary = summary_json(stats, s)
    per_batch = summary["micro_passes_per_batch"]
    assert isinstance(per_batch, list) and len(per_batch) == len(
        [r for r in checked.results if r.outcome in ("compacted", "user_floor_exceeded", "fallback")]
    )
    assert summary["passes"] > 0
    assert user_message_errors(longest, s.transcript) == []
