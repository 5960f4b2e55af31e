"""The checks the proxy's end-to-end tests rely on (``anthropic_contract``) pass a faithful compacted view and
catch each way of breaking it, so a green end-to-end run means what it says."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from microcompact.messages import MARKER_PREFIX
from support.anthropic_contract import request_errors

EPHEMERAL = {"type": "ephemeral"}
MARKER = {"type": "text", "text": MARKER_PREFIX + " Steps 1 ran seq and printed numbers."}


def call(n: int, *, redacted: bool = False) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": f"Plan {n}.", "signature": f"sig-{n}"}]
    if redacted:
        blocks.append({"type": "redacted_thinking", "data": f"redacted-{n}"})
    blocks += [
        {"type": "text", "text": f"Step {n}."},
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"seq {n}"}},
    ]
    return {"role": "assistant", "content": blocks}


def result(n: int, **extra: Any) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"output {n}", **extra}
    return {"role": "user", "content": [block]}


def client_request() -> dict[str, Any]:
    """Claude Code's shape: system blocks with breakpoints, the prompt after a reminder, the environment as a
    system-role message with an extra field, then signed tool steps; the newest message has the breakpoint."""
    return {
        "model": "claude-opus-5-5",
        "system": [
            {"type": "text", "text": "billing"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": EPHEMERAL},
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "thinking": {"type": "adaptive"},
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>attribution</system-reminder>"},
                    {"type": "text", "text": "Run the steps."},
                ],
            },
            {"role": "system", "content": "cwd: /work", "output_config": {"effort": "medium"}},
            call(1),
            result(1),
            call(2, redacted=True),
            result(2, cache_control=EPHEMERAL),
        ],
    }


def compacted_view() -> dict[str, Any]:
    """What a faithful proxy sends: step 1 absorbed into a marker, which joins step 2's message after its
    thinking (roles must alternate), everything else as the client sent it."""
    body = client_request()
    messages = body["messages"]
    step2 = copy.deepcopy(messages[4])
    step2["content"].insert(2, MARKER)
    body["messages"] = [messages[0], messages[1], step2, messages[5]]
    return body


def test_the_clients_own_request_and_a_faithful_compacted_view_pass() -> None:
    assert request_errors(client_request(), client_request()) == []
    assert request_errors(client_request(), compacted_view()) == []


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _drop_message(i: int) -> Callable[[dict[str, Any]], None]:
    return lambda body: body["messages"].pop(i)


def _more_breakpoints(body: dict[str, Any]) -> None:
    body["system"][0]["cache_control"] = EPHEMERAL
    body["tools"][0]["cache_control"] = EPHEMERAL
    body["messages"][0]["content"][1]["cache_control"] = EPHEMERAL


def _marker_with_results(body: dict[str, Any]) -> None:
    body["messages"][3]["content"].insert(0, MARKER)


def _thinking_after_text(body: dict[str, Any]) -> None:
    blocks = body["messages"][2]["content"]
    blocks.insert(3, blocks.pop(0))


@pytest.mark.parametrize(
    ("breaks", "says"),
    [
        (_set(["system", 1, "text"], "You are someone else."), "top-level 'system' changed"),
        (_set(["metadata"], {"user_id": "x"}), "top-level 'metadata' changed"),
        (_set(["messages", 0, "content", 1, "text"], "Run the steps!"), "user or system text changed"),
        (_set(["messages", 0, "content", 0, "cache_control"], EPHEMERAL), "the head"),
        (_set(["messages", 1, "content"], [{"type": "text", "text": "cwd: /work"}]), "the head"),
        (_drop_message(1), "system-role entries inside messages were not kept"),
        (_set(["messages", 3, "content", 0, "cache_control"], None), "the newest message"),
        (_more_breakpoints, "5 cache breakpoints"),
        (_drop_message(3), "are not followed by their results"),
        (_marker_with_results, "a marker sits with the results"),
        (_set(["messages", 2, "content", 0, "signature"], "sig-forged"), "the thinking before toolu_2"),
        (_set(["messages", 2, "content", 1, "data"], "other"), "the thinking before toolu_2"),
        (_thinking_after_text, "thinking does not open the assistant message"),
    ],
)
def test_each_way_of_breaking_the_view_is_named(breaks: Callable[[dict[str, Any]], None], says: str) -> None:
    forwarded = compacted_view()
    breaks(forwarded)
    errors = request_errors(client_request(), forwarded)
    assert any(says in e for e in errors), errors
