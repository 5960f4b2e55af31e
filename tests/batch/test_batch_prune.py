"""Phase 1, prune: stubs for old tool outputs, de-duplication, shortened tool-call arguments that stay valid
JSON, and going on to the summarizer when pruning alone is not enough.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.batch import (
    BatchCompactor,
    plan_prune,
    shorten_arguments,
)
from microcompact.events import Prune
from microcompact.messages import (
    META_KEY,
    content_text,
)
from microcompact.tokens import Ledger
from support.batch_helpers import (
    COMMON,
    Checked,
    Scribe,
    build,
    call,
    config,
    counter,
    iteration,
    opening,
    turn,
)
from support.strategies import examples

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
