"""Batch compaction at the threshold: prune, one-call summary, user floor, faults, anti-thrash, replay.

Three kinds of tests:

- hand-built transcripts, one behaviour per test (prune stubs, joined users, previous summary, user floor,
  bounded input, anti-thrash, telemetry);
- invariants checked around *every* batch compaction, on hypothesis-generated transcripts (``strategies.py``)
  and on the real transcripts in ``shared/transcripts/normalized`` (with micro-compaction off, and
  with micro -> batch -> micro interleaved);
- faults against the local chat-completions server (``chat_server`` fixture) through the real
  ``OpenAISummarizer``, with an injected clock so cooldowns cost no time.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from chat_server import ChatServer
from microcompact.batch import (
    SUMMARY_ALLOWANCE_TOKENS,
    BatchCompactor,
    BatchResult,
    Prune,
    plan_prune,
    shorten_arguments,
)
from microcompact.config import Config, parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import (
    META_KEY,
    content_text,
    is_marker,
    marker_body,
    marker_count,
    marker_kind,
    render_marker,
    render_micro_marker,
    to_api,
    user_texts,
)
from microcompact.replay import load_transcript, replay, summary_json
from microcompact.session import Session
from microcompact.summarizers import BATCH_PROMPT, BATCH_SECTIONS, ExtractiveSummarizer, OpenAISummarizer
from microcompact.telemetry import parse_line
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import protected_head, tail_start
from paths import NORMALIZED
from strategies import examples, head_of, same_head, transcripts, units

TRANSCRIPTS = NORMALIZED
LONGEST = TRANSCRIPTS / "cc_4d5611e5.jsonl"
KEY_ENV = "MICROCOMPACT_TEST_BATCH_KEY"
OPENAI_KEY = "sk-proj-" + "Qw8Er4Ty6Ui2Op0As5Df7Gh3Jk9Lz1Xc"  # fake; concatenated to keep scanners quiet
CHANGED = {"pruned", "compacted", "user_floor_exceeded", "fallback"}
COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def counter() -> TokenCounter:
    return TokenCounter(EstimateCounter())


def config(context_length: int | None = 20_000, aux: dict[str, Any] | None = None, **compression: Any) -> Config:
    """Batch on (the default), micro off unless asked; with 20K tokens the threshold is 10K, the tail 2K."""
    base = {"tokenizer": "estimate", "protect_first_n": 2, "min_tail_messages": 3}
    base.update(compression)
    data: dict[str, Any] = {"compression": base, "model": {"context_length": context_length}}
    if aux:
        data["auxiliary"] = {"compression": aux}
    return parse_config(data)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --------------------------------------------------------------------------- summarizers for tests


class Scribe:
    """Deterministic, bounded: the summary keeps the previous summary's last lines and adds one line per call.

    Records what every ``batch`` call got (previous summary, messages, focus) and every ``merge`` call.
    """

    def __init__(self, name: str = "scribe", keep: int = 4) -> None:
        self.name = name
        self.keep = keep
        self.batches: list[tuple[str, list[dict[str, Any]], str | None]] = []
        self.merges: list[list[dict[str, Any]]] = []

    def _digest(self, *parts: str) -> str:
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        got = units(messages)
        line = f"- batch {len(self.batches)}: {len(messages)} msgs #{self._digest(summary, *got)}"
        old = [ln for ln in summary.splitlines() if ln.startswith("- ")][-self.keep :]
        return "\n".join(["### Completed actions", *old, line])

    def merge(self, summary: str, exchange: list[dict]) -> str:
        self.merges.append(exchange)
        line = f"- micro {len(self.merges)}: {len(exchange)} msgs #{self._digest(summary, *units(exchange))}"
        old = [ln for ln in summary.splitlines() if ln.strip()][-self.keep :]
        return "\n".join([*old, line])

    def condense(self, summary: str, target_tokens: int) -> str:
        return "\n".join(summary.splitlines()[-2:])


class Failing(Scribe):
    """Every batch call raises; merges work."""

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        raise RuntimeError("summarizer down")


# --------------------------------------------------------------------------- hand-built transcripts


def call(cid: str, name: str = "Bash", **args: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args or {"command": "ls"})},
    }


def iteration(cid: str, output: str, *, name: str = "Bash", text: str | None = None, **args: Any) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": text if text is not None else f"running {cid}",
            "tool_calls": [call(cid, name, **args)],
        },
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def turn(n: int, iterations: int = 2, size: int = 200, user: str | None = None) -> list[dict[str, Any]]:
    """A user message, ``iterations`` Bash calls with ~``size``-word outputs, a final answer."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": user or f"request {n}: please continue"}]
    for k in range(iterations):
        cid = f"c{n}_{k}"
        msgs += iteration(cid, f"output {cid}\n" + "word " * size, command=f"make step{n}_{k}")
    msgs.append({"role": "assistant", "content": f"done {n}"})
    return msgs


def system() -> dict[str, Any]:
    return {"role": "system", "content": "You are a coding agent."}


