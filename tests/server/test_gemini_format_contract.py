"""The Gemini format's contract on generated tool loops (hypothesis): a view holding everything forwards the
client's own contents; a view that folded any run of whole iterations into a marker keeps every other part
exactly as sent (thought signatures included), the first user content first, calls and responses paired
part for part, and never carries the proxy's pairing ids upstream."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from microcompact.identity import digest, tagged_parts
from microcompact.server.gemini_format import CALLS_KEY, GeminiFormat
from microcompact.server.view import outgoing_messages, unchanged
from support.gemini_server import contents_problem, pairing_errors

FORMAT = GeminiFormat()
MARKER = {"role": "assistant", "content": "[summary of earlier steps]"}

names = st.sampled_from(["ls", "read_file", "run_shell_command"])
texts = st.text("abc xyz", min_size=1, max_size=20)


@st.composite
def step(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """One iteration: a model content (maybe a thought, maybe text, 1-3 calls, the first signed) and the user
    content answering it (responses in any order, maybe with ids)."""
    calls = draw(st.lists(names, min_size=1, max_size=3))
    with_ids = draw(st.booleans())
    parts: list[dict[str, Any]] = []
    if draw(st.booleans()):
        parts.append({"text": draw(texts), "thought": True, "thoughtSignature": f"T{n}"})
    if draw(st.booleans()):
        parts.append({"text": draw(texts)})
    for j, name in enumerate(calls):
        call: dict[str, Any] = {"name": name, "args": {"n": n, "j": j}}
        if with_ids:
            call["id"] = f"id-{n}-{j}"
        parts.append({"functionCall": call, **({"thoughtSignature": f"S{n}"} if j == 0 else {})})
    answers = [
        {
            "functionResponse": {
                "name": name,
                "response": {"output": f"{name} {n}.{j}"},
                **({"id": f"id-{n}-{j}"} if with_ids else {}),
            }
        }
        for j, name in enumerate(calls)
    ]
    order = draw(st.permutations(range(len(answers)))) if with_ids else range(len(answers))
    return [{"role": "model", "parts": parts}, {"role": "user", "parts": [answers[k] for k in order]}]


@st.composite
def loops(draw: st.DrawFn) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "<ctx>"}, {"text": "run the steps"}]}]
    for n in range(draw(st.integers(1, 8))):
        contents += draw(step(n))
    return contents


def session_view(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        part
        for hid, content in enumerate(history)
        for part in tagged_parts(content, hid, digest(content), FORMAT.convert)
    ]


@given(loops())
def test_a_whole_view_forwards_the_clients_own_contents(contents: list[dict[str, Any]]) -> None:
    body = {"contents": contents, "generationConfig": {"temperature": 0}}
    history = FORMAT.history(body)
    assert FORMAT.passthrough_reason(body) is None
    outgoing = outgoing_messages(FORMAT, body, history, session_view(history))
    assert unchanged(history, outgoing)
    assert json.loads(FORMAT.body(body, outgoing)) == body


@given(loops(), st.data())
def test_a_folded_view_keeps_every_other_part_as_sent(contents: list[dict[str, Any]], data: st.DataObject) -> None:
    body = {"contents": contents}
    history = FORMAT.history(body)
    view = session_view(history)
    iterations = (len(contents) - 1) // 2
    first = data.draw(st.integers(0, iterations - 1))
    last = data.draw(st.integers(first, iterations - 1))
    folded = {1 + 2 * k for k in range(first, last + 1)} | {2 + 2 * k for k in range(first, last + 1)}
    kept = [m for m in view if m["_hid"] not in folded]
    at = next(i for i, m in enumerate(kept) if m["_hid"] > 2 * first) if last < iterations - 1 else len(kept)
    outgoing = outgoing_messages(FORMAT, body, history, [*kept[:at], MARKER, *kept[at:]])
    assert FORMAT.view_problem(outgoing) is None
    sent = json.loads(FORMAT.body(body, outgoing))["contents"]
    assert all(CALLS_KEY not in c for c in sent)
    assert sent[0] == contents[0]
    assert pairing_errors(sent) == []
    issued = {p["thoughtSignature"] for c in contents for p in c["parts"] if "thoughtSignature" in p}
    assert contents_problem(sent, issued) is None, "Gemini's own rules: turns, counts, signatures"
    expected = [p for i, c in enumerate(contents) if i not in folded for p in c["parts"]]
    got = [p for c in sent for p in c["parts"] if p.get("text") != MARKER["content"]]
    assert got == expected, "every kept part byte for byte, in order"
