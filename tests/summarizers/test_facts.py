"""The facts a summary must never lose: extraction from real tool calls, the marker text round trip, merging,
the budget, and the ledger surviving many passes and defrags of the real engine."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.config import parse_config
from microcompact.messages import marker_body, marker_kind
from microcompact.session import Session, summarizer_for
from microcompact.summarizers import ExtractiveSummarizer, facts_block, prepare_exchange, with_facts
from microcompact.summarizers.facts import (
    CHANGED,
    Facts,
    Failure,
    FileFact,
    FolderFact,
    TestRun,
    compress_facts,
    extract_facts,
    merge_facts,
    parse_facts,
    render_facts,
)
from microcompact.summarizers.facts_model import ItemKind
from microcompact.summarizers.findings import findings, is_narration
from microcompact.tokens import EstimateCounter, TokenCounter
from support.strategies import examples

estimate = EstimateCounter().count


def exchange(*steps: tuple[str, dict[str, Any], str], text: str = "") -> list[dict[str, Any]]:
    """One assistant message per (tool, arguments, result) step, each followed by its result."""
    out: list[dict[str, Any]] = []
    for i, (name, args, result) in enumerate(steps):
        call = {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        out.append({"role": "assistant", "content": text if i == 0 else "", "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
    return out


# --------------------------------------------------------------------------- extraction


def test_claude_code_tools_give_each_file_its_last_state_and_a_gist() -> None:
    facts = extract_facts(
        exchange(
            ("Read", {"file_path": "/w/app/lib/a.ex"}, "     1→defmodule A do\n     2→  def run, do: :ok\n"),
            ("Edit", {"file_path": "/w/app/lib/a.ex", "old_string": "x", "new_string": "x\n  @limit 10"}, "ok"),
            ("Edit", {"file_path": "/w/app/lib/a.ex", "old_string": "y", "new_string": "  def stop, do: :ok"}, "ok"),
            ("Write", {"file_path": "/w/app/lib/b.ex", "content": "defmodule B do\nend"}, "File created successfully"),
            ("Write", {"file_path": "/w/app/lib/c.ex", "content": "x"}, "The file /w/app/lib/c.ex has been updated."),
            ("Grep", {"pattern": "TODO", "path": "/w/app/lib"}, "lib/a.ex:3"),
            ("Bash", {"command": "rm /w/app/old.txt && cat /w/app/README.md"}, ""),
        )
    )
    assert facts.files == {
        "/w/app/lib/a.ex": FileFact("/w/app/lib/a.ex", "edited", 2, "+ def stop, do: :ok"),
        "/w/app/lib/b.ex": FileFact("/w/app/lib/b.ex", "created", 0, "defines B"),
        "/w/app/lib/c.ex": FileFact("/w/app/lib/c.ex", "edited", 1, "+ x"),
        "/w/app/lib": FileFact("/w/app/lib", "searched", 0, "Grep 'TODO'"),
        "/w/app/old.txt": FileFact("/w/app/old.txt", "deleted", 0, "by 'rm /w/app/old.txt && cat /w/app/README.md'"),
        "/w/app/README.md": FileFact("/w/app/README.md", "read", 0, "by 'rm /w/app/old.txt && cat /w/app/README.md'"),
    }


def test_swe_agent_edits_go_to_the_file_it_opened() -> None:
    facts = extract_facts(
        exchange(
            ("open", {"path": "setup.py"}, "[File: setup.py (40 lines total)]\n1:def read(fname):"),
            ("create", {"filename": "reproduce.py"}, "[File: reproduce.py (1 lines total)]"),
            ("insert", {"text": "print(td_field.serialize('td_field', obj))"}, "[File: reproduce.py (9 lines)]"),
            ("find_file", {"file_name": "fields.py", "dir": "src"}, "Found 1 matches"),
            ("open", {"path": "src/marshmallow/fields.py"}, "1:class Field:"),
            ("edit", {"search": "return int(x)", "replace": "return int(round(x))"}, "File updated."),
            ("str_replace_editor", {"command": "view", "path": "/repo/tests/test_fields.py"}, "1 def test_x():"),
            ("str_replace_editor", {"command": "create", "path": "/repo/new.py", "file_text": "A = 1"}, "ok"),
        )
    )
    states = {path: (f.state, f.edits) for path, f in facts.files.items()}
    assert states == {
        "setup.py": ("read", 0),
        "reproduce.py": ("created", 1),
        "src": ("searched", 0),
        "src/marshmallow/fields.py": ("edited", 1),
        "/repo/tests/test_fields.py": ("read", 0),
        "/repo/new.py": ("created", 0),
    }
    assert facts.files["src/marshmallow/fields.py"].gist == "+ return int(round(x))"
    assert facts.files["setup.py"].gist == "defines read"


def test_failing_commands_keep_exit_status_and_the_line_that_says_why() -> None:
    facts = extract_facts(
        exchange(
            (
                "Bash",
                {"command": "git push 2>&1"},
                "Exit code 128\nfatal: The current branch x has no upstream branch.",
            ),
            (
                "Bash",
                {"command": "python app.py"},
                "Traceback (most recent call last):\n  x\nKeyError: 'id'\nexit code 1",
            ),
            ("Bash", {"command": "mix credo --strict"}, "Exit code 2\nChecking 3 files ...\n\n40 mods, found 1 issue."),
            ("Edit", {"file_path": "a.py"}, "<tool_use_error>String to replace not found in file.</tool_use_error>"),
        )
    )
    assert facts.failures == [
        Failure("git push 2>&1", "exit 128", "fatal: The current branch x has no upstream branch."),
        Failure("python app.py", "exit 1", "KeyError: 'id'"),
        Failure("mix credo --strict", "exit 2", "40 mods, found 1 issue."),
        Failure("Edit a.py", "error", "String to replace not found in file."),
    ]
    assert "a.py" not in facts.files  # the edit failed: nothing changed


def test_test_runs_are_counts_and_a_later_success_resolves_an_error() -> None:
    facts = extract_facts(
        exchange(
            ("Bash", {"command": "pytest -q 2>&1 | tail -3"}, "=== 2 failed, 10 passed in 1.2s ===\nexit code 1"),
            ("Bash", {"command": "mix test"}, "Finished in 2.2 seconds\n14 doctests, 297 tests, 11 failures"),
            ("Bash", {"command": "npx jest"}, "Tests:       1 failed, 12 passed, 13 total"),
            ("Bash", {"command": "git push"}, "Exit code 128\nfatal: no upstream branch"),
            ("Bash", {"command": "git push --set-upstream origin main"}, "branch 'main' set up to track"),
            ("Bash", {"command": "make"}, "Exit code 2\nerror: boom"),
            ("Bash", {"command": "pytest -q"}, "12 passed in 1.0s"),
        )
    )
    assert facts.tests == [TestRun("mix test", 286, 11), TestRun("npx jest", 12, 1), TestRun("pytest -q", 12, 0)]
    assert [(f.command, f.resolved) for f in facts.failures] == [
        ("pytest -q 2>&1 | tail -3", True),  # the same tests passed later
        ("git push", True),  # retried with more arguments, and it worked
        ("make", False),
    ]
    later = merge_facts(facts, extract_facts(exchange(("Bash", {"command": "make 2>&1"}, "built"))))
    assert [(f.command, f.resolved) for f in later.failures][-1] == ("make", True)
    again = merge_facts(later, extract_facts(exchange(("Bash", {"command": "make"}, "Exit code 2\nerror: b2"))))
    assert again.failures[-1] == Failure("make", "exit 2", "error: b2")  # failing again: open again


def test_arguments_cut_to_bound_the_summarizer_input_still_name_the_file() -> None:
    big = exchange(("Write", {"file_path": "/w/src/big.py", "content": "x = 1\n" * 8_000}, "File created"))
    prepared = prepare_exchange(big, 500, estimate)
    assert "omitted by microcompact" in prepared[0]["tool_calls"][0]["function"]["arguments"]
    assert list(extract_facts(prepared).files) == ["/w/src/big.py"]


# --------------------------------------------------------------------------- the marker text


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
_NAME = st.builds(lambda stem, ext: f"{stem}.{ext}", _WORD, st.sampled_from(["py", "ex", "ts", "md"]))
_LINE = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-+=()'.:/,", min_size=1, max_size=10), max_size=6
).map(" ".join)


@st.composite
def facts_strategy(draw: st.DrawFn) -> Facts:
    """Facts in canonical form (what extraction and parsing produce): one-line texts, no backticks."""
    absolute = draw(st.booleans())
    root = draw(st.sampled_from(["/home/u/proj/", "/srv/app/", "/a/"])) if absolute else ""

    def path(name: str) -> str:
        return root + "/".join([*draw(st.lists(_WORD, max_size=3)), name])

    files: dict[str, FileFact] = {}
    for name in draw(st.lists(_NAME, max_size=12)):
        p = path(name)
        state = draw(st.sampled_from(["created", "edited", "deleted", "read", "searched"]))
        edits = draw(st.integers(0, 12)) if state in ("created", "edited") else 0
        files[p] = FileFact(p, state, edits, draw(_LINE))
    folders: dict[str, FolderFact] = {}
    for folder_name in draw(st.lists(_WORD, max_size=3)):
        folder = path(folder_name) + "/"
        names = tuple(dict.fromkeys(draw(st.lists(_NAME, max_size=4))))
        folders[folder] = FolderFact(folder, len(names) + draw(st.integers(0 if names else 1, 30)), names)
    failures = [
        Failure(draw(_LINE.filter(bool)), draw(st.sampled_from(["error", "exit 1", "exit 128", "exit -9"])), reason, ok)
        for reason, ok in draw(st.lists(st.tuples(_LINE, st.booleans()), max_size=5))
    ]
    tests = [
        TestRun(cmd, p, f)
        for cmd, p, f in draw(
            st.lists(st.tuples(_LINE.filter(bool), st.integers(0, 999), st.integers(0, 99)), max_size=3)
        )
    ]
    return Facts(files, {p: f for p, f in folders.items() if p not in files}, failures, tests)


def changed_paths(facts: Facts) -> set[str]:
    return {p for p, f in facts.files.items() if f.state in CHANGED}


@settings(max_examples=examples(100), deadline=None)
@given(facts=facts_strategy(), prose=st.sampled_from(["", "### Findings\n- the cache is stale because X"]))
def test_render_then_parse_gives_back_the_same_facts(facts: Facts, prose: str) -> None:
    text = with_facts(prose, render_facts(facts))
    parsed = parse_facts(text)
    assert parsed == facts
    assert list(parsed.files) == list(facts.files)  # order too: least recently touched first
    assert with_facts(text, "") == prose  # the prose is left exactly as it was


@settings(max_examples=examples(100), deadline=None)
@given(old=facts_strategy(), new=facts_strategy(), budget=st.integers(0, 400))
def test_merge_and_compress_never_drop_a_changed_file(old: Facts, new: Facts, budget: int) -> None:
    merged = merge_facts(old, new)
    assert changed_paths(new) <= changed_paths(merged)
    # a file changed before keeps a changed state whatever happens to it later (a read does not undo an edit)
    assert changed_paths(old) <= set(merged.files) and all(merged.files[p].state in CHANGED for p in changed_paths(old))
    compressed = compress_facts(merged, budget, estimate)
    assert changed_paths(merged) == changed_paths(compressed)
    assert changed_paths(parse_facts(render_facts(compressed))) == changed_paths(merged)


def test_file_bullets_written_before_the_ledger_are_kept() -> None:
    old = "### Files\n- src/a.py — read, edited\n- src/b.py — written\n- README.md — mentioned\n- src/c.py — read"
    assert parse_facts(old).files == {
        "src/a.py": FileFact("src/a.py", "edited", 1, ""),
        "src/b.py": FileFact("src/b.py", "created", 0, ""),
        "src/c.py": FileFact("src/c.py", "read", 0, ""),
    }


def test_compression_folds_files_only_read_first_and_keeps_every_edited_file() -> None:
    facts = Facts()
    for i in range(60):
        facts.touch(FileFact(f"/w/app/lib/read_{i}.ex", "read", 0, f"defines Module{i}, run, stop"))
    for i in range(20):
        facts.touch(FileFact(f"/w/app/lib/edit_{i}.ex", "edited", 2, f"+ def changed_{i}, do: :ok"))
    full = estimate(render_facts(facts))
    budget = 400
    compressed = compress_facts(facts, budget, estimate)
    text = render_facts(compressed)
    assert estimate(text) <= budget < full
    assert all(f"edit_{i}.ex — edited 2x" in text for i in range(20))
    assert "- /w/app/lib/ — 60 read or searched: read_0.ex, read_1.ex" in text  # folded under the folder, named
    tiny = render_facts(compress_facts(facts, 0, estimate))  # over any budget: still every changed file
    assert all(f"edit_{i}.ex — edited 2x" in tiny for i in range(20))
    assert "- /w/app/ — 60 read or searched" in tiny  # the last step: folders merged two levels down


def test_facts_block_puts_the_facts_beside_model_prose_in_one_line() -> None:
    previous = with_facts(
        "### Findings\n- old finding",
        render_facts(
            extract_facts(
                exchange(
                    ("Edit", {"file_path": "src/a.py", "new_string": "x = 2"}, "ok"),
                )
            )
        ),
    )
    work = exchange(("Bash", {"command": "pytest -q"}, "3 passed in 0.1s"))
    model_prose = "### Findings\n- a model's prose\n\n### Files\n- src/made_up.py — edited 9x"  # it rewrote the ledger
    summary = with_facts(model_prose, facts_block(previous, work, 500))
    assert summary == (
        "### Findings\n- a model's prose\n\n"
        "### Files\n- src/a.py — edited 1x: + x = 2\n\n"
        "### Test runs\n- `pytest -q` → 3 passed, 0 failed"
    )


# --------------------------------------------------------------------------- findings, not narration


def test_defrag_keeps_the_ledger_when_the_model_condenses_it_away() -> None:
    class Forgetful(ExtractiveSummarizer):
        """Merges like the extractive summarizer; condenses like a model that drops the facts."""

        name = "forgetful-model"

        def condense(self, summary: str, target_tokens: int) -> str:
            return "### Findings\n- condensed"

    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_defrag_threshold_tokens": 200},
            "model": {"context_length": 30_000},
        }
    )
    session = Session(config, Forgetful(), counter=TokenCounter(EstimateCounter()))
    results = []
    for n in range(12):
        for m in coding_turn(n):
            session.append(m)
        results += session.finalize_turn()
    defrags = [r for r in results if r.outcome == "defrag"]
    assert defrags and all(r.record["defrag_method"] == "model" for r in defrags)
    body = marker_body(next(m for m in session.transcript if marker_kind(m) == "micro"))
    assert "- condensed" in body
    edited = {p for p, f in parse_facts(body).files.items() if f.state == "edited"}
    assert len(edited) >= 5 and edited == {f"/w/app/src/mod_{i}.py" for i in range(len(edited))}


def test_findings_keep_conclusions_and_drop_narration() -> None:
    prose = (
        "Let me check the fixture and fix the test. Let me first install happy-dom. Perfect! "
        "Now I'll run the tests. Great, all green.\n"
        "The test fails because the fixture is async. "
        "The issue is that `uuid` is generated on every sync, so the upsert never matches. "
        "I'll use happy-dom instead of jsdom since the suite needs no layout."
    )
    assert findings(prose) == [
        "The test fails because the fixture is async.",
        "The issue is that `uuid` is generated on every sync, so the upsert never matches.",
        "I'll use happy-dom instead of jsdom since the suite needs no layout.",
    ]
    assert is_narration("Now let me look at the router.") and is_narration("Perfect!")


def test_requirements_come_only_from_the_user_and_empty_sections_are_left_out() -> None:
    work = exchange(("Bash", {"command": "ls"}, "a.py"), text="The API must stay stable. Let me look around.")
    summary = ExtractiveSummarizer().merge("### Decisions\n\n### Findings\n- kept", work)
    assert "### Requirements" not in summary and "### Decisions" not in summary
    assert "- The API must stay stable." in summary  # a finding, not a requirement
    batch = ExtractiveSummarizer().batch("", [{"role": "user", "content": "Never touch prod. Fix the login bug."}])
    assert "### Constraints and preferences\n- Never touch prod." in batch


# --------------------------------------------------------------------------- the engine


def coding_turn(n: int) -> list[dict[str, Any]]:
    """A user request, then reads, an edit and a command with long outputs, with prose around them."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"request {n}: go on"}]
    steps = [
        ("Read", {"file_path": f"/w/app/src/mod_{n}.py"}, f"def f{n}():\n" + "    x = 1\n" * 150),
        ("Edit", {"file_path": f"/w/app/src/mod_{n}.py", "new_string": f"def f{n}(): return {n}"}, "updated"),
        ("Bash", {"command": f"pytest tests/test_{n}.py"}, "collected\n" + ". " * 300 + f"\n{n} passed in 0.1s"),
    ]
    for i, (name, args, result) in enumerate(steps):
        cid = f"t{n}_{i}"
        call = {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        text = f"Step {i} of request {n}: the module needs a new return value because the API changed."
        msgs.append({"role": "assistant", "content": text, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
    msgs.append({"role": "assistant", "content": f"Done with request {n}."})
    return msgs


def test_a_file_edited_in_pass_one_is_still_named_after_pass_fifty() -> None:
    config = parse_config(
        {
            "compression": {
                "micro_compact": True,
                "protect_first_n": 1,
                "micro_compact_defrag_threshold_tokens": 200,
            },
            "model": {"context_length": 30_000},
        }
    )
    session = Session(config, counter=TokenCounter(EstimateCounter()))
    outcomes: list[str] = []
    for n in range(60):
        for m in coding_turn(n):
            if m["role"] == "assistant":
                outcomes += [r.outcome for r in session.before_request()]
            session.append(m)
        outcomes += [r.outcome for r in session.finalize_turn()]
    assert outcomes.count("absorbed") >= 50
    assert outcomes.count("defrag") >= 10
    marker = next(m for m in session.transcript if marker_kind(m) == "micro")
    body = marker_body(marker)
    ledger = parse_facts(body)
    edited = {p for p, f in ledger.files.items() if f.state == "edited"}
    first_absorbed = 1  # mod_0.py sits in the head's first turn; mod_1.py is what pass 1 took
    assert f"/w/app/src/mod_{first_absorbed}.py" in edited
    last_absorbed = max(int(p.rsplit("_", 1)[1].removesuffix(".py")) for p in edited)
    assert edited >= {f"/w/app/src/mod_{i}.py" for i in range(first_absorbed, last_absorbed + 1)}
    assert estimate(body) <= 400 + 400  # prose shortened to fit; the ledger only grows with changed files
    # Restarted from the transcript alone: the same ledger is read back from the marker text.
    resumed = Session(config, messages=session.transcript, counter=TokenCounter(EstimateCounter()))
    resumed.micro.recover(resumed.ledger.messages)
    assert parse_facts(resumed.micro.state.text) == ledger


def test_the_ledger_budget_scales_with_the_defrag_threshold() -> None:
    facts = Facts()
    for i in range(160):
        facts.touch(FileFact(f"/w/app/lib/read_{i}.ex", "read", 0, f"defines Module{i}, run, stop"))
    previous = render_facts(facts)
    work = exchange(("Edit", {"file_path": "/w/app/lib/a.ex", "new_string": "x = 1"}, "ok"))

    def ledger_under(threshold: int) -> str:
        config = parse_config({"compression": {"micro_compact_defrag_threshold_tokens": threshold}})
        summarizer = summarizer_for(config, TokenCounter(EstimateCounter()))
        return summarizer.merge(previous, work)

    small, large = ledger_under(200), ledger_under(4_000)
    assert "read or searched" in small and "read or searched" not in large  # folded only when it must be
    # LEDGER_MULTIPLE times the threshold (the window unknown): 800 tokens, then 16,000
    assert estimate(render_facts(parse_facts(small))) <= 800 < estimate(render_facts(parse_facts(large)))
    assert "a.ex — edited 1x" in small and "a.ex — edited 1x" in large


def test_a_result_kept_in_place_is_absorbed_with_what_the_summary_says_it_used() -> None:
    """Folding by use absorbs the replies after a kept result first; its values the summary's prose names
    (what those replies said) count as used when the result itself is absorbed later."""
    output = "batch 7 done\nrelease id 5521907 signed\nchecksum 7f3c9a2e\nrows 88120 written"
    result = exchange(("Bash", {"command": "./deploy --batch 7"}, output))
    alone = parse_facts(facts_block("### Findings\n- the deploy is waiting for review", result, 1_000))
    said = parse_facts(facts_block("### Findings\n- release 5521907 goes out first", result, 1_000))
    (plain,) = alone.taught
    (used,) = said.taught
    assert "5521907" not in plain.items.get(ItemKind.USED, [])
    assert used.items.get(ItemKind.USED) == ["5521907"]