def opening() -> list[dict[str, Any]]:
    """System prompt plus a first exchange: the protected head (``protect_first_n=2``)."""
    return [system(), {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"}]


def build(turns: int, **kw: Any) -> list[dict[str, Any]]:
    msgs = [system()]
    for n in range(turns):
        msgs += turn(n, **kw)
    return msgs


def strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if not k.startswith("_")}


# --------------------------------------------------------------------------- the invariant checker


def bounds(config: Config, ledger: Ledger) -> tuple[int, int]:
    cfg = config.compression
    h = protected_head(ledger.messages, ledger.tokens, config)
    t = tail_start(
        ledger.messages, ledger.tokens, config.tail_budget_tokens(), min_messages=cfg.min_tail_messages, floor=h
    )
    return h, t


def check_batch(
    config: Config, before: list[dict[str, Any]], h: int, t: int, ledger: Ledger, result: BatchResult
) -> None:
    """What must hold after one batch compaction (``before``/``h``/``t``: the transcript and bounds before it)."""
    after = ledger.messages
    rec = result.record
    where = f"batch outcome {result.outcome} ({ {k: rec.get(k) for k in ('tokens_before', 'tokens_after')} })"
    assert rec["event"] == "batch_compaction" and rec["outcome"] == result.outcome
    assert rec["tokens_before"] == sum(m["_tokens"] for m in before)
    assert rec["tokens_after"] == ledger.total == sum(ledger.tokens), where
    assert rec["messages_before"] == len(before) and rec["messages_after"] == len(after), where
    if result.outcome not in CHANGED:
        assert after == before, f"{where}: a batch that changed nothing must leave the transcript as it was"
        return
    # Head and tail untouched (same dicts, same order).
    n_tail = len(before) - t
    assert after[:h] == before[:h], f"{where}: head changed"
    assert after[len(after) - n_tail :] == before[t:], f"{where}: tail changed"
    # Valid conversation: pairing and role sequence, also for strict-alternation providers.
    strict = to_api(after, strict_alternation=True)
    if not role_sequence_errors(before):
        assert role_sequence_errors(after) == [], where  # (pairing included)
        assert role_sequence_errors(strict, strict_alternation=True) == [], where
    # Under the threshold, or the record says it is not.
    threshold = config.threshold_tokens()
    if threshold and ledger.total > threshold:
        assert rec.get("still_over_threshold") is True, f"{where}: over the threshold without saying so"
    # User messages verbatim and in order; folded ones only with the user floor (and then only the oldest).
    folded = rec.get("users_folded") or 0
    if folded:  # every fold is reported under its own outcome, also when the fallback wrote the summary
        assert result.outcome == "user_floor_exceeded", where
        middle_users = [i for i in range(h, t) if before[i].get("role") == "user"][:folded]
        expected = [m for i, m in enumerate(before) if i not in middle_users]
        assert user_message_errors(expected, after) == [], where
    else:
        assert user_message_errors(before, after) == [], where
        assert user_message_errors(before, strict) == [], where
    if result.outcome == "pruned":
        assert len(after) == len(before)
        for i in range(h, t):
            if after[i] is not before[i]:
                meta = after[i].get(META_KEY) or {}
                assert meta.get("stub") or meta.get("shortened"), f"{where}: prune changed message {i} oddly"
                assert after[i].get("role") == before[i].get("role")
        return
    # Summarized, in time order: the kept user messages (the same dicts, in order) with at most one batch marker
    # in each gap between them, exactly where the gap held work before; nothing else in the middle.
    middle = after[h : len(after) - n_tail]
    folded_at = set([i for i in range(h, t) if before[i].get("role") == "user"][:folded])
    kept_users = [i for i in range(h, t) if before[i].get("role") == "user" and i not in folded_at]
    assert [m for m in middle if not is_marker(m)] == [before[i] for i in kept_users], where
    assert all(marker_kind(m) == "batch" for m in middle if is_marker(m)), where
    cuts = [h - 1, *kept_users, t]
    gaps_before = [
        any(before[i].get("role") != "user" or i in folded_at for i in range(a + 1, b))
        for a, b in itertools.pairwise(cuts)
    ]
    gaps_after: list[int] = [0]
    for m in middle:
        if is_marker(m):
            gaps_after[-1] += 1
        else:
            gaps_after.append(0)
    assert gaps_after == [int(g) for g in gaps_before], f"{where}: markers {gaps_after} for work {gaps_before}"
    assert marker_count(middle, "micro") == 0, where
    assert rec["runs"] >= 1 and rec["summarizer_calls"] <= min(rec["runs"], config.compression.batch_max_calls)


class Checked:
    """Wraps ``BatchCompactor.compact`` of a session (or compactor) so every call is checked and kept."""

    def __init__(self, compactor: BatchCompactor, config: Config) -> None:
        self.results: list[BatchResult] = []
        self.middles: list[list[dict[str, Any]]] = []  # what lay between head and tail before each call
        self.folded = 0
        original = compactor.compact

        def compact(ledger: Ledger, **kw: Any) -> BatchResult:
            before = list(ledger.messages)
            h, t = bounds(config, ledger)
            result = original(ledger, **kw)
            check_batch(config, before, h, t, ledger, result)
            self.results.append(result)
            self.middles.append(before[h:t])
            self.folded += result.record.get("users_folded") or 0
            return result

        compactor.compact = compact  # type: ignore[method-assign]

    def outcomes(self) -> list[str]:
        return [r.outcome for r in self.results]


def check_markers(session: Session, where: str = "", *, unique_lines: bool = True) -> None:
    """At most one micro marker, after every batch marker; batch markers never adjacent (kept user messages
    separate their runs); no marker text repeated.

    ``unique_lines``: every summary line names what it summarized (``Scribe``), so no line may be in two
    markers. The extractive summarizer may extract the same fact (a path, say) from old and new exchanges, so
    with it only a whole batch body must not reappear inside the micro marker.
    """
    out = session.ledger.messages
    assert marker_count(out, "micro") <= 1, where
    kinds = [marker_kind(m) for m in out]
    assert not any(a == b == "batch" for a, b in itertools.pairwise(kinds)), f"{where}: two batch markers in a row"
    batch_bodies = [marker_body(m) for m in out if marker_kind(m) == "batch"]
    micro_body = next((marker_body(m) for m in out if marker_kind(m) == "micro"), None)
    if unique_lines:  # (an extractive summary may quote a user message that quotes the marker prefix)
        for m in out:
            if is_marker(m):
                assert content_text(m).count("[CONTEXT COMPACTION]") == 1, f"{where}: marker text doubled"
        seen: set[str] = set()
        for body in batch_bodies + ([micro_body] if micro_body is not None else []):
            lines = {ln for ln in body.splitlines() if ln.startswith("- ")}
            assert not lines & seen, f"{where}: marker text duplicated: {lines & seen}"
            seen |= lines
    if micro_body is not None and batch_bodies:
        assert all(body not in micro_body for body in batch_bodies), where
        # micro never removes a batch marker's content: the micro marker follows the last batch marker
        mi = kinds.index("micro")
        bi = len(kinds) - 1 - kinds[::-1].index("batch")
        assert bi < mi, f"{where}: micro marker at {mi} before batch marker at {bi}"


# --------------------------------------------------------------------------- should_compress


def test_should_compress_uses_reported_tokens_else_counted() -> None:
    cfg = config()  # threshold 10,000
    s = Session(cfg, Scribe(), counter=counter())
    s.extend(build(3, size=100))
    assert s.tokens < 10_000
    assert not s.should_compress()
    assert s.should_compress(prompt_tokens=10_000)  # the provider's figure wins
    assert not s.should_compress(prompt_tokens=9_999)
    s.extend(build(12, size=300)[1:])
    assert s.tokens >= 10_000 and s.should_compress()
    assert not s.should_compress(prompt_tokens=5_000)  # reported below: not yet
    # unknown context window, or compression off: never automatic
    assert not Session(config(None), Scribe(), counter=counter(), messages=s.transcript).should_compress()
    assert not Session(config(enabled=False), Scribe(), counter=counter(), messages=s.transcript).should_compress()


def test_compact_on_demand_runs_below_the_threshold_and_passes_the_focus() -> None:
    summ = Scribe()
    s = Session(config(), summ, counter=counter())
    s.extend(build(8, size=100))
    assert not s.should_compress()
    result = s.compact(focus="the flaky auth test")
    assert result.outcome == "compacted" and result.record["reason"] == "on_demand"
    assert len(summ.batches) == result.record["summarizer_calls"] == result.record["runs"] >= 2
    assert all(focus == "the flaky auth test" and previous == "" for previous, _, focus in summ.batches)
    assert marker_count(s.transcript, "batch") == result.record["runs"]


def test_before_request_runs_batch_at_the_threshold() -> None:
    summ = Scribe()
    s = Session(config(), summ, counter=counter())
    checked = Checked(s.batch, s.config)
    for m in build(20, iterations=3, size=150):
        if m["role"] == "assistant":
            s.before_request()
        s.append(m)
    assert "compacted" in checked.outcomes()
    assert all(r.record["reason"] == "threshold" for r in checked.results)
    assert s.tokens < 10_000 + 3_000  # compacted at the threshold, then at most a turn's growth


# --------------------------------------------------------------------------- prune phase


def test_prune_stub_names_tool_target_size_and_exit_status() -> None:
    """Old outputs become ``[Bash] pytest -x (38 lines, exit 1)``; pruning alone was enough, no model call."""
    pytest_out = "\n".join(
        [f"tests/test_app.py::test_case_{i} FAILED - AssertionError: expected 200, got 500" for i in range(36)]
        + ["E   assert 500 == 200", "exit code 1"]
    )
    assert len(pytest_out.splitlines()) == 38
    msgs = [*opening(), {"role": "user", "content": "fix the tests"}]
    msgs += iteration("c1", pytest_out, command="pytest -x")
    msgs += iteration("c2", "\n".join(f"line {i} of src/app.py" for i in range(412)), name="Read", path="src/app.py")
    msgs += iteration("c3", "x" * 40_000, command="cat big.log")
    msgs += [{"role": "assistant", "content": "found it"}, {"role": "user", "content": "go on"}]
    msgs += turn(9, iterations=1, size=20)[1:]
    summ = Scribe()
    cfg = config(proactive_prune_min_reclaim_tokens=1000)
    ledger = Ledger(counter(), msgs)
    assert ledger.total > cfg.threshold_tokens()
    b = BatchCompactor(cfg, summ, counter())
    checked = Checked(b, cfg)
    result = b.compact(ledger)
    assert result.outcome == "pruned" and result.record["pruned"] == 3
    assert not summ.batches
    stubs = {m["tool_call_id"]: m["content"] for m in ledger.messages if (m.get(META_KEY) or {}).get("stub")}
    assert stubs == {
        "c1": "[Bash] pytest -x (38 lines, exit 1)",
        "c2": "[Read] src/app.py (412 lines)",
        "c3": "[Bash] cat big.log (40000 chars)",
    }
    assert ledger.total <= cfg.threshold_tokens() - 1000
    assert checked.outcomes() == ["pruned"]


def test_prune_stub_exact_format_for_a_38_line_failing_run() -> None:
    out = "\n".join(
        ["=" * 20 + " test session starts " + "=" * 20] + [f"line {i}" for i in range(36)] + ["exit code 1"]
    )
    assert len(out.splitlines()) == 38
    msgs = iteration("c1", out + "\n" + "", command="pytest -x")
    msgs[1]["content"] = out
    ledger = Ledger(counter(), msgs)
    plan = plan_prune(ledger.messages, ledger.tokens, 0, 2, min_tool_tokens=10, max_argument_tokens=1000)
    assert isinstance(plan, Prune)
    ((index, stub),) = plan.replacements
    assert index == 1 and stub["content"] == "[Bash] pytest -x (38 lines, exit 1)"
    assert stub["tool_call_id"] == "c1" and stub[META_KEY] == {"stub": True, "original_tokens": ledger.tokens[1]}


def test_prune_deduplicates_identical_older_outputs() -> None:
    same = "\n".join(f"config line {i}" for i in range(30))  # ~100 tokens: below the stub size, a duplicate
    msgs = iteration("c1", same, name="Read", path="setup.cfg") + iteration("c2", same, name="Read", path="setup.cfg")
    msgs += iteration("c3", "something else entirely\n" * 5, name="Read", path="other.cfg")
    ledger = Ledger(counter(), msgs)
    plan = plan_prune(ledger.messages, ledger.tokens, 0, len(msgs), min_tool_tokens=200, max_argument_tokens=1000)
    assert plan is not None
    replaced = dict(plan.replacements)
    assert list(replaced) == [1]  # the older copy only; the newest and the small unique output stay
    assert replaced[1]["content"] == "[Read] setup.cfg (30 lines) [identical to a later output, kept there]"


def test_prune_never_makes_a_message_longer() -> None:
    cmd = "cd /work/project && python -m pytest tests/test_something_long.py -x -q --maxfail=1 -k 'not slow'"
    same = "1 passed in 0.03s, all fine here ok 1 passed in 0.03s\nexit code 0"
    msgs = iteration("c1", same, command=cmd) + iteration("c2", same, command=cmd)
    ledger = Ledger(counter(), msgs)
    plan = plan_prune(ledger.messages, ledger.tokens, 0, len(msgs), min_tool_tokens=200, max_argument_tokens=1000)
    for index, message in plan.replacements if plan else ():
        assert counter().count_message(message) < ledger.tokens[index], (
            f"stub {message['content']!r} ({counter().count_message(message)} tokens) replaces "
            f"{ledger.tokens[index]} tokens"
        )


def test_a_stub_that_says_kept_there_points_at_a_whole_output() -> None:
    same = "\n".join(f"config line {i} " + "x" * 40 for i in range(60))  # ~700 tokens, above the stub size
    msgs = iteration("c1", same, name="Read", path="setup.cfg") + iteration("c2", same, name="Read", path="setup.cfg")
    ledger = Ledger(counter(), msgs)
    plan = plan_prune(ledger.messages, ledger.tokens, 0, len(msgs), min_tool_tokens=200, max_argument_tokens=1000)
    replaced = dict(plan.replacements) if plan else {}
    for index, stub in replaced.items():
        if "kept there" in stub["content"]:
            later = [
                i
                for i in range(index + 1, len(msgs))
                if msgs[i].get("role") == "tool" and content_text(msgs[i]) == content_text(msgs[index])
            ]
            assert any(i not in replaced for i in later), f"{stub['content']!r}: every later copy is a stub too"


def test_shortened_arguments_stay_valid_json() -> None:
    body = "def main():\n    print('hello')\n" * 2_000
    args = {"file_path": "src/app.py", "content": body, "mode": 420, "tags": ["a", "b" * 9_000], "nested": {"x": body}}
    msgs = [
        *opening(),
        {"role": "user", "content": "write it"},
        {"role": "assistant", "content": "writing", "tool_calls": [call("w1", "Write", **args)]},
        {"role": "tool", "tool_call_id": "w1", "content": "ok"},
        {"role": "assistant", "content": "written"},
    ]
    msgs += turn(5, iterations=4, size=500)  # fills the tail
    cfg = config(proactive_prune_min_reclaim_tokens=0, prune_max_argument_tokens=200)
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, Scribe(), counter())
    Checked(b, cfg)
    result = b.compact(ledger)
    assert result.outcome == "pruned"
    shortened = next(m for m in ledger.messages if (m.get(META_KEY) or {}).get("shortened"))
    new_args = json.loads(shortened["tool_calls"][0]["function"]["arguments"])  # valid JSON
    assert set(new_args) == set(args) and new_args["file_path"] == "src/app.py" and new_args["mode"] == 420
    assert "characters omitted by microcompact" in new_args["content"]
    assert new_args["content"].startswith("def main():") and new_args["content"].endswith("print('hello')\n")
    assert new_args["tags"][0] == "a" and len(new_args["tags"][1]) < 9_000
    assert len(shortened["tool_calls"][0]["function"]["arguments"]) < len(json.dumps(args)) // 10
    assert shortened["tool_calls"][0]["id"] == "w1"
    # not JSON (or not a string): left alone
    assert shorten_arguments("{not json", 100) is None


