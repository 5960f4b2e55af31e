"""A resumed agent session through ``serve``: the user's later turns, sent the way ``claude --continue``
re-spells a history, must not make every fold write the shared prefix again.

The engine keeps each user message verbatim and, once the exchanges around it are folded, before the
marker: after a second user turn the part every fold shares is system, head *and* that message. No
breakpoint of the client's ever stands at its end (Claude Code marks the system prompt and the newest
message only; the entry its first request wrote ends at the head and dies in an idle gap), so a breakpoint
on the marker's whole text (which every fold changes) left each later fold reading the system prompt alone
and writing everything after it again, as the bench's idle rows showed (24k task: 25.5K written per fold
after the first gap against 15.4K before it)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx

from microcompact.messages import MARKER_PREFIX
from microcompact.server.breakpoints import marker_position
from support.proxy_server import ProxyServer
from upstream import Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.usage import request_units, unit_tokens

EPHEMERAL = {"type": "ephemeral"}
TOOLS = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object", "properties": {}}}]
SYSTEM = [{"type": "text", "text": "system prompt " * 400, "cache_control": EPHEMERAL}]
STEPS_PER_TURN = 10


def as_sent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as Claude Code sends it: the breakpoint on the newest message's last block only, and an
    older message of one lone text block spelled as a plain string (as it re-spells a resumed history)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        content = message["content"]
        newest = i == len(messages) - 1
        if newest:
            content = [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]
        elif len(content) == 1 and set(content[0]) == {"type", "text"}:
            content = content[0]["text"]
        out.append({"role": message["role"], "content": content})
    return out


def run_turns(proxy: ProxyServer, upstream: ScriptedUpstream, turns: int) -> None:
    """``turns`` user turns of STEPS_PER_TURN tool steps each, every turn ending with a text answer, the
    next one starting with a new user message (``--continue``) on the same session id."""
    for turn in range(turns):
        upstream.enqueue(
            *[
                Reply((Text(f"Step {turn}.{n}."), ToolCall("Bash", {"command": f"seq {n}"})))
                for n in range(STEPS_PER_TURN)
            ],
            text(f"Turn {turn} done; say when to go on."),
        )
    messages: list[dict[str, Any]] = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for turn in range(turns):
            ask = "Run the steps." if turn == 0 else "Go on with the steps. My notes: " + "note " * 1500
            messages.append({"role": "user", "content": [{"type": "text", "text": ask}]})
            while True:
                body = {
                    "model": "m",
                    "max_tokens": 100,
                    "tools": TOOLS,
                    "system": SYSTEM,
                    "messages": as_sent(messages),
                }
                answer = client.post("/v1/messages", json=body, headers={"x-session-id": "resumed-session"})
                assert answer.status_code == 200, answer.text
                reply = answer.json()
                messages.append({"role": "assistant", "content": reply["content"]})
                calls = [b for b in reply["content"] if b["type"] == "tool_use"]
                proxy.settle()
                if not calls:
                    break
                output = "\n".join(f"{turn}.{len(messages)} line {i} " + "x" * 60 for i in range(120))
                result = {"type": "tool_result", "tool_use_id": calls[0]["id"], "content": output}
                messages.append({"role": "user", "content": [result]})


def before_marker_tokens(body: dict[str, Any]) -> int:
    """Tokens of everything before the marker's text (tools, system, the messages before it, and the
    blocks of the marker's message before it): the prefix every fold with the same head shares."""
    where = marker_position(body["messages"])
    assert where is not None
    i, j = where
    before = {**body, "messages": body["messages"][:i]}
    head = sum(unit_tokens(u) for u in request_units(before))
    blocks = body["messages"][i]["content"]
    opening = blocks[: max(j, 0)] if isinstance(blocks, list) else []
    return head + sum(unit_tokens(b) for b in opening)


def pre_marker(body: dict[str, Any]) -> str:
    where = marker_position(body["messages"])
    assert where is not None
    return json.dumps(body["messages"][: where[0]], sort_keys=True)


def marker_text(body: dict[str, Any]) -> str:
    return "".join(json.dumps(m, sort_keys=True) for m in body["messages"] if MARKER_PREFIX in json.dumps(m))


def test_folds_after_a_later_user_turn_read_the_prefix_they_share(tmp_path: Path):
    with (
        ScriptedUpstream(min_cacheable=0) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=40_000) as proxy,
    ):
        run_turns(proxy, upstream, 3)
    sent = [r for r in upstream.generation_requests() if r.body and r.usage]
    with_marker = [r for r in sent if MARKER_PREFIX in json.dumps(r.body["messages"])]
    # A fold: the marker's text differs from the previous request's (the view switched).
    folds = [
        r
        for k, r in enumerate(sent)
        if r in with_marker and (k == 0 or marker_text(sent[k - 1].body) != marker_text(r.body))
    ]
    assert len(folds) >= 3, f"only {len(folds)} folds"
    # Folds after the second user turn's message went before the marker, each on the same prefix as the fold
    # before it (the head did not change in between).
    second_turn = [
        (earlier, later)
        for earlier, later in itertools.pairwise(folds)
        if pre_marker(earlier.body) == pre_marker(later.body) and "Go on with the steps." in pre_marker(later.body)
    ]
    assert second_turn, "no two folds shared a head holding the later user message"
    for _, later in second_turn:
        shared = before_marker_tokens(later.body)
        assert later.usage["cache_read_input_tokens"] >= shared, (
            f"a fold read {later.usage['cache_read_input_tokens']} of the {shared} tokens it shares with the last fold"
        )
