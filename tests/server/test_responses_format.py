"""The Responses format's contract (issue 19), on generated Codex-like inputs: items map to session
messages and back losslessly (kept items are the client's own JSON), a reasoning item never leaves the
items that follow it, and a compacted view keeps every call with its output and every item it did not
shorten byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from microcompact.messages import validate_message
from microcompact.properties import tool_pairing_errors
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.responses_format import GROUP, ResponsesFormat, flatten, kind_of, pairing_problem
from microcompact.server.run import proxy_config
from microcompact.store import open_store
from support.strategies import examples, words_text

R = ResponsesFormat()
CALL_KINDS = ("function_call", "custom_tool_call", "local_shell_call")


@st.composite
def step(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """One model turn (reasoning, text, calls) and the outputs of its calls."""
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"enc-{n}"})
    if draw(st.booleans()):
        text = [{"type": "output_text", "text": draw(st.text(min_size=1, max_size=40))}]
        items.append({"type": "message", "role": "assistant", "id": f"msg_{n}", "content": text})
    outputs: list[dict[str, Any]] = []
    for c in range(draw(st.integers(1, 2))):
        kind, cid = draw(st.sampled_from(CALL_KINDS)), f"call_{n}_{c}"
        if kind == "function_call":
            items.append({"type": kind, "call_id": cid, "name": "exec_command", "arguments": json.dumps({"cmd": "ls"})})
        elif kind == "custom_tool_call":
            items.append({"type": kind, "call_id": cid, "name": "apply_patch", "input": "*** Begin Patch"})
        else:
            items.append(
                {"type": kind, "call_id": cid, "id": f"lsh_{n}", "action": {"type": "exec", "command": ["ls"]}}
            )
        output = draw(st.sampled_from(["short", "long", "long"]))
        result = draw(words_text(20, 4000)) if output == "long" else "ok"
        outputs.append({"type": kind.replace("_call", "_call_output"), "call_id": cid, "output": result})
    return items + outputs


@st.composite
def conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "The task."}]},
    ]
    for n in range(draw(st.integers(1, 16))):
        items += draw(step(n))
        extra = draw(st.sampled_from(["none", "none", "user", "compaction", "unknown", "answer"]))
        if extra == "user":
            items.append({"role": "user", "content": f"Next, {n}."})
        elif extra == "compaction":
            items.append({"type": "compaction", "encrypted_content": f"blob-{n}"})
        elif extra == "unknown":
            items.append({"type": "hologram_v9", "id": f"h{n}", "payload": {"n": n}})
        elif extra == "answer":
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Ok."}]})
            items.append({"role": "user", "content": "Go on."})
    return items


def _reasoning_kept_with_followers(items: list[dict[str, Any]]) -> bool:
    return all(
        i + 1 < len(items) and kind_of(items[i + 1]) == "model"
        for i, item in enumerate(items)
        if item.get("type") == "reasoning"
    )


@settings(max_examples=examples(100), deadline=None)
@given(items=conversation())
def test_items_map_to_session_messages_and_back_losslessly(items: list[dict[str, Any]]) -> None:
    assert pairing_problem(items) is None
    history = R.history({"input": items})
    assert flatten(history) == items, "grouping loses or reorders nothing"
    assert all(
        m["items"][0].get("type") != "reasoning" or len(m["items"]) > 1 for m in history if m.get("type") == GROUP
    )
    session: list[dict[str, Any]] = []
    for i, message in enumerate(history):
        parts = R.convert(message)
        assert len(parts) == R.part_count(message) == 1
        validate_message(parts[0], f"history[{i}]")
        assert R.rebuild(message, parts) is message, "a part kept whole is the client's own item"
        session += parts
    assert tool_pairing_errors(session) == [], "session messages pair as chat messages do"
    assert orjson.loads(R.body({"model": "m", "input": items}, history))["input"] == items


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=conversation())
def test_a_compacted_view_keeps_pairs_reasoning_and_the_clients_items(
    tmp_path: Path, items: list[dict[str, Any]]
) -> None:
    store = open_store(tmp_path / f"p{abs(hash(json.dumps(items))) % 10**9}.db")
    router = SessionRouter(proxy_config(None, 4096), store=store)
    compaction = Compaction(router, Metrics())
    try:
        body = {"model": "m", "input": items}
        prepared = compaction.prepare(R, body, "key", R.history(body))
        assert prepared.degraded in (None, "summarizer-failed"), prepared.degraded
        sent = flatten(prepared.messages)
        event("compacted" if any(i not in items for i in sent) else "sent as it came")
        assert pairing_problem(sent) is None and _reasoning_kept_with_followers(sent)
        assert sent[:2] == items[:2], "the head goes verbatim"
        users = [i for i in items if kind_of(i) in ("user", "system", "opaque")]
        assert [i for i in sent if kind_of(i) in ("user", "system", "opaque") and i in items] == users
        for item in sent:
            if item not in items:
                marker = item.get("role") == "assistant" and item.get("type") == "message" and "id" not in item
                assert marker or kind_of(item) in ("output", "model"), f"an item the client never sent: {item}"
    finally:
        router.close()
        store.close()