@settings(max_examples=examples(60), **COMMON)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3_000),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
        max_leaves=12,
    ),
    max_chars=st.integers(1, 2_000),
)
def test_shorten_arguments_is_always_valid_json(value: Any, max_chars: int) -> None:
    short = shorten_arguments(json.dumps(value), max_chars)
    assert short is not None
    parsed = json.loads(short)
    assert type(parsed) is type(value) or (isinstance(value, float) and isinstance(parsed, (int, float)))


def test_prune_not_enough_goes_on_to_the_summarizer_with_original_outputs() -> None:
    msgs = build(25, size=150)
    cfg = config()  # outputs under prune_min_tool_tokens (200): pruning frees nothing
    summ = Scribe()
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger)
    assert result.outcome == "compacted"
    tool_texts = [content_text(m) for _, seen, _ in summ.batches for m in seen if m["role"] == "tool"]
    assert tool_texts and all(t.startswith("output c") for t in tool_texts)  # originals, not stubs


# --------------------------------------------------------------------------- the summarize phase


class Echo(Scribe):
    """Names, in its summary, every tool call it was given: where each summarized call went is checkable."""

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        ids = [tc["id"] for m in messages for tc in m.get("tool_calls") or ()]
        return "\n".join(["### Completed actions", f"- call {len(self.batches)}: " + " ".join(ids)])


def test_each_run_of_work_gets_its_marker_in_place_and_users_stay_individual() -> None:
    """Chronological order (issue 8.8): every kept user message is preceded by the summary of the work done
    before it and followed by the summary of the work it asked for; one call per run of work."""
    msgs = build(12, size=150)
    cfg = config()
    summ = Echo()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    middle = msgs[h:t]
    users = [m for m in middle if m["role"] == "user"]
    assert result.outcome == "compacted" and len(users) > 2
    runs = result.record["runs"]
    assert len(summ.batches) == result.record["summarizer_calls"] == runs == len(users) + (middle[0]["role"] != "user")
    assert all(previous == "" and focus is None for previous, _, focus in summ.batches)
    out = ledger.messages
    new_middle = out[h : len(out) - (len(msgs) - t)]
    assert [strip(m) for m in new_middle if m["role"] == "user"] == users  # individual, verbatim, in order
    assert all(a["role"] == "user" or b["role"] == "user" for a, b in itertools.pairwise(new_middle))
    # each marker names exactly the calls recorded between the user messages around it
    where = {tc["id"]: i for i, m in enumerate(msgs) for tc in m.get("tool_calls") or ()}
    user_at = [i for i in range(h, t) if msgs[i]["role"] == "user"]
    for k, m in enumerate(new_middle):
        if not is_marker(m):
            continue
        ids = marker_body(m).split(": ", 1)[1].split()
        assert ids, "every marker summarizes work"
        before_users = sum(1 for x in new_middle[:k] if not is_marker(x))
        low = user_at[before_users - 1] if before_users else h - 1
        high = user_at[before_users] if before_users < len(user_at) else t
        assert all(low < where[i] < high for i in ids), f"marker {k} summarizes work from elsewhere: {ids}"
    assert "_mc" not in json.dumps(to_api(out))
    assert result.record["absorbed"] == len(middle) - len(users)


def test_batch_max_calls_gives_the_oldest_runs_the_extractive_summary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    cfg = config(batch_max_calls=3)
    summ = Echo()
    ledger = Ledger(counter(), build(12, size=150))
    _h, _t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted" and len(summ.batches) == result.record["summarizer_calls"] == 3
    assert result.record["capped_runs"] == result.record["runs"] - 3 > 0
    markers = [m for m in ledger.messages if marker_kind(m) == "batch"]
    assert len(markers) == result.record["runs"]
    called = [m for m in markers if marker_body(m).startswith("### Completed actions\n- call ")]
    assert called == markers[-3:]  # the newest runs by the model, the oldest deterministically
    assert any("beyond batch_max_calls=3" in r.getMessage() for r in caplog.records)
    with pytest.raises(Exception, match="batch_max_calls"):
        config(batch_max_calls=0)


