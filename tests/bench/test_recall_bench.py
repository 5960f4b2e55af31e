"""bench/recall.py's short cut on the shared Claude Code sessions: the rows keep the properties the measure
promises (the whole history loses nothing, a baseline at the whole prompt's budget is the whole prompt, a
baseline never exceeds its budget, a compacting row never sends more than the history)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from support.paths import NORMALIZED

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import recall  # noqa: E402
from recall_policies import Measure, at_budget, masked, truncated, uncompacted  # noqa: E402

SESSIONS = list(recall.SESSIONS)


@pytest.fixture(scope="module")
def quick() -> tuple[list[recall.SessionResult], dict[str, recall.DecayResult]]:
    if not all((NORMALIZED / f"{name}.jsonl").exists() for name in SESSIONS):
        pytest.skip(f"shared transcripts not found in {NORMALIZED}")
    return recall.run(SESSIONS, ["none", "inline", "truncation", "masking", "decay"], quick=True)


def rows(result: recall.SessionResult) -> dict[str, recall.RowResult]:
    return {r.name: r for r in result.rows}


def test_no_compaction_holds_every_target(quick: tuple[list[recall.SessionResult], object]) -> None:
    for session in quick[0]:
        none = rows(session)["no compaction"]
        assert none.totals.targets > 0 and none.totals.recall == 1.0 and none.totals.losing == 0
        assert none.stale == set()


def test_baselines_stay_within_the_budget_of_the_row_they_follow(
    quick: tuple[list[recall.SessionResult], object],
) -> None:
    for session in quick[0]:
        found = rows(session)
        inline, none = found["inline, serve's config"], found["no compaction"]
        assert all(inline.tokens[i] <= none.tokens[i] for i in none.tokens)
        for baseline in ("truncation", "masking"):
            row = found[f"{baseline} @ inline, serve's config"]
            assert row.tokens.keys() == inline.tokens.keys()
            head = none.tokens[min(none.tokens)]  # the first request's prompt is the head alone
            assert all(row.tokens[i] <= max(inline.tokens[i], head) for i in row.tokens)
            assert row.stale == set()  # a baseline writes nothing that could state an old state


def test_a_baseline_at_the_whole_prompts_budget_is_the_whole_prompt() -> None:
    messages, _ = recall.load(SESSIONS[0], recall.QUICK_MESSAGES)
    measure = Measure(messages)
    whole = dict(uncompacted(messages))
    budgets = {i: measure.tokens(p) for i, p in whole.items()}
    assert dict(at_budget(measure, budgets, truncated)) == whole
    assert dict(at_budget(measure, budgets, masked)) == whole
    smaller = dict(at_budget(measure, {i: b - 1 for i, b in budgets.items()}, truncated))
    later = [i for i in whole if len(whole[i]) > 3]
    assert all(len(smaller[i]) < len(whole[i]) for i in later)
    assert all(p[0] == messages[0] and (len(p) == 1 or p[1]["role"] != "tool") for p in smaller.values())


def test_the_decay_check_reports_what_it_planted(
    quick: tuple[list[recall.SessionResult], dict[str, recall.DecayResult]],
) -> None:
    facts = quick[1]["serve's config"]
    assert facts.planted == 3 and 0 <= facts.kept <= 3 and facts.folds > 0 and facts.steps <= 12


def test_the_tables_print(capsys: pytest.CaptureFixture[str]) -> None:
    if not (NORMALIZED / f"{SESSIONS[0]}.jsonl").exists():
        pytest.skip(f"shared transcripts not found in {NORMALIZED}")
    recall.main(["--quick", "--sessions", SESSIONS[0], "--rows", "none,truncation,inline"])
    out = capsys.readouterr().out
    assert f"## {SESSIONS[0]}" in out and "## total (1 sessions)" in out
    assert re.search(r"\nno compaction +\| +100\.0% +\| +0/31 ", out)
    with pytest.raises(SystemExit, match="unknown nothing"):
        recall.main(["--quick", "--rows", "nothing"])


def test_user_turns_a_route_joined_are_history_not_the_compactors_text() -> None:
    """Claude Code's own compaction summary, kept verbatim but joined with the user turns after it (as the
    Anthropic route sends them), states nothing for the compactor: no stale claim comes of it."""
    old = "def start_registry(config):  # the entry point"
    edit = {"file_path": "/w/lib/registry.py", "old_string": old, "new_string": "def boot_registry(config):"}
    raw = {"id": "c1", "type": "function", "function": {"name": "Edit", "arguments": json.dumps(edit)}}
    messages = [
        {"role": "user", "content": "rename the entry point"},
        {"role": "assistant", "content": "", "tool_calls": [raw]},
        {"role": "tool", "tool_call_id": "c1", "content": "updated"},
        {"role": "user", "content": f"This session is being continued. Summary:\n- {old}"},
        {"role": "user", "content": "<command-name>/compact</command-name>"},
        {"role": "assistant", "content": "Done."},
    ]
    measure = Measure(messages)
    joined = {"role": "user", "content": f"{messages[3]['content']}\n\n{messages[4]['content']}"}
    marker = {"role": "assistant", "content": f"[CONTEXT COMPACTION] earlier: {old}"}
    held = measure.row("joined", iter([(5, [messages[0], joined, messages[5]])]))
    assert measure.held(joined) and held.stale == set()
    written = measure.row("marker", iter([(5, [messages[0], marker, joined, messages[5]])]))
    assert not measure.held(marker) and len(written.stale) == 1
