"""The ledger on a real session: ``cc_fa812bfe`` replayed through the library ``Session`` with the extractive
summarizer. Every file the absorbed work edited and did not delete is in the final marker as changed,
every file it deleted is marked deleted, and the marker keeps what the agent used of its reads."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.messages import Message, marker_body, marker_kind
from microcompact.replay import load_transcript, replay
from microcompact.session import Session
from microcompact.summarizers.facts import parse_facts
from microcompact.summarizers.facts_model import ItemKind, ToolKind
from microcompact.summarizers.facts_taught import TAUGHT
from microcompact.tokens import EstimateCounter, TokenCounter
from support.paths import NORMALIZED

SESSION = NORMALIZED / "cc_fa812bfe.jsonl"
EDITS = {"Edit", "MultiEdit", "Write", "NotebookEdit"}


def absorbed_calls(messages: list[Message], view: list[Message]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, result) of the calls the compacted view no longer holds, in order."""
    kept = {str(c.get("id")) for m in view for c in m.get("tool_calls") or ()}
    results = {str(m.get("tool_call_id")): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    out = []
    for m in messages:
        for call in m.get("tool_calls") or ():
            cid = str(call.get("id"))
            if cid not in kept and cid in results:
                function = call["function"]
                out.append((function["name"], json.loads(function["arguments"] or "{}"), results[cid]))
    return out


def last_changes(calls: list[tuple[str, dict[str, Any], str]]) -> dict[str, tuple[str, str]]:
    """Each path's last change among ``calls`` and where it was moved from, by plain rules of this test:
    "edited" for a successful Edit or Write, "deleted" for ``rm`` of it, "renamed" for ``mv old new``
    of two file names (the old path then has no state)."""
    last: dict[str, tuple[str, str]] = {}
    for name, args, result in calls:
        if result.lstrip().startswith("<tool_use_error>"):
            continue
        if name in EDITS and args.get("file_path"):
            last[args["file_path"]] = ("edited", "")
        if name == "Bash" and "Exit code" not in result:
            for segment in args.get("command", "").split("&&"):
                words = [w for w in shlex.split(segment.split("||")[0]) if not w.startswith("-")]
                if words[:1] == ["rm"]:
                    last.update({w: ("deleted", "") for w in words[1:]})
                if words[:1] == ["mv"] and len(words) == 3 and "." in words[2].rsplit("/", 1)[-1]:
                    last.pop(words[1], None)
                    last[words[2]] = ("renamed", words[1])
    return last


@pytest.fixture(scope="module")
def replayed() -> tuple[list[Message], Session]:
    if not SESSION.exists():
        pytest.skip(f"shared transcripts not found at {SESSION}")
    messages = load_transcript(SESSION)
    config = parse_config({"compression": {"micro_compact": True}, "model": {"context_length": 200_000}})
    session = Session(config, counter=TokenCounter(EstimateCounter()))
    replay(messages, session)
    return messages, session


def test_every_file_the_absorbed_work_edited_or_deleted_is_in_the_marker_in_its_last_state(
    replayed: tuple[list[Message], Session],
) -> None:
    messages, session = replayed
    view = session.ledger.messages
    marker = next(m for m in reversed(view) if marker_kind(m) == "micro")
    files = parse_facts(marker_body(marker)).files
    changes = last_changes(absorbed_calls(messages, view))
    edited = {p for p, (change, _) in changes.items() if change == "edited"}
    deleted = {p for p, (change, _) in changes.items() if change == "deleted"}
    renamed = {p: origin for p, (change, origin) in changes.items() if change == "renamed"}
    assert len(edited) >= 10 and deleted and renamed  # the session's absorbed work did all three
    for path in edited:
        assert path in files and files[path].state in ("created", "edited"), path
    for path in deleted:
        assert path in files and files[path].state == "deleted", path
    for path, origin in renamed.items():  # scripts/tail_wrapper.sh moved to priv/scripts/
        assert files[path].state == "renamed" and files[path].origin == origin, path
        assert origin not in files  # the old path is never stated as current


def test_the_marker_keeps_what_the_agent_used_of_what_tools_showed(replayed: tuple[list[Message], Session]) -> None:
    _, session = replayed
    marker = next(m for m in reversed(session.ledger.messages) if marker_kind(m) == "micro")
    body = marker_body(marker)
    assert f"### {TAUGHT}" in body
    taught = parse_facts(body).taught
    # Reads' lessons rank below what commands failed with when the ledger is full (facts_text.TAUGHT_FLOOR:
    # bench/fidelity.py's failing commands stay named); this session's ledger is full.
    assert ToolKind.COMMAND in {lesson.kind for lesson in taught}
    assert sum(len(lesson.items.get(ItemKind.USED, [])) for lesson in taught) >= 10
