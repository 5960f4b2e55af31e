"""serve's own recall lines on a shared Claude Code session agree with ``recall.py`` run on what serve
forwarded (``bench/recall_serve.py``'s run: a real ``serve`` process at its defaults), reply for reply."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from microcompact.recall import RecallTotals, reply_targets, request_recall
from microcompact.report.recall import read_recall
from support.paths import NORMALIZED

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from recall_serve import ServeRun  # noqa: E402

SESSION = "cc_fa812bfe"


@pytest.mark.slow
def test_serves_recall_lines_are_recall_py_on_what_it_forwarded() -> None:
    path = NORMALIZED / f"{SESSION}.jsonl"
    if not path.exists():
        pytest.skip(f"shared transcripts not found in {NORMALIZED}")
    messages = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    targets = reply_targets(messages)
    last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
    with ServeRun(200_000) as run:
        results = [request_recall(i, targets[i], prompt) for i, prompt in run.prompts(SESSION, "anthropic", messages)]
    # the reply to the last request is never measured: no request brings it
    expected = RecallTotals.of(r for r in results if r.index != last and r.targets)
    assert expected.present < expected.targets, "serve's folds lost something on this session"
    try:
        (session,) = read_recall([run.work / "proxy.log"])
    finally:
        shutil.rmtree(run.work, ignore_errors=True)
    assert (session.replies, session.targets, session.present, session.losing) == (
        expected.requests,
        expected.targets,
        expected.present,
        expected.losing,
    )
