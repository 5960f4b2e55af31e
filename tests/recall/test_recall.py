"""Future-reference recall on hand-made transcripts: one test per rule (the source of an identifier, what a
reply's targets are, presence in a prompt, the totals), and properties over generated sessions."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from microcompact.recall import (
    IdentifierReader,
    RecallTotals,
    RequestRecall,
    Source,
    first_sources,
    message_key,
    missing_from,
    reply_indexes,
    reply_targets,
    request_recall,
)


def call(call_id: str, command: str, text: str = "") -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "Bash", "arguments": arguments}}],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


SESSION: list[dict[str, Any]] = [
    {"role": "system", "content": "Work in repo_root/main.py only."},
    {"role": "user", "content": "Fix user_settings in the app."},
    call("c1", "ls src/app"),
    result("c1", "handlers.py\nsession_store.py\nuser_settings.py"),
    call("c2", "cat src/app/session_store.py", "Reading session_store.py for user_settings."),
    result("c2", "def open_session(): return SessionRegistry()\nPORT = 40213"),
    {"role": "assistant", "content": "open_session builds a SessionRegistry on 40213; see repo_root/main.py."},
]


def test_each_identifier_belongs_to_the_first_message_holding_it() -> None:
    sources = first_sources(SESSION)
    assert sources["repo_root/main.py"] is Source.SYSTEM
    assert sources["user_settings"] is Source.USER  # said by the user before any tool printed it
    assert sources["src/app"] is Source.AGENT  # the agent wrote the path before a tool showed anything in it
    assert sources["session_store.py"] is Source.TOOL  # first printed by ls, then used by the agent
    assert sources["SessionRegistry"] is Source.TOOL
    assert sources["40213"] is Source.TOOL


def test_an_identifier_the_agent_writes_first_is_the_agents_even_if_a_tool_echoes_it() -> None:
    session = [
        {"role": "user", "content": "Go."},
        call("c1", "touch new_module.py"),
        result("c1", "created new_module.py"),
        {"role": "assistant", "content": "new_module.py exists now."},
    ]
    assert first_sources(session)["new_module.py"] is Source.AGENT
    assert reply_targets(session)[3] == frozenset()


def test_a_replys_targets_are_its_identifiers_a_tool_taught_including_call_argument_values() -> None:
    targets = reply_targets(SESSION)
    assert set(targets) == {2, 4, 6} == set(reply_indexes(SESSION))
    # message 4: its text names user_settings (the user's) and session_store.py (ls printed it); its call's
    # argument value names src/app/session_store.py, the agent's own spelling, first seen there.
    assert targets[4] == {"session_store.py"}
    assert targets[6] == {"open_session", "SessionRegistry", "40213"}  # repo_root/main.py is the system's
    assert targets[2] == frozenset()


def test_presence_is_by_the_identifier_rule_in_any_message_of_the_prompt() -> None:
    targets = frozenset({"open_session", "SessionRegistry", "40213"})
    summary = {"role": "assistant", "content": "Summary: src/app/session_store.py defines open_session."}
    lookalike = {"role": "assistant", "content": "my_open_session and SessionRegistryFactory on 402131"}
    assert missing_from(targets, SESSION[:6]) == frozenset()
    assert missing_from(targets, [SESSION[1], summary]) == {"SessionRegistry", "40213"}
    assert missing_from(targets, [lookalike]) == targets  # a longer identifier does not hold a shorter one


def test_presence_reads_tool_call_argument_values() -> None:
    prompt = [call("c9", "grep -n open_session src")]
    assert missing_from({"open_session"}, prompt) == frozenset()


def test_request_recall_and_pooled_totals() -> None:
    targets = reply_targets(SESSION)
    full = [request_recall(i, targets[i], SESSION[:i]) for i in reply_indexes(SESSION)]
    note = {"role": "assistant", "content": "Noted: open_session is the entry point."}
    cut = [request_recall(4, targets[4], SESSION[:2]), request_recall(6, targets[6], [*SESSION[:4], note])]
    assert [r.recall for r in full] == [None, 1.0, 1.0]
    assert RecallTotals.of(full) == RecallTotals(requests=3, targets=4, present=4, losing=0)
    assert cut[0].missing == {"session_store.py"}
    assert cut[1].missing == {"SessionRegistry", "40213"}
    assert RecallTotals.of(cut) == RecallTotals(requests=2, targets=4, present=1, losing=2)
    assert RecallTotals.of(cut).recall == 0.25
    assert (RecallTotals.of(full) + RecallTotals.of(cut)).recall == 5 / 8


def test_an_empty_total_has_no_recall() -> None:
    assert RecallTotals().recall is None
    assert RequestRecall(0, frozenset(), frozenset()).recall is None


def test_message_key_ignores_ids_and_metadata_but_not_text() -> None:
    a = call("c1", "ls src")
    b = {**call("other-id", "ls src"), "_mc": {"x": 1}}
    assert message_key(a) == message_key(b)
    assert message_key(a) != message_key(call("c1", "ls lib"))


_WORDS = st.sampled_from(["alpha_beta", "GammaDelta", "src/x/y.py", "40213", "plain", "6e3cdee1", "words"])
_MESSAGES = st.lists(
    st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]), st.lists(_WORDS, max_size=4)), max_size=12
)


@given(_MESSAGES)
def test_the_full_history_always_holds_every_target(raw: list[tuple[str, list[str]]]) -> None:
    session = [{"role": role, "content": " ".join(words)} for role, words in raw]
    read = IdentifierReader()
    targets = reply_targets(session, read)
    for i, found in targets.items():
        assert missing_from(found, session[:i], read) == frozenset()
        assert all(first_sources(session)[x] is Source.TOOL for x in found)
