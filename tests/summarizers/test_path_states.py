"""The ledger's path states: whatever sequence of writes, edits, reads, deletes and renames the absorbed
work did, over however many passes, the rendered ledger states each path in its last state only."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.summarizers.facts import CHANGED, extract_facts, facts_block, parse_facts
from microcompact.summarizers.facts_model import FileFact
from support.strategies import examples

PATHS = ("/w/app/a.py", "/w/app/b.py", "/w/app/lib/c.py", "/w/app/lib/d.py")


def call(n: int, name: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    cid = f"c{n}"
    raw = {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [raw]},
        {"role": "tool", "tool_call_id": cid, "content": result},
    ]


Op = tuple[str, str, str]  # (verb, path, target)


def messages_of(n: int, op: Op) -> list[dict[str, Any]]:
    verb, path, target = op
    name = path.rsplit("/", 1)[1].removesuffix(".py")
    if verb == "write":
        return call(n, "Write", {"file_path": path, "content": f"def {name}_v{n}():\n    pass"}, "File created")
    if verb == "edit":
        args = {"file_path": path, "old_string": "pass", "new_string": f"return {n}"}
        return call(n, "Edit", args, "The file was updated")
    if verb == "read":
        return call(n, "Read", {"file_path": path}, f"     1→def {name}_seen_{n}():")
    if verb == "rm":
        return call(n, "Bash", {"command": f"rm {path}"}, "")
    return call(n, "Bash", {"command": f"{verb} {path} {target}"}, "")  # "mv" or "git mv"


def expected(ops: list[Op]) -> dict[str, tuple[str, str]]:
    """Each path's last state (and the path it was renamed from), by the plain meaning of the operations."""
    state: dict[str, tuple[str, str]] = {}
    for verb, path, target in ops:
        now, origin = state.get(path, ("", ""))
        if verb == "write":
            state[path] = ("created", "")
        elif verb == "edit":
            state[path] = ("created", origin) if now == "created" else ("edited", origin)
        elif verb == "read":
            state[path] = (now, origin) if now in CHANGED else ("read", "")
        elif verb == "rm":
            state[path] = ("deleted", "")
        else:
            state.pop(path, None)
            state[target] = ("renamed", path)
    return state


ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "edit", "read", "rm", "mv", "git mv"]),
        st.sampled_from(PATHS),
        st.sampled_from(PATHS),
    ).filter(lambda op: op[0] not in ("mv", "git mv") or op[1] != op[2]),
    min_size=1,
    max_size=14,
)


@settings(max_examples=examples(150), deadline=None)
@given(ops=ops, cuts=st.lists(st.integers(1, 13), max_size=4))
def test_the_ledger_states_each_path_in_its_last_state_only(ops: list[Op], cuts: list[int]) -> None:
    spans = [0, *sorted({c for c in cuts if c < len(ops)}), len(ops)]
    summary: str | None = None
    for start, end in pairwise(spans):
        messages = [m for n in range(start, end) for m in messages_of(n, ops[n])]
        summary = facts_block(summary, messages, 10_000)
    assert summary is not None
    stated = {path: (fact.state, fact.origin) for path, fact in parse_facts(summary).files.items()}
    want = expected(ops)
    assert stated == want
    moved_away = {origin for _, origin in want.values() if origin and origin not in want}
    for lesson in parse_facts(summary).taught:  # a read of a file since gone says so
        if want.get(lesson.subject, ("", ""))[0] == "deleted":
            assert lesson.status == "deleted since"
        elif lesson.subject in moved_away:
            assert lesson.status == "moved since"


@settings(max_examples=examples(60), deadline=None)
@given(ops=ops)
def test_under_a_tight_budget_changed_paths_stay_and_none_is_stale(ops: list[Op]) -> None:
    messages = [m for n, op in enumerate(ops) for m in messages_of(n, op)]
    stated = parse_facts(facts_block(None, messages, 40)).files
    want = expected(ops)
    assert {p for p, (s, _) in want.items() if s in CHANGED} <= set(stated)
    for path, fact in stated.items():
        assert (fact.state, fact.origin) == want[path]


def test_a_renamed_file_is_listed_under_its_new_name_with_where_it_came_from() -> None:
    messages = call(1, "Edit", {"file_path": "/w/app/old.py", "old_string": "a", "new_string": "b"}, "updated")
    messages += call(2, "Bash", {"command": "git mv /w/app/old.py /w/app/new.py && mv /w/app/x.txt /w/app/docs/"}, "")
    block = facts_block(None, messages, 1000)
    assert "- new.py — renamed from old.py, edited 1x: + b" in block
    assert "- docs/x.txt — renamed from x.txt" in block
    assert "old.py —" not in block and "\n- x.txt" not in block
    assert parse_facts(block).files["/w/app/new.py"] == FileFact("/w/app/new.py", "renamed", 1, "+ b", "/w/app/old.py")


def test_an_edit_after_a_read_does_not_state_what_the_read_saw_as_current() -> None:
    messages = call(1, "Read", {"file_path": "/w/app/a.py"}, "     1→def old_entry_point():")
    messages += call(2, "Edit", {"file_path": "/w/app/a.py", "old_string": "x = 1", "new_string": "x = 1"}, "ok")
    fact = extract_facts(messages).files["/w/app/a.py"]
    assert fact.state == "edited" and "old_entry_point" not in fact.gist


def test_an_edit_that_removes_a_quoted_line_does_not_leave_it_stated() -> None:
    first = {"file_path": "/w/app/a.py", "old_string": "x = 1", "new_string": "x = 1\ny = compute_total(a, b)"}
    second = {"file_path": "/w/app/a.py", "old_string": "x = 1\ny = compute_total(a, b)", "new_string": "x = 1"}
    previous = facts_block(None, call(1, "Edit", first, "updated"), 1000)
    assert "+ y = compute_total(a, b)" in previous
    fact = parse_facts(facts_block(previous, call(2, "Edit", second, "updated"), 1000)).files["/w/app/a.py"]
    assert (fact.state, fact.edits, fact.gist) == ("edited", 2, "")