def test_previous_batch_and_micro_summaries_are_updated_not_repeated() -> None:
    cfg = config()
    summ = Scribe()
    msgs = build(10, size=150)
    # an earlier batch marker and a micro marker inside the middle, each after a turn's final answer
    assert msgs[6]["content"] == "done 0" and msgs[12]["content"] == "done 1"
    msgs[13:13] = [render_micro_marker("- the old rolling summary line")]
    msgs[7:7] = [render_marker("### Goal\n- the old batch goal", "batch")]
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted"
    # each marker is in time: it is the previous summary of the run it lies in (turn 0's, turn 1's), once
    previous = [p for p, _, _ in summ.batches]
    assert sum("the old batch goal" in p for p in previous) == 1
    assert sum("the old rolling summary line" in p for p in previous) == 1
    assert not any("the old batch goal" in p and "the old rolling summary line" in p for p in previous)
    assert all(not any(is_marker(m) for m in seen) for _, seen, _ in summ.batches)  # bodies go in as previous
    out = ledger.messages
    assert marker_count(out, "batch") == result.record["runs"] and marker_count(out, "micro") == 0


def test_batch_marker_uses_the_fixed_sections_with_the_extractive_summarizer() -> None:
    msgs = [*opening(), {"role": "user", "content": "make the build pass; never touch vendor/"}]
    msgs += iteration(
        "c1",
        'Traceback (most recent call last):\n  File "x"\nValueError: bad config\nexit code 1',
        command="python -m build",
        text="I'll run the build because CI is red.",
    )
    msgs += iteration("c2", "ok", name="Edit", path="src/build.py", text="Let me fix src/build.py.")
    msgs += [{"role": "assistant", "content": "Fixed."}]
    msgs += [m for n in range(3, 8) for m in turn(n, iterations=2, size=300)]
    cfg = config()
    s = Session(cfg, ExtractiveSummarizer(), counter=counter(), messages=msgs)
    result = s.compact()
    assert result.outcome == "compacted"
    body = marker_body(next(m for m in s.transcript if marker_kind(m) == "batch"))
    headings = [ln[4:] for ln in body.splitlines() if ln.startswith("### ")]
    prose = [h for h in headings if h in BATCH_SECTIONS]
    assert prose and prose == sorted(prose, key=BATCH_SECTIONS.index)  # in the fixed order
    # the ledger stands in for "Relevant files" and "Blocked (exact errors)", after the prose
    assert headings[len(prose) :] == ["Files", "Failing commands"]
    assert "- `python -m build` → exit 1: ValueError: bad config" in body
    assert "- src/build.py — edited 1x" in body


