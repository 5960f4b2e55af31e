"""The marker names the recall tools only when the client's request lists them (issue 26, item 4): in every
wire's shape of ``tools``, by the names the client gave them, with a capability made once per conversation
and kept in its meta, and a note that stays the same from request to request until the marker changes (it
sits in the cached prefix). Without the tools, the marker is the same text as before, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.keys import RECALL_META, ROW_KEY
from microcompact.messages import MARKER_PREFIX, RECALL_NOTE, marker_body, render_micro_marker, with_recall_note
from microcompact.recall_tools import RecallNotes, recall_tool_names
from microcompact.recall_tools.note import EXPAND_DESCRIPTION, RECALL_DESCRIPTION
from microcompact.store import StoreError, open_store
from support.recall_folds import KEY_A, FoldingProxy, new_history, notes_in, step, tools

PAIR = (("recall", RECALL_DESCRIPTION), ("expand", EXPAND_DESCRIPTION))


def shapes(prefix: str) -> dict[str, dict[str, Any]]:
    """The request bodies of each wire listing the two tools under ``prefix + name``."""
    return {
        "anthropic": {"tools": [{"name": prefix + n, "description": d, "input_schema": {}} for n, d in PAIR]},
        "chat": {"tools": tools(prefix)},
        "responses": {"tools": [{"type": "function", "name": prefix + n, "description": d} for n, d in PAIR]},
        "gemini": {"tools": [{"functionDeclarations": [{"name": prefix + n, "description": d} for n, d in PAIR]}]},
    }


@pytest.mark.parametrize("prefix", ["mcp__microcompact__", "mcp__recall-tools__", "mcp_microcompact_", ""])
@pytest.mark.parametrize("wire", ["anthropic", "chat", "responses", "gemini"])
def test_the_tools_are_found_in_every_wires_shape(wire: str, prefix: str) -> None:
    names = recall_tool_names(shapes(prefix)[wire])
    assert names is not None and (names.recall, names.expand) == (prefix + "recall", prefix + "expand")


def test_one_tool_alone_or_a_look_alike_is_not_enough() -> None:
    only_recall = {"tools": [{"name": "mcp__microcompact__recall", "description": RECALL_DESCRIPTION}]}
    other_server = {"tools": [{"name": f"mcp__notes__{n}", "description": "Search my notes."} for n, _ in PAIR]}
    longer_names = {"tools": [{"name": f"mcp__microcompact__{n}_all", "description": d} for n, d in PAIR]}
    for body in (only_recall, other_server, longer_names, {}, {"tools": "recall"}, {"tools": [[[[[[{}]]]]]]}):
        assert recall_tool_names(body) is None


def deferred(names: list[str], where: str = "message") -> dict[str, Any]:
    """A request as Claude Code sends it with MCP tools deferred: their names alone, one per line, in a
    system entry of ``messages`` (or the system prompt), and not in ``tools``."""
    text = "Deferred tools, load them with ToolSearch before calling them:\nWebFetch\n" + "\n".join(names) + "\n\nMore."
    body: dict[str, Any] = {"tools": [{"name": "ToolSearch", "description": "Fetches deferred tools."}]}
    if where == "message":
        body["messages"] = [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": text}]},
        ]
    else:
        body["system"] = [{"type": "text", "text": text}]
    return body


@pytest.mark.parametrize("where", ["message", "system"])
def test_a_deferred_listing_of_the_microcompact_server_counts(where: str) -> None:
    names = recall_tool_names(deferred(["mcp__microcompact__expand", "mcp__microcompact__recall"], where))
    assert names is not None and (names.recall, names.expand) == (
        "mcp__microcompact__recall",
        "mcp__microcompact__expand",
    )
    for listing in (
        ["mcp__microcompact__recall"],  # one of the two
        ["mcp__memory__recall", "mcp__memory__expand"],  # another server's tools of the same names
        ["mcp__microcompact__recall", "mcp__other_microcompact__expand"],  # two servers' halves
        ["see mcp__microcompact__recall and mcp__microcompact__expand"],  # mentioned in prose, not listed
    ):
        assert recall_tool_names(deferred(listing, where)) is None, listing
    user_says = {"messages": [{"role": "user", "content": "mcp__microcompact__recall\nmcp__microcompact__expand"}]}
    assert recall_tool_names(user_says) is None, "a user message cannot switch the note on"


def test_the_note_text_sits_between_the_frame_and_the_summary() -> None:
    marker = render_micro_marker("Read src/app.py; tests pass.")
    noted = with_recall_note(marker, "mcp__microcompact__recall", "mcp__microcompact__expand", "ab" * 12, "m42")
    note = (
        "The compacted originals are kept: search them with the tool mcp__microcompact__recall "
        f'(conversation="{"ab" * 12}", query) and read one with mcp__microcompact__expand '
        f'(conversation="{"ab" * 12}", handle); this summary is handle "m42".'
    )
    assert noted["content"] == marker["content"].replace(MARKER_PREFIX + "\n\n", f"{MARKER_PREFIX}\n\n{note}\n\n", 1)
    assert marker_body(noted) == marker_body(marker), "a summarizer never reads the note back as summary"
    assert noted["_mc"] == marker["_mc"] and "{" not in RECALL_NOTE.format(
        recall="", expand="", conversation="", handle=""
    )
    assert with_recall_note({"role": "assistant", "content": "hi"}, "r", "e", "c", "m1") == {
        "role": "assistant",
        "content": "hi",
    }


@given(st.text(max_size=300))
def test_the_note_never_changes_what_the_summary_says(body: str) -> None:
    marker = render_micro_marker(body)
    assert marker_body(with_recall_note(marker, "r", "e", "c" * 24, "m7")) == marker_body(marker)


def test_annotate_leaves_a_view_without_the_tools_alone(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    marker = {**render_micro_marker("summary"), ROW_KEY: 5}
    view = [{"role": "user", "content": "hi"}, marker]
    assert RecallNotes().annotate({"tools": []}, store, "s", view) == view
    assert store.session_meta("s") == {}, "no capability made for a client without the tools"
    store.close()


def test_a_store_that_cannot_keep_the_capability_sends_the_view_unchanged(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    store.close()
    marker = {**render_micro_marker("summary"), ROW_KEY: 5}
    with pytest.raises(StoreError):
        store.session_meta("s")
    assert RecallNotes().annotate(shapes("")["chat"], store, "s", [marker]) == [marker]


def test_through_the_proxy_the_note_comes_with_the_tools_and_stays_put(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    proxy = FoldingProxy(store, tmp_path)
    history = new_history("alpha")
    key = proxy.key(KEY_A, history)
    plain = {"model": "gpt-test"}
    listed = {"model": "gpt-test", "tools": tools()}
    for k in range(8):
        step(history, "alpha", k)
        if k >= 2:
            session_id, forwarded = proxy.request(plain, key, history)
    assert any(m.get("content", "").startswith(MARKER_PREFIX) for m in forwarded if m["role"] == "assistant")
    assert notes_in(forwarded) == [] and RECALL_META not in store.session_meta(session_id), "no tools, no note"
    _, first = proxy.request(listed, key, history)
    _, again = proxy.request(listed, key, history)  # the same history: no new fold
    assert [n.group(0) for n in notes_in(first)] == [n.group(0) for n in notes_in(again)] != []
    conversation = notes_in(first)[0].group(1)
    assert store.session_meta(session_id)[RECALL_META] == conversation
    for k in range(8, 12):
        step(history, "alpha", k)
        _, forwarded = proxy.request(listed, key, history)
    assert {n.group(1) for n in notes_in(forwarded)} == {conversation}, "one capability for the conversation's life"
    assert KEY_A not in conversation and session_id not in conversation
    proxy.close()
    store.close()


def test_a_library_caller_names_the_tools_itself(tmp_path: Path) -> None:
    from microcompact.recall_tools import RecallToolNames

    store = open_store(tmp_path / "s.db")
    store.create_session("s")
    marker = {**render_micro_marker("summary"), ROW_KEY: 5}
    noted = RecallNotes().named(RecallToolNames("recall", "expand"), store, "s", [marker])
    token = store.session_meta("s")[RECALL_META]
    assert noted == [with_recall_note(marker, "recall", "expand", token, "m5")]
    assert RecallNotes().named(RecallToolNames("recall", "expand"), None, "s", [marker]) == [marker]
    store.close()
