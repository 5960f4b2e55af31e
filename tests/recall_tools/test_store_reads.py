"""The store's reads behind the recall tools, on both backends: every one stays inside the session it is
given, matches what it is asked literally (``%`` and ``_`` are characters, not patterns), and a meta lookup
tells "none" from "more than one"."""

from __future__ import annotations

import pytest

from microcompact.events import Absorb, Span
from microcompact.messages import render_micro_marker


def folded(store, sid: str, texts: list[str]) -> list[dict]:
    """``texts`` as tool results after one call each, all but the last exchange absorbed by one marker."""
    msgs: list[dict] = [{"role": "user", "content": "go"}]
    for k, text in enumerate(texts):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": text},
        ]
    msgs.append({"role": "assistant", "content": "done"})
    store.append(sid, msgs)
    stored = store.load_active(sid)
    end = len(stored) - 1
    event = Absorb(Span(1, end, 0, ()), None, render_micro_marker("s"), "s", tuple(range(1, end)))
    store.archive_and_compact(sid, event, stored)
    return store.export(sid, include_absorbed=True)


def test_reads_stay_inside_their_session(store_factory) -> None:
    store = store_factory.open()
    mine = folded(store, "mine", ["alpha 100% done", "alpha_beta"])
    theirs = folded(store, "theirs", ["alpha 100% done", "alphaXbeta"])
    their_rows = [m["_row"] for m in theirs]
    assert store.rows_by_id("mine", their_rows) == []
    assert [m["_row"] for m in store.rows_by_id("mine", [mine[2]["_row"], *their_rows])] == [mine[2]["_row"]]
    assert {m["_row"] for m in store.rows_between("mine", 0, 100)} == {m["_row"] for m in mine}
    found = store.absorbed_matching("mine", ["ALPHA"], 50)
    assert found and {m["_row"] for m in found} <= {m["_row"] for m in mine}, "case-free, this session only"
    assert all(m["_state"] == "absorbed" and "_mc" not in m for m in found), "originals, never the marker"


def test_needles_are_literal(store_factory) -> None:
    store = store_factory.open()
    folded(store, "s", ["alpha_beta", "alphaXbeta", "100% sure", "1000 sure"])
    assert [m["content"] for m in store.absorbed_matching("s", ["alpha_beta"], 10)] == ["alpha_beta"]
    assert [m["content"] for m in store.absorbed_matching("s", ["100%"], 10)] == ["100% sure"]
    assert store.absorbed_matching("s", ["", "  "], 10) == [] and store.absorbed_matching("s", ["alpha"], 0) == []


def test_a_meta_value_finds_its_session_and_says_when_it_is_not_one(store_factory) -> None:
    store = store_factory.open()
    for sid, value in (("a", "v1"), ("b", "v2"), ("c", "v2")):
        store.create_session(sid, {"recall_conversation": value})
    assert store.sessions_with_meta("recall_conversation", "v1") == ["a"]
    assert store.sessions_with_meta("recall_conversation", "v2") == ["b", "c"]
    assert store.sessions_with_meta("recall_conversation", "nope") == []
    with pytest.raises(ValueError, match="not a plain name"):
        store.sessions_with_meta("x') OR 1=1 --", "v1")


def test_an_old_identifier_is_found_behind_many_newer_word_matches(store_factory) -> None:
    from microcompact.recall_tools import Originals, conversation_token
    from microcompact.recall_tools.reader import CANDIDATES

    store = store_factory.open()
    texts = ["build log: the_needle_symbol failed"] + [f"build log line {k}" for k in range(CANDIDATES + 20)]
    rows = folded(store, "s", texts)
    token = conversation_token(store, "s")
    found = Originals(store).recall(token, "the_needle_symbol build log").splitlines()
    oldest = next(m["_row"] for m in rows if m.get("content") == texts[0])
    assert found[1].startswith(f"m{oldest} tool result: ") and "the_needle_symbol" in found[1]