def test_user_floor_folds_the_oldest_user_messages_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    cfg = config()  # threshold 10,000; floor 5,000
    msgs = [system(), {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"}]
    for n in range(8):  # each user message pastes ~1,000 tokens
        msgs += turn(n, iterations=1, size=60, user=f"u{n}: pasted log\n" + f"log line {n} " * 330)
    summ = Scribe()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    checked = Checked(b, cfg)
    result = b.compact(ledger)
    assert result.outcome == "user_floor_exceeded"
    folded = result.record["users_folded"]
    assert folded >= 1
    seen = [m for _, part, _ in reversed(summ.batches) for m in part]  # (calls go newest run first)
    middle_users = [m for m in msgs[h:t] if m["role"] == "user"]
    assert [m["content"] for m in seen if m["role"] == "user"] == [m["content"] for m in middle_users[:folded]]
    kept = [m for m in ledger.messages[h:t] if m["role"] == "user"]
    assert sum(counter().count_message(m) for m in kept) <= 0.5 * cfg.threshold_tokens()
    # the folded ones are summarized in the run they now belong to; the kept ones stay individual, in order
    assert [m["content"] for m in ledger.messages if m["role"] == "user"] == [
        m["content"] for m in msgs if m["role"] == "user" and m not in middle_users[:folded]
    ]
    assert any(
        "verbatim user messages exceed 50% of the threshold" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )
    assert checked.outcomes() == ["user_floor_exceeded"]


def test_user_floor_never_folds_the_latest_user_message() -> None:
    cfg = config()  # floor 5,000 tokens
    request = "Here is the spec, implement it:\n" + "spec line\n" * 2_500  # ~6,000 tokens
    msgs = [*opening(), {"role": "user", "content": request}]
    for k in range(40):  # the long turn that follows pushes the request out of the tail
        msgs += iteration(f"k{k}", "out " * 100, command=f"step {k}")
    s = Session(cfg, Scribe(), counter=counter(), messages=msgs)
    assert s.should_compress()
    result = s.before_request()[0]
    assert result.changed
    assert request in user_texts(s.transcript), f"outcome {result.outcome}: the current request was folded"


def test_input_too_large_for_the_summarizer_is_cut_head_and_tail_with_a_note() -> None:
    """The runs share the summarizer's input limit: together the calls read about what one call would."""
    cfg = config(aux={"max_input_tokens": 1000})
    msgs = build(5, iterations=12, size=60)
    summ = Scribe()
    ledger = Ledger(counter(), msgs)
    h, t = bounds(cfg, ledger)
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    assert result.outcome == "compacted"
    calls = result.record["summarizer_calls"]
    assert calls == len(summ.batches) >= 3
    runs: list[list[dict[str, Any]]] = [[]]
    for m in msgs[h:t]:
        if m["role"] == "user":
            runs.append([])
        else:
            runs[-1].append(m)
    runs = [r for r in runs if r]
    for (_, seen, _), middle in zip(reversed(summ.batches), runs, strict=False):  # calls go newest run first
        notes = [m for m in seen if "omitted by microcompact: the summarizer's input limit" in content_text(m)]
        assert len(notes) == 1
        note_at = seen.index(notes[0])
        assert 0 < note_at < len(seen) - 1
        assert units(seen[:1]) == units(middle[:1]) and units(seen[-1:]) == units(middle[-1:])  # both ends kept
        assert re.search(r"\[\.\.\. \d+ messages \([\d,]+ tokens\) omitted", content_text(notes[0]))
    assert result.record["input_tokens"] <= 1.05 * 1000 + 50 * calls
    assert b.largest_input_tokens < result.record["input_tokens"]


def test_nothing_to_compact_is_reported_and_changes_nothing() -> None:
    cfg = config()
    msgs = [system(), {"role": "user", "content": "x " * 30_000}, {"role": "assistant", "content": "ok"}]
    ledger = Ledger(counter(), msgs)
    b = BatchCompactor(cfg, Scribe(), counter())
    Checked(b, cfg)
    assert b.compact(ledger).outcome == "nothing_to_compact"


def test_telemetry_one_sorted_content_free_line_per_attempt(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    cfg = config()
    s = Session(cfg, Scribe(), counter=counter(), session_id="sess-b")
    s.extend(build(14, size=200))
    results = [s.compact(), s.compact()]
    lines = [r.getMessage() for r in caplog.records if r.name == "microcompact.telemetry"]
    batch_lines = [ln for ln in lines if ln.startswith("batch compaction telemetry: {")]
    assert len(batch_lines) == 2
    for line, result in zip(batch_lines, results, strict=False):
        kind, record = parse_line(line)
        assert kind == "batch" and record == json.loads(json.dumps(result.record))
        assert list(record) == sorted(record)
        for key in (
            "outcome",
            "tokens_before",
            "tokens_after",
            "messages_before",
            "messages_after",
            "duration_ms",
            "summarizer",
            "reason",
        ):
            assert key in record, key
        assert record["session_id"] == "sess-b" and record["summarizer"] == "scribe"
        assert record["tokens_delta"] == record["tokens_after"] - record["tokens_before"]
    assert "word" not in " ".join(lines) and "request 3" not in " ".join(lines)


def test_store_commit_failure_leaves_the_transcript_as_it_was() -> None:
    events: list[Any] = []

    def commit(event: Any, messages: list[dict]) -> None:
        events.append(event)
        raise OSError("disk full")

    cfg = config()
    s = Session(cfg, Scribe(), counter=counter(), commit=commit, messages=build(14, size=200))
    before = s.transcript
    result = s.compact()
    assert result.outcome == "store_failed" and s.transcript == before and len(events) == 1


# --------------------------------------------------------------------------- anti-thrash


def thrash_transcript(system_tokens: int = 10_500) -> list[dict[str, Any]]:
    """A huge system prompt (never compacted) and a small middle: compaction frees little however often it runs."""
    msgs = [
        {"role": "system", "content": "rule " * int(system_tokens * 0.8)},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok"},
    ]
    for k in range(12):
        msgs += iteration(f"m{k}", "small output " * 10, command=f"step {k}")
    return msgs


def test_a_compaction_that_would_free_too_little_is_not_run_and_waits_for_growth(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Convergence (issue 8.7): a batch whose middle holds too little to summarize used to run anyway (twice,
    before the anti-thrash pause), calling the summarizer for nothing. Now it is predicted and skipped, and
    automatic compaction waits until enough has piled up."""
    caplog.set_level(logging.INFO, logger="microcompact")
    cfg = config(target_ratio=0.05)  # a 500-token tail
    summ = Scribe()
    s = Session(cfg, summ, counter=counter(), messages=thrash_transcript())
    checked = Checked(s.batch, cfg)
    assert s.should_compress()
    first = s.before_request()[0]
    assert first.outcome == "low_yield" and not first.changed and summ.batches == []
    paused = first.record["paused_until_tokens"]
    # at most 10% of the 10,000-token threshold of growth, plus room for the summary
    assert s.tokens < paused <= s.tokens + 1_000 + SUMMARY_ALLOWANCE_TOKENS
    # still over the threshold, but paused: no more attempts while the transcript has not grown
    assert s.tokens > cfg.threshold_tokens() and not s.should_compress()
    assert [r for r in s.before_request() if r.record["event"] == "batch_compaction"] == []
    # grown meaningfully: it runs again and frees enough; an on-demand compaction is never paused
    while s.tokens < paused:
        s.extend(iteration(f"g{s.tokens}", "grown output " * 60, command="grow"))
    assert s.should_compress()
    again = [r for r in s.before_request() if r.record["event"] == "batch_compaction"]
    assert [r.outcome for r in again] == ["compacted"] and len(summ.batches) == 1
    assert again[0].record["tokens_before"] - again[0].record["tokens_after"] >= 1_000
    s.extend(iteration("late", "small output " * 10, command="true") * 1)
    s.extend(iteration("later", "small output " * 10, command="true"))
    assert s.compact().outcome in CHANGED  # on demand: run even for a small yield
    assert [r.outcome for r in checked.results] == ["low_yield", "compacted", "compacted"]


def test_a_compaction_that_leaves_the_transcript_over_the_threshold_waits_for_growth() -> None:
    """Convergence: what compaction keeps (head, tail, verbatim users) holds the transcript over the threshold;
    compacting again at every request would free little each time (8-11 batches per 12 requests)."""
    cfg = config(target_ratio=0.05)
    summ = Scribe()
    msgs = thrash_transcript(10_200)
    for k in range(20):
        msgs += iteration(f"x{k}", "bulky output " * 80, command=f"x {k}")
    s = Session(cfg, summ, counter=counter(), messages=msgs)
    first = [r for r in s.before_request() if r.record["event"] == "batch_compaction"]
    assert [r.outcome for r in first] == ["compacted"] and s.tokens > cfg.threshold_tokens()
    paused = first[0].record["paused_until_tokens"]
    for k in range(12):  # twelve more requests, each adding a little
        if s.tokens >= paused:
            break
        assert [r for r in s.before_request() if r.record["event"] == "batch_compaction"] == []
        s.extend(iteration(f"y{k}", "small output " * 10, command="true"))
    assert len(summ.batches) == 1


def test_anti_thrash_pause_is_lifted_when_at_risk_of_the_limit() -> None:
    cfg = config()  # at risk from 15,000 tokens
    b = BatchCompactor(cfg, Scribe(), counter())
    ledger = Ledger(counter(), thrash_transcript())
    b.paused_below = ledger.total + 100_000
    assert not b.should_compress(ledger)
    assert b.should_compress(ledger, prompt_tokens=15_000)


@pytest.mark.parametrize("how", ["reported", "calibrated"])
def test_anti_thrash_pause_holds_when_the_provider_reports_prompt_tokens(how: str) -> None:
    cfg = config(target_ratio=0.05)
    summ = Scribe()
    s = Session(cfg, summ, counter=counter(), messages=thrash_transcript(8_500))
    overhead = 3_000  # tool schemas and templates the provider counts and we never see

    def request() -> list[Any]:
        if how == "reported":
            return s.before_request(prompt_tokens=s.tokens + overhead)
        s.record_usage(s.tokens + overhead)
        return s.before_request()

    outcomes = []
    for k in range(6):
        outcomes += [r.outcome for r in request() if r.record["event"] == "batch_compaction"]
        s.extend(iteration(f"n{k}", "small output " * 10, command="true"))
    # (it used to take two low-yield summarizer calls to pause; now the low yield is predicted: none)
    assert len(summ.batches) <= 2 and len(outcomes) <= 2, f"compaction kept running while paused: {outcomes}"


@pytest.mark.parametrize("scale,overhead", [(1.0, 3_000), (1.1, 2_000), (1.0, 0)])
def test_calibration_learns_the_providers_extra_tokens_so_batch_fires_at_the_threshold(
    scale: float, overhead: int
) -> None:
    """The provider counts tool schemas and a system prompt we never see: a constant, not a ratio (issue 8.6).

    Learned as a ratio, a 3,000-token overhead measured on a small prompt made batch fire at 60% of the
    real threshold. The provider here reports ``scale * counted + overhead`` for every request.
    """
    cfg = config(context_length=32_000)  # threshold 16,000
    s = Session(cfg, Scribe(), counter=counter(), messages=[system(), {"role": "user", "content": "go"}])
    threshold = cfg.threshold_tokens()
    assert threshold == 16_000
    fired_at = None
    for k in range(1_000):
        fired = [r for r in s.before_request() if r.record["event"] == "batch_compaction"]
        if fired:
            fired_at = round(scale * fired[0].record["tokens_before"]) + overhead  # what the provider saw
            break
        s.record_usage(round(scale * s.tokens) + overhead)  # usage.prompt_tokens of the request just sent
        s.extend(iteration(f"k{k}", "out " * 40, command=f"step {k}"))
    assert fired_at is not None, "batch compaction never fired"
    assert threshold <= fired_at <= 1.02 * threshold, f"fired at {100 * fired_at / threshold:.1f}% of the threshold"


def test_calibration_keeps_the_constant_when_prompt_sizes_barely_vary() -> None:
    c = counter()
    for counted in (10_000, 10_050, 10_100, 10_120):
        c.calibrate(counted, counted + 3_000)
    assert c.scale == 1.0 and c.overhead == 3_000
    assert c.estimate_prompt(2_000) == 5_000


def six_parallel_reads(tokens_each: int = 4_750) -> list[dict[str, Any]]:
    """One iteration of six parallel file reads, ~28.5K tokens of results (the issue's repro)."""
    calls = [call(f"r{k}", "Read", file_path=f"src/module_{k}.py") for k in range(6)]
    msgs: list[dict[str, Any]] = [
        system(),
        {"role": "user", "content": "review the six modules"},
        {"role": "assistant", "content": "reading them", "tool_calls": calls},
    ]
    for k in range(6):
        lines = [f"{n:5d}\tdef function_{k}_{n}(value): return value + {n}" for n in range(tokens_each // 14)]
        msgs.append({"role": "tool", "tool_call_id": f"r{k}", "content": "\n".join(lines)})
    return msgs


@pytest.mark.parametrize("micro", [True, False])
def test_a_request_never_exceeds_the_window_unless_user_messages_alone_do(
    tmp_path: Path, micro: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 8.7: six parallel reads (28.5K tokens) in a 32K window made requests larger than the window.
    As a last resort the largest outputs are cut head-and-tail with a note; the originals stay in the store."""
    from microcompact.store import open_store

    caplog.set_level(logging.WARNING, logger="microcompact")
    cfg = parse_config({"compression": {"micro_compact": micro}, "model": {"context_length": 32_000}})
    real = TokenCounter()
    msgs = six_parallel_reads()
    assert sum(real.count_message(m) for m in msgs[3:]) >= 28_000
    with open_store(tmp_path / "s.db") as store:
        s = Session(cfg, Scribe(), counter=real, store=store, session_id="reads")
        for m in msgs[:3]:
            s.append(m)
        s.before_request()
        for m in msgs[3:]:
            s.append(m)
        msgs.append({"role": "user", "content": "what do they share?"})
        s.append(msgs[-1])
        results = s.before_request()  # the next model request
        assert real.estimate_prompt(s.tokens) <= 32_000, [r.outcome for r in results]
        cuts = [r for r in results if r.outcome == "truncated"]
        assert len(cuts) == 1 and cuts[0].record["cut"] >= 1
        assert role_sequence_errors(s.transcript) == [] and user_message_errors(msgs, s.transcript) == []
        cut = [m for m in s.transcript if (m.get(META_KEY) or {}).get("cut")]
        assert cut and all(
            "omitted by microcompact: the request was over the context window" in content_text(m) for m in cut
        )
        for m in cut:  # the start and the end of the output survive
            original = next(o for o in msgs if o.get("tool_call_id") == m["tool_call_id"])
            assert content_text(m)[:200] == original["content"][:200]
            assert content_text(m)[-200:] == original["content"][-200:]
        assert any(
            "cut" in r.getMessage() and "originals are kept in the store" in r.getMessage() for r in caplog.records
        )
        s.close()
        everything = store.export("reads", include_absorbed=True)
        for m in msgs[3:-1]:  # nothing lost: every original is in the store, absorbed by its cut copy
            assert any(e.get("content") == m["content"] for e in everything)
        assert to_api(Session.open(store, "reads", cfg, Scribe()).transcript) == to_api(s.transcript)


def test_last_resort_never_cuts_user_or_system_messages(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="microcompact")
    cfg = config(8_192)
    msgs = [{"role": "system", "content": "rule " * 5_000}, {"role": "user", "content": "spec " * 6_000}]
    s = Session(cfg, Scribe(), counter=counter(), messages=msgs)
    results = s.before_request()
    assert "truncated" not in [r.outcome for r in results]
    assert to_api(s.transcript) == msgs
    assert any(
        "over the context window" in r.getMessage() and "nothing left to cut" in r.getMessage() for r in caplog.records
    )


# --------------------------------------------------------------------------- Session: micro and batch together


def micro_config(**kw: Any) -> Config:
    base = dict(micro_compact=True, micro_compact_max_exchange_tokens=1000, protect_first_n=3)
    base.update(kw)
    return config(**base)


def test_micro_continues_from_the_batch_marker_with_a_fresh_rolling_summary() -> None:
    summ = Scribe()
    s = Session(micro_config(), summ, counter=counter())
    checked = Checked(s.batch, s.config)
    for m in build(10, size=150):
        if m["role"] == "user" and len(s.ledger):
            s.finalize_turn()
        if m["role"] == "assistant":
            s.before_request()
        s.append(m)
    s.finalize_turn()
    assert summ.merges and marker_count(s.transcript, "micro") == 1
    micro_body_before = marker_body(next(m for m in s.transcript if marker_kind(m) == "micro"))
    result = s.compact()
    assert result.outcome == "compacted" and checked.results
    out = s.transcript
    batch_at = max(i for i, m in enumerate(out) if marker_kind(m) == "batch")  # the newest: micro goes on there
    assert marker_count(out, "micro") == 0
    # the rolling summary went into the batch marker of the run it was in (once): as the previous summary of
    # that run's call, or as the marker itself when micro had already absorbed all of the run
    assert (
        sum(micro_body_before in previous for previous, _, _ in summ.batches)
        + sum(marker_body(m) == micro_body_before for m in out if marker_kind(m) == "batch")
        == 1
    )
    assert s.micro.state.cursor == batch_at + 1 and s.micro.state.text == "" and s.micro.state.marker_index is None
    assert result.record["micro_passes_since_last"] == len(summ.merges)
    merges_before = len(summ.merges)
    for m in turn(20, size=150) + turn(21, size=150) + turn(22, size=150):
        if m["role"] == "user":
            s.finalize_turn()
        if m["role"] == "assistant":
            s.before_request()
        s.append(m)
    s.finalize_turn()
    assert len(summ.merges) > merges_before
    check_markers(s, "after micro, batch, micro")
    out = s.transcript
    micro = next(m for m in out if marker_kind(m) == "micro")
    assert marker_body(micro).startswith(f"- micro {merges_before + 1}:")  # fresh, not the batch body
    assert "batch" not in marker_body(micro)
    # what the first micro pass after the batch read: nothing before the batch marker
    first_after = summ.merges[merges_before]
    assert not any(is_marker(m) for m in first_after)


def drive(
    session: Session,
    messages: list[dict[str, Any]],
    *,
    every: Callable[[str], None] | None = None,
    compact_at: set[int] = frozenset(),
    focus: str | None = None,
) -> None:
    """Replay-like driving: requests before assistant messages, turn ends before user messages."""
    in_turn = False
    for i, m in enumerate(messages):
        if i in compact_at:
            session.compact(focus=focus)
            if every:
                every(f"compact before message {i}")
        if m.get("role") == "user" and in_turn:
            session.finalize_turn()
            in_turn = False
            if every:
                every(f"turn end before message {i}")
        if m.get("role") == "assistant":
            session.before_request()
            in_turn = True
            if every:
                every(f"request before message {i}")
        session.append(m)
    if in_turn:
        session.finalize_turn()
        if every:
            every("final turn end")


# --------------------------------------------------------------------------- generated transcripts (hypothesis)


@st.composite
def batch_configs(draw: st.DrawFn, micro: bool | None = None) -> Config:
    compression = {
        "tokenizer": "estimate",
        "protect_first_n": draw(st.sampled_from([2, 0, 1, 3, 5])),
        "min_tail_messages": draw(st.sampled_from([3, 1, 2, 6])),
        "target_ratio": draw(st.sampled_from([0.2, 0.05, 0.5])),
        "proactive_prune_min_reclaim_tokens": draw(st.sampled_from([4096, 0, 512])),
        "prune_min_tool_tokens": draw(st.sampled_from([200, 20, 1000])),
        "prune_max_argument_tokens": draw(st.sampled_from([1000, 50])),
        "batch_user_floor_ratio": draw(st.sampled_from([0.5, 0.5, 0.1])),
        "micro_compact": draw(st.booleans()) if micro is None else micro,
        "micro_compact_max_exchange_tokens": draw(st.sampled_from([256, 1000, 8000])),
        "micro_compact_defrag_threshold_tokens": draw(st.sampled_from([200, 2000])),
    }
    aux = {"max_input_tokens": draw(st.sampled_from([32_000, 1000, 3000]))}
    limit = draw(st.sampled_from([4096, 8192, 16384]))
    return parse_config(
        {"compression": compression, "model": {"context_length": limit}, "auxiliary": {"compression": aux}}
    )


def run_generated(
    messages: list[dict[str, Any]],
    cfg: Config,
    summarizer: Any,
    compact_at: set[int],
    focus: str | None,
    unique_lines: bool = True,
) -> tuple[Session, Checked]:
    s = Session(cfg, summarizer, counter=counter(), session_id="gen")
    checked = Checked(s.batch, cfg)
    appended: list[dict[str, Any]] = []

    def every(where: str) -> None:
        out = s.ledger.messages
        assert role_sequence_errors(out) == [] or role_sequence_errors(messages[: len(appended)]), where
        if not checked.folded:
            assert user_message_errors(appended, out) == [], where
        check_markers(s, where, unique_lines=unique_lines)
        h = head_of(appended, cfg, s.counter)
        assert same_head(out, appended, h), f"{where}: head changed"

    # keep the appended list in step with the session (drive appends before the next hook runs)
    original_append = s.append

    def append(m: dict[str, Any]) -> None:
        original_append(m)
        appended.append(m)

    s.append = append  # type: ignore[method-assign]
    drive(s, messages, every=every, compact_at=compact_at, focus=focus)
    return s, checked


@settings(max_examples=examples(50), **COMMON)
@given(data=st.data(), messages=transcripts(max_turns=8), cfg=batch_configs())
def test_batch_invariants_on_generated_transcripts(
    data: st.DataObject, messages: list[dict[str, Any]], cfg: Config
) -> None:
    """Every batch compaction (automatic or forced, micro on or off) keeps head, tail, users, pairs, roles;
    ends under the threshold or says why; in time order; one call per run of work, together covering the
    whole middle."""
    # on-demand compactions between complete iterations (never between a tool call and its results)
    points = [i for i in range(len(messages) + 1) if i == len(messages) or messages[i].get("role") != "tool"]
    compact_at = set(data.draw(st.lists(st.sampled_from(points), max_size=3), label="compact_at"))
    focus = data.draw(st.sampled_from([None, "the failing test"]), label="focus")
    summ = Scribe()
    s, checked = run_generated(messages, cfg, summ, compact_at, focus)
    note(f"batch outcomes: {checked.outcomes()}")
    summarized = [r for r in checked.results if r.outcome in ("compacted", "user_floor_exceeded")]
    assert len(summarized) == s.batch.compactions
    # one summarizer call per run of work (newest first), at most batch_max_calls per compaction
    calls = [r.record["summarizer_calls"] for r in summarized]
    assert len(summ.batches) == sum(calls), (len(summ.batches), checked.outcomes())
    middles = [m for m, r in zip(checked.middles, checked.results, strict=False) if r in summarized]
    batches = iter(summ.batches)
    for r, middle, n in zip(summarized, middles, calls, strict=False):
        assert n <= cfg.compression.batch_max_calls and r.record["runs"] >= 1
        got = [next(batches) for _ in range(n)][::-1]  # oldest run first
        seen = [m for _, part, _ in got for m in part]
        assert not any(is_marker(m) for m in seen)
        assert all(f == (focus if r.record["reason"] == "on_demand" else None) for _, _, f in got)
        # the calls together cover the whole middle: every non-user message, plus the folded (oldest) users
        folded = r.record.get("users_folded") or 0
        users = [i for i, m in enumerate(middle) if m.get("role") == "user"][:folded]
        expected = [m for i, m in enumerate(middle) if not is_marker(m) and (m.get("role") != "user" or i in users)]
        if r.record.get("capped_runs"):
            continue
        cut = [m for m in seen if "omitted by microcompact: the summarizer's input limit" in content_text(m)]
        if not cut:
            assert units(seen) == units(expected)
        else:  # each run's share of the input limit: what is read is in order and nothing else
            rest = iter(units(expected))
            assert all(u in rest for u in units([m for m in seen if m not in cut]))
    assert set(checked.outcomes()) <= CHANGED | {"nothing_to_compact", "low_yield"}


@settings(max_examples=examples(80), **COMMON)
@given(messages=transcripts(max_turns=10), cfg=batch_configs(micro=False), cap=st.sampled_from([8, 1, 2]))
def test_batch_output_is_chronological_with_users_verbatim_and_pairs_whole(
    messages: list[dict[str, Any]], cfg: Config, cap: int
) -> None:
    """Property (issue 8.8): after a forced batch, user messages are the originals, individual (one output
    message per original, none joined) and in order; tool calls and results stay paired; each marker stands
    between the same two kept user messages as the work it summarizes (``Echo`` names the calls it got)."""
    cfg = cfg.with_overrides(compression={"batch_max_calls": cap})
    ledger = Ledger(counter(), messages)
    h, t = bounds(cfg, ledger)
    summ = Echo()
    b = BatchCompactor(cfg, summ, counter())
    Checked(b, cfg)
    result = b.compact(ledger, force=True)
    out = ledger.messages
    if result.outcome not in CHANGED or result.outcome == "pruned":
        return
    folded = result.record.get("users_folded") or 0
    originals = [strip(m) for m in messages if m.get("role") == "user"]
    middle_users = [i for i in range(h, t) if messages[i].get("role") == "user"]
    dropped = [strip(messages[i]) for i in middle_users[:folded]]
    assert [strip(m) for m in out if m.get("role") == "user"] == [m for m in originals if m not in dropped] or (
        folded and len([m for m in out if m.get("role") == "user"]) == len(originals) - folded
    )
    if not role_sequence_errors(messages):
        assert role_sequence_errors(out) == []
    user_at = {i for i in middle_users[folded:]}
    kept_positions = [i for i in range(h, t) if i in user_at]
    where = {tc["id"]: i for i, m in enumerate(messages) for tc in m.get("tool_calls") or ()}
    n_tail = len(messages) - t
    new_middle = out[h : len(out) - n_tail]
    for k, m in enumerate(new_middle):
        if not (is_marker(m) and marker_body(m).startswith("### Completed actions\n- call ")):
            continue  # (a capped run: the deterministic summary)
        ids = [i for i in marker_body(m).partition(": ")[2].split() if i in where]
        before_users = sum(1 for x in new_middle[:k] if not is_marker(x))
        low = kept_positions[before_users - 1] if before_users else h - 1
        high = kept_positions[before_users] if before_users < len(kept_positions) else t
        assert all(low < where[i] < high for i in ids), f"marker {k} holds work from elsewhere: {ids}"
    assert result.record["summarizer_calls"] <= cap


@settings(max_examples=examples(40), **COMMON)
@given(messages=transcripts(max_turns=8), cfg=batch_configs(micro=True))
def test_micro_batch_micro_keeps_one_rolling_summary(messages: list[dict[str, Any]], cfg: Config) -> None:
    """Micro passes, then a batch, then micro again: at most one micro marker, after the batch markers, at every
    hook; no batch marker's text inside the micro marker, and micro never reads a marker."""
    summ = Scribe()
    _s, checked = run_generated(messages, cfg, summ, set(), None)
    note(f"batch outcomes: {checked.outcomes()}, merges: {len(summ.merges)}")
    for exchange in summ.merges:
        assert not any(is_marker(m) for m in exchange)
        assert "USER" not in units(exchange)


@settings(max_examples=examples(30), **COMMON)
@given(messages=transcripts(max_turns=8), cfg=batch_configs(micro=False))
def test_failing_summarizer_never_changes_the_transcript_unless_at_risk(
    messages: list[dict[str, Any]], cfg: Config
) -> None:
    """With the model down, only pruning and (near the limit) the extractive fallback change anything."""
    summ = Failing()
    _s, checked = run_generated(messages, cfg, summ, set(), None, unique_lines=False)  # extractive fallback
    for r in checked.results:
        # The fallback always produces a valid, shorter summary (issue 8.8: it used to fail with "summary is
        # longer than everything it summarizes", or an empty summary, as outcome "error").
        assert r.outcome in {
            "pruned",
            "fallback",
            "user_floor_exceeded",
            "summarize_failed",
            "cooldown",
            "nothing_to_compact",
            "low_yield",
            "truncated",
        }, r.record
        if r.outcome == "user_floor_exceeded":  # a fold under the fallback says both
            assert r.record["fallback"] is True and r.record["users_folded"] >= 1
        if r.outcome in ("fallback", "user_floor_exceeded"):
            assert r.record["summarizer"] == "extractive"
            assert r.record["tokens_before"] >= (cfg.threshold_tokens() + cfg.model.context_length) / 2


def test_fallback_near_the_limit_always_compacts_even_without_extractable_facts() -> None:
    cfg = config(4096, protect_first_n=1, min_tail_messages=2)  # threshold 2,048; at risk from 3,072
    msgs = [system(), {"role": "user", "content": "hi"}]
    for i in range(64):
        msgs += [{"role": "assistant", "content": "ok fine " * 20}, {"role": "user", "content": f"u{i} more"}]
    ledger = Ledger(counter(), msgs)
    assert ledger.total >= 3_072
    b = BatchCompactor(cfg, Failing(), counter())
    result = b.compact(ledger)
    # 64 tiny runs between user messages would need 64 marker frames: the floor folds the oldest users, so the
    # outcome says so, and the fallback wrote the summary
    assert result.outcome == "user_floor_exceeded" and result.record["fallback"] is True, result.record


@settings(max_examples=examples(200), **COMMON)
@given(previous=st.text(max_size=400), texts=st.lists(st.text(max_size=60), min_size=1, max_size=6))
def test_batch_fallback_always_produces_a_valid_summary_no_longer_than_its_input(
    previous: str, texts: list[str]
) -> None:
    """Whatever the middle holds (tiny, empty, nothing extractable), the deterministic summary is usable."""
    b = BatchCompactor(config(), Failing(), counter())
    material = [{"role": "assistant", "content": t} for t in texts]
    bounded = b.bound_input(material)
    from microcompact.summarizers import render_exchange

    input_tokens = counter().count_text(render_exchange(bounded)) + counter().count_text(previous)
    text = b._fallback_text(previous, bounded, None, input_tokens)
    assert text.strip() and counter().count_text(text) <= max(input_tokens, 200)


def test_default_extractive_summarizer_compacts_plain_chat() -> None:
    msgs = [system(), {"role": "user", "content": "hi"}]
    for i in range(200):
        msgs += [{"role": "assistant", "content": "ok fine " * 20}, {"role": "user", "content": f"u{i} more"}]
    s = Session(config(), counter=counter(), messages=msgs)  # the default summarizer: extractive
    assert s.should_compress()
    result = s.before_request()[0]
    # one marker per tiny run between user messages costs more than the runs: the floor folds the oldest users
    assert result.outcome == "user_floor_exceeded" and result.record["users_folded"] >= 1
    assert s.tokens < s.config.threshold_tokens()


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


# --------------------------------------------------------------------------- faults, over real HTTP


def openai(server: ChatServer, timeout: float = 2.0) -> OpenAISummarizer:
    return OpenAISummarizer("summarizer-small", base_url=server.base_url, api_key_env=KEY_ENV, timeout=timeout)


def over_threshold(extra_turns: int = 0) -> list[dict[str, Any]]:
    # ~12K tokens: over the 10K threshold, under the 15K risk line; outputs too small to prune
    return build(19 + extra_turns, iterations=3, size=150)


def compactor(server: ChatServer, clock: FakeClock, timeout: float = 2.0, **cfg: Any) -> BatchCompactor:
    return BatchCompactor(config(**cfg), openai(server, timeout), counter(), clock=clock)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "local-test-key")


def test_model_summary_over_http(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    ledger = Ledger(counter(), over_threshold())
    Checked(b, b.config)
    result = b.compact(ledger)
    assert result.outcome == "compacted" and result.record["summarizer"] == "summarizer-small"
    # one request per run of work between kept user messages, the oldest beyond batch_max_calls extractive
    assert len(chat_server.requests) == result.record["summarizer_calls"] == b.cfg.batch_max_calls
    assert result.record["runs"] == result.record["summarizer_calls"] + result.record["capped_runs"]
    for request in chat_server.requests:
        assert request["messages"][0]["content"] == BATCH_PROMPT
        assert "PREVIOUS SUMMARY:\n(none)" in request["messages"][1]["content"]
    assert ledger.total < b.config.threshold_tokens()


def test_500_leaves_the_transcript_and_backs_off(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.add_faults(500)
    first = b.compact(ledger)
    assert first.outcome == "summarize_failed" and first.record["error"] == "SummarizerUnavailable"
    assert ledger.messages == before and len(chat_server.requests) == 1
    clock.advance(20)
    assert b.compact(ledger).outcome == "cooldown" and len(chat_server.requests) == 1
    clock.advance(11)  # 30 s after the failure
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


def test_timeouts_back_off_longer_each_time(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock, timeout=0.5)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    cooldowns = []
    for _ in range(3):
        chat_server.add_faults("hang")
        result = b.compact(ledger)
        assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerTimeout"
        cooldowns.append(b.backoff.until - clock())
        clock.advance(cooldowns[-1] - 1)
        assert b.compact(ledger).outcome == "cooldown"  # not yet
        clock.advance(1)
    assert cooldowns == [30.0, 60.0, 120.0]
    assert len(chat_server.requests) == 3
    assert b.compact(ledger).outcome == "compacted"
    assert b.backoff.timeouts == 0  # success resets the growth


def test_malformed_output_backs_off_shorter(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    chat_server.add_faults("malformed")
    result = b.compact(ledger)
    assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerBadOutput"
    malformed_cooldown = b.backoff.until - clock()
    assert 0 < malformed_cooldown < 30.0  # shorter than after a server error or a timeout
    clock.advance(malformed_cooldown)
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


@pytest.mark.parametrize("fault", [401, "quota"])
def test_auth_and_quota_errors_are_never_retried(
    chat_server: ChatServer, key: None, fault: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.add_faults(fault)
    outcomes = []
    for _ in range(5):
        outcomes.append(b.compact(ledger).outcome)
        clock.advance(3_600)
    assert outcomes == ["auth_failed"] * 5
    assert len(chat_server.requests) == 1, "retried after an authentication/quota error"
    assert ledger.messages == before
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "microcompact"]
    assert errors and KEY_ENV in errors[0]
    # near the limit the session goes on with the deterministic summary, still without asking the server
    ledger = Ledger(counter(), over_threshold(extra_turns=6))
    result = b.compact(ledger, prompt_tokens=16_000)
    assert result.outcome == "fallback" and result.record["summarizer"] == "extractive"
    assert len(chat_server.requests) == 1


def test_rate_limit_cools_down_then_retries(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    ledger = Ledger(counter(), over_threshold())
    chat_server.add_faults(429)
    assert b.compact(ledger).outcome == "summarize_failed"
    clock.advance(59)
    assert b.compact(ledger).outcome == "cooldown" and len(chat_server.requests) == 1
    clock.advance(1)
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


def test_summary_longer_than_its_input_is_rejected(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.responder = lambda body: "### Completed actions\n" + "- a very long bullet\n" * 10_000
    result = b.compact(ledger)
    assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerBadOutput"
    assert ledger.messages == before and marker_count(ledger.messages, "batch") == 0


def test_fallback_near_the_limit(chat_server: ChatServer, key: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    clock = FakeClock()
    b = compactor(chat_server, clock)
    checked = Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold(extra_turns=6))
    assert ledger.total >= 15_000  # halfway between the 10K threshold and the 20K limit
    chat_server.add_faults(500)
    result = b.compact(ledger)
    assert result.outcome == "fallback" and result.record["summarizer"] == "extractive"
    assert result.record["error"] == "SummarizerUnavailable" and len(chat_server.requests) == 1
    assert ledger.total < b.config.threshold_tokens()
    body = marker_body(next(m for m in ledger.messages if marker_kind(m) == "batch"))
    assert "### " in body and "make step" in body  # facts of the middle, extracted
    assert any("deterministic extractive summary" in r.getMessage() for r in caplog.records)
    # cooling down and at risk again: the fallback without asking the server
    ledger.splice(
        len(ledger.messages), len(ledger.messages), [m for t in range(6) for m in turn(30 + t, iterations=3, size=150)]
    )
    again = b.compact(ledger, prompt_tokens=15_500)
    assert again.outcome == "fallback" and len(chat_server.requests) == 1
    assert checked.outcomes() == ["fallback", "fallback"]
    # below the risk line a cooling summarizer changes nothing
    ledger2 = Ledger(counter(), over_threshold())
    assert b.compact(ledger2).outcome == "cooldown"


def test_secrets_in_the_middle_never_reach_the_server(chat_server: ChatServer, key: None) -> None:
    msgs = [*opening(), {"role": "user", "content": "deploy it"}]
    msgs += iteration(
        "s1",
        f"export OPENAI_API_KEY={OPENAI_KEY}\ndeployed, password=correcthorse42\nexit code 0",
        command=f"OPENAI_API_KEY={OPENAI_KEY} ./deploy.sh --password hunter2hunter2",
    )
    msgs += [
        {"role": "assistant", "content": f"Used token ghp_{'A1b2C3d4E5f6G7h8I9j0' * 2} to push."},
        {"role": "user", "content": "my db url is postgres://admin:s3cretPassw0rd@db:5432/app"},
    ]
    msgs += [m for n in range(14) for m in turn(n, size=200)]
    clock = FakeClock()
    b = compactor(chat_server, clock, batch_user_floor_ratio=0.0001)  # fold the user message too
    Checked(b, b.config)
    ledger = Ledger(counter(), msgs)
    result = b.compact(ledger, force=True, focus=f"the key {OPENAI_KEY}")
    assert result.outcome == "user_floor_exceeded"
    sent = json.dumps(chat_server.requests)
    assert "deploy.sh" in sent and "TOOL RESULT [s1]" in sent
    for secret in (OPENAI_KEY, "correcthorse42", "hunter2hunter2", "A1b2C3d4E5f6G7h8I9j0", "s3cretPassw0rd"):
        assert secret not in sent, secret


def test_focus_reaches_the_request_body(chat_server: ChatServer, key: None) -> None:
    s = Session(config(), openai(chat_server), counter=counter(), messages=build(10, size=150))
    result = s.compact(focus="the flaky auth test")
    assert result.outcome == "compacted" and result.record["reason"] == "on_demand"
    assert len(chat_server.requests) == result.record["summarizer_calls"] >= 2  # one per run of work
    for request in chat_server.requests:
        assert "FOCUS: the flaky auth test" in request["messages"][1]["content"]
        assert request["messages"][0]["content"] == BATCH_PROMPT
