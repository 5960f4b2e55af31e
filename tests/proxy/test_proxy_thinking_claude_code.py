"""Claude Code (the pinned npm package) against an upstream that binds thinking blocks to their prefix.

Straight to the signing upstream, Claude Code passes (so the upstream is right: an append-only client
never breaks a binding). Through ``microcompact serve`` at a 64K window, a 40-step Bash task with adaptive
thinking: no request refused, compaction still happens (markers upstream, the largest prompt at most half
the window), one stored session (no forks), the first prompt verbatim in every request. The figures are
printed (``pytest -s``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import local_http
from support.anthropic_contract import marker_texts
from support.claude_code import run_claude, unavailable_reason
from support.numbered_steps import NumberedSteps
from support.serve_process import ServeProcess, run_cli
from upstream.signing import SigningUpstream

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

PROMPT = "Run the numbered steps with the Bash tool until they are done."
STEPS = 40
LINES = 1000  # 8 KB of output a step
CONTEXT_LIMIT = 65_536


def thinking_blocks(messages: list[dict]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") in ("thinking", "redacted_thinking")
    )


def test_claude_code_straight_to_the_signing_upstream_is_never_refused(tmp_path: Path) -> None:
    with SigningUpstream(NumberedSteps("d", 8, lines=LINES)) as upstream:
        run = run_claude(upstream.base_url, PROMPT, workdir=tmp_path / "work", home=tmp_path / "home")
        verdicts = [v for _, v in upstream.verdicts]
    assert run.ok and run.result is not None, run.stderr or run.stdout
    assert run.result["result"] == "Run d: all steps are done."
    assert upstream.refused() == []
    assert sum(v.checked for v in verdicts) > 0, "Claude Code sent its thinking back"
    assert all(not v.invalid for v in verdicts)


def test_claude_code_through_serve_is_never_refused_and_still_compacted(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    with SigningUpstream(NumberedSteps("t", STEPS, lines=LINES)) as upstream:
        options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT))
        served = ServeProcess(tmp_path / "mchome", *options, "--log", str(tmp_path / "proxy.log")).start()
        try:
            run = run_claude(served.base_url, PROMPT, workdir=tmp_path / "work", home=tmp_path / "home", timeout=900)
            metrics = served_metrics(served.base_url)
            assert served.stop() == 0
        finally:
            served.kill()
        requests = upstream.generation_requests()
        refused = upstream.refused()
    assert run.ok and run.result is not None, run.stderr or run.stdout
    assert run.result["result"] == "Run t: all steps are done."
    work = [r for r in requests if r.body.get("tools")]
    compacted = [r for r in work if marker_texts(r.messages)]
    peak = max(
        sum(r.usage.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        for r in work
        if r.usage
    )
    listed = run_cli(tmp_path / "mchome", "sessions", "list", "--db", str(db))
    session_id = run.result["session_id"]
    removed = metric(metrics, 'microcompact_thinking_blocks_total{action="removed"}')
    stripped = metric(metrics, 'microcompact_thinking_refusals_retried_total{retry="stripped"}')
    own = metric(metrics, 'microcompact_thinking_refusals_retried_total{retry="client"}')
    forks = listed.stdout.count(session_id + "~")
    print(
        f"\nClaude Code through serve at {CONTEXT_LIMIT}: {len(requests)} upstream requests, {len(refused)} refused, "
        f"{len(compacted)} compacted, peak prompt {peak} tokens, thinking blocks removed {removed}, "
        f"refusals retried {stripped:g} stripped + {own:g} with the client's own, forks {forks}"
    )
    assert refused == []
    assert all(r.status == 200 for r in requests)
    assert len(compacted) >= STEPS // 4, "compaction still happens"
    assert peak <= CONTEXT_LIMIT // 2
    assert removed > 0
    assert listed.returncode == 0 and session_id in listed.stdout and f"{session_id}~" not in listed.stdout
    for r in work:
        first = r.messages[0]
        texts = [first["content"]] if isinstance(first["content"], str) else [b.get("text") for b in first["content"]]
        assert PROMPT in texts, "the first prompt goes out verbatim"


def served_metrics(base_url: str) -> str:

    return local_http.get(f"{base_url}/metrics", timeout=10).text


def metric(page: str, name: str) -> float:
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0
