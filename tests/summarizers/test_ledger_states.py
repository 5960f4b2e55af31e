"""What a read taught, after a later step changed its file: the ledger says ``edited since`` (or deleted,
moved), in the span of the change and in earlier spans' lessons; a fresh read states the file again; a
defrag (the ledger re-read and compressed) keeps the newest state; and no such line is a stale claim."""

from __future__ import annotations

import json
from typing import Any

from microcompact.recall.stale import file_events, stale_claims
from microcompact.summarizers.facts import facts_block, parse_facts
from microcompact.summarizers.facts_model import ToolKind
from microcompact.tokens import EstimateCounter

estimate = EstimateCounter().count
PATH = "/w/app/lib/registry.py"
SOURCE = "     1→def start_registry(config):\n     2→    return Registry(config, pane_exists=True)\n"


def call(n: int, name: str, args: dict[str, Any], result: str, text: str = "") -> list[dict[str, Any]]:
    raw = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [
        {"role": "assistant", "content": text, "tool_calls": [raw]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": result},
    ]


def read(n: int, path: str = PATH, source: str = SOURCE) -> list[dict[str, Any]]:
    return call(n, "Read", {"file_path": path}, source)


def edit(n: int, path: str = PATH) -> list[dict[str, Any]]:
    args = {"file_path": path, "old_string": "def start_registry(config):", "new_string": "def boot_registry(config):"}
    return call(n, "Edit", args, "The file was updated")


def status_of(block: str, path: str = PATH) -> str:
    (lesson,) = [x for x in parse_facts(block).taught if x.kind is ToolKind.READ and x.subject == path]
    return lesson.status


def test_an_edit_after_a_read_in_the_same_span_marks_the_read_as_of_before() -> None:
    block = facts_block(None, read(1) + edit(2), 1000)
    assert status_of(block) == "edited since"
    assert "registry.py` → edited since: " in block and "start_registry" in block


def test_an_edit_in_a_later_span_marks_the_earlier_spans_read() -> None:
    first = facts_block(None, read(1), 1000)
    assert status_of(first) == ""
    assert status_of(facts_block(first, edit(2), 1000)) == "edited since"


def test_a_read_after_the_edit_is_current_again() -> None:
    assert status_of(facts_block(None, edit(1) + read(2), 1000)) == ""
    later = facts_block(
        facts_block(None, read(1) + edit(2), 1000), read(3, source="     1→def boot_registry(c):"), 1000
    )
    assert status_of(later) == ""
    assert "boot_registry" in later and "start_registry" not in later


def test_a_rewrite_or_sed_marks_the_read_but_a_failed_edit_does_not() -> None:
    write = call(2, "Write", {"file_path": PATH, "content": "def other():\n    pass\n"}, "File updated")
    assert status_of(facts_block(None, read(1) + write, 1000)) == "edited since"
    sed = call(2, "Bash", {"command": "sed -i 's/start/boot/' lib/registry.py"}, "")
    assert status_of(facts_block(None, read(1) + sed, 1000)) == "edited since"
    failed = call(2, "Edit", {"file_path": PATH, "old_string": "x", "new_string": "y"}, "Error: old_string not found")
    assert status_of(facts_block(None, read(1) + failed, 1000)) == ""


def test_a_delete_or_rename_after_an_edit_states_the_newest() -> None:
    edited = facts_block(None, read(1) + edit(2), 1000)
    assert status_of(facts_block(edited, call(3, "Bash", {"command": f"rm {PATH}"}, ""), 1000)) == "deleted since"
    moved = facts_block(edited, call(3, "Bash", {"command": f"git mv {PATH} /w/app/lib/boot.py"}, ""), 1000)
    assert status_of(moved) == "moved since"


def test_a_defrag_keeps_the_newest_state() -> None:
    reads = [m for n in range(10, 40) for m in read(n, f"/w/app/lib/other_{n}.py", f"     1→def helper_{n}():")]
    block = facts_block(None, read(1) + reads + edit(2), 10_000)
    summary = f"### Findings\n- the registry boots lazily\n\n{block}"
    condensed = facts_block(summary, (), 200, estimate)  # what a defrag does with the ledger
    assert estimate(condensed) <= 200
    assert status_of(condensed) == "edited since"
    assert "registry.py — edited" in condensed  # the file's own state is never dropped


def test_no_line_of_the_ledger_is_a_stale_claim() -> None:
    messages = [{"role": "user", "content": "rename the entry point"}, *read(1), *edit(2)]
    block = facts_block(None, messages[1:], 1000)
    events = file_events(messages)
    assert events and stale_claims(events, len(messages), block, [e.index for e in events]) == []
