"""The proxy's format converters and outgoing-view builder, one behaviour per test: what is kept goes out
as the client's own blocks, what was absorbed or shortened is rebuilt from the original, usage is read
from any chunking of a stream, and a conversation keeps its key while its breakpoints move."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from microcompact.identity import tagged
from microcompact.messages import META_KEY, render_marker
from microcompact.server.anthropic_format import AnthropicFormat
from microcompact.server.errors import BadRequest
from microcompact.server.forward import client_headers, upstream_headers
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.provider import identity_form, stripped
from microcompact.server.session_key import session_key
from microcompact.server.usage_tap import UsageTap
from microcompact.server.view import outgoing_messages

A = AnthropicFormat()
OA = OpenAIFormat()
EPHEMERAL = {"type": "ephemeral"}

THINKING = {"type": "thinking", "thinking": "Plan.", "signature": "sig=="}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat big.log"}}
ASSISTANT = {"role": "assistant", "content": [THINKING, {"type": "text", "text": "Reading."}, CALL]}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 500}
REMINDER = {"type": "text", "text": "<system-reminder>todo</system-reminder>", "cache_control": EPHEMERAL}
MIXED_USER = {"role": "user", "content": [RESULT, REMINDER]}


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": []},
        {"role": "user", "content": [RESULT]},
        MIXED_USER,
        {"role": "user", "content": [RESULT, {**RESULT, "tool_use_id": "toolu_2"}]},
        ASSISTANT,
        {"role": "assistant", "content": "plain"},
        {"role": "system", "content": "an instruction"},
    ],
)
def test_part_count_is_what_convert_makes(message: dict[str, Any]) -> None:
    assert A.part_count(message) == len(A.convert(message))


def test_a_user_message_of_tool_results_and_text_becomes_tool_messages_then_the_user() -> None:
    parts = A.convert(MIXED_USER)
    assert [p["role"] for p in parts] == ["tool", "user"]
    assert parts[0]["tool_call_id"] == "toolu_1" and parts[1]["content"] == [REMINDER]
    assistant = A.convert(ASSISTANT)[0]
    assert assistant["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command": "cat big.log"}'}
    assert assistant["content"][0] == THINKING


def test_absorbed_tool_results_leave_the_users_blocks_exactly_as_sent() -> None:
    user_part = A.convert(MIXED_USER)[1]
    rebuilt = A.rebuild(MIXED_USER, [user_part])
    assert rebuilt == {"role": "user", "content": [REMINDER]}
    assert rebuilt["content"][0] is REMINDER


def test_a_stubbed_tool_result_keeps_its_id_and_breakpoint_with_the_stub_text() -> None:
    marked = {"role": "user", "content": [{**RESULT, "cache_control": EPHEMERAL}]}
    stub = {"role": "tool", "tool_call_id": "toolu_1", "content": "[Bash output: 500 chars]", META_KEY: {"stub": True}}
    rebuilt = A.rebuild(marked, [stub])
    assert rebuilt["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "[Bash output: 500 chars]",
            "cache_control": EPHEMERAL,
        }
    ]


def test_shortened_arguments_and_cut_text_leave_thinking_untouched() -> None:
    part = A.convert(ASSISTANT)[0]
    short = {**part, META_KEY: {"shortened": True}}
    short["tool_calls"] = [{**part["tool_calls"][0], "function": {"name": "Bash", "arguments": '{"command": "cat"}'}}]
    rebuilt = A.rebuild(ASSISTANT, [short])
    assert rebuilt["content"][0] is THINKING and rebuilt["content"][2]["input"] == {"command": "cat"}
    cut = {**part, "content": "Rea[...]", META_KEY: {"cut": True}}
    rebuilt = A.rebuild(ASSISTANT, [cut])
    assert rebuilt["content"] == [THINKING, {"type": "text", "text": "Rea[...]"}, CALL]


def test_a_marker_before_an_assistant_message_merges_after_its_thinking() -> None:
    marker = A.render(render_marker("Earlier work.", "micro"))
    merged = A.normalize({}, [{"role": "user", "content": "go"}, marker, ASSISTANT])
    assert len(merged) == 2
    kinds = [b["type"] for b in merged[1]["content"]]
    assert kinds == ["thinking", "text", "text", "tool_use"]
    assert merged[1]["content"][1]["text"].startswith("[CONTEXT COMPACTION]")


def test_consecutive_user_messages_merge_in_order() -> None:
    merged = A.normalize({}, [{"role": "user", "content": "first"}, {"role": "user", "content": [REMINDER]}])
    assert merged == [{"role": "user", "content": [{"type": "text", "text": "first"}, REMINDER]}]


def test_at_most_four_breakpoints_the_oldest_dropped_first() -> None:
    body = {"system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}]}
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": str(i), "cache_control": EPHEMERAL}],
        }
        for i in range(5)
    ]
    before = copy.deepcopy(messages)
    limited = A.normalize(body, messages)
    assert [bool(m["content"][0].get("cache_control")) for m in limited] == [False, False, True, True, True]
    assert messages == before, "the client's dicts are never changed"


def test_outgoing_view_spells_kept_messages_with_the_clients_own_dicts() -> None:
    history = [{"role": "user", "content": "Start."}, ASSISTANT, MIXED_USER, {"role": "assistant", "content": "Done."}]
    session: list[dict[str, Any]] = []
    for hid, message in enumerate(history):
        session += [tagged(part, hid, "d") for part in A.convert(message)]
    marker = render_marker("Ran cat big.log.", "micro")
    view = [session[0], marker, session[3], session[4]]  # the call and its result absorbed
    out = outgoing_messages(A, {}, history, view)
    assert out[0] is history[0] and out[-1] is history[-1]
    assert out[1]["role"] == "assistant" and out[1]["content"][0]["text"].startswith("[CONTEXT COMPACTION]")
    assert out[2] == {"role": "user", "content": [REMINDER]}
    whole = outgoing_messages(A, {}, history, session)
    assert all(a is b for a, b in zip(whole, history, strict=True))


def test_openai_keeps_every_field_of_a_kept_message_and_sends_shortened_ones_as_the_session_holds_them() -> None:
    history = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning": "r",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "long " * 100, "name": "f"},
    ]
    view = [tagged(m, i, "d") for i, m in enumerate(history)]
    view[2] = {"role": "tool", "tool_call_id": "c", "content": "[f output]", META_KEY: {"stub": True}, "_hid": 2}
    out = outgoing_messages(OA, {}, history, view)
    assert out[0] is history[0] and out[1] is history[1]
    assert out[2] == {"role": "tool", "tool_call_id": "c", "content": "[f output]"}


def sse(*events: dict[str, Any]) -> bytes:
    import json

    return b"".join(b"event: e\r\ndata: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events)


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_stream_usage_is_read_whatever_the_chunking(size: int) -> None:
    start = {
        "type": "message_start",
        "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 90}},
    }
    delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "usage"}}
    stream = sse(start, delta, {"type": "message_delta", "usage": {"output_tokens": 5}}, {"type": "message_stop"})
    tap = UsageTap("text/event-stream; charset=utf-8", A)
    for i in range(0, len(stream), size):
        tap.feed(stream[i : i + size])
    assert tap.finish() == 1000


def test_openai_usage_from_the_final_chunk_or_the_json_body() -> None:
    tap = UsageTap("text/event-stream", OA)
    tap.feed(
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":42}}\n\ndata: [DONE]\n\n'
    )
    assert tap.finish() == 42
    body = UsageTap("application/json", OA)
    body.feed(b'{"usage": {"prompt_tokens"')
    body.feed(b": 7}}")
    assert body.finish() == 7
    assert UsageTap("application/json", OA).finish() is None


def test_the_key_survives_moving_breakpoints_and_headers_win() -> None:
    first = {
        "system": "S",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}],
    }
    later = {"system": "S", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, ASSISTANT]}
    key = session_key({}, "anthropic", stripped(A.key_material(first)))
    assert key == session_key({}, "anthropic", stripped(A.key_material(later))) and key.startswith("anthropic-")
    assert session_key({"x-claude-code-session-id": "cc-1"}, "anthropic", None) == "cc-1"
    assert (
        session_key({"x-microcompact-session": "mine", "x-claude-code-session-id": "cc-1"}, "anthropic", None) == "mine"
    )
    with pytest.raises(BadRequest, match="x-microcompact-session"):
        session_key({"x-microcompact-session": "bad\x00id"}, "openai", None)
    assert (
        identity_form(first["messages"][0]) == identity_form(later["messages"][0]) == {"role": "user", "content": "hi"}
    )
    spelled_as_string = {"system": "S", "messages": [{"role": "user", "content": "hi"}]}
    assert key == session_key({}, "anthropic", stripped(A.key_material(spelled_as_string)))


def test_a_lone_text_block_and_a_string_are_the_same_message() -> None:
    environment = {"role": "system", "content": "cwd: /work", "output_config": {"effort": "medium"}}
    first_time = {**environment, "content": [{"type": "text", "text": "cwd: /work", "cache_control": EPHEMERAL}]}
    assert identity_form(first_time) == environment
    assert identity_form(environment) is environment
    two_blocks = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert identity_form(two_blocks) is two_blocks
    cited = {"role": "user", "content": [{"type": "text", "text": "a", "citations": []}]}
    assert identity_form(cited) is cited


def test_a_view_that_splits_a_tool_pair_is_caught_before_it_goes_out() -> None:
    answer = {"role": "user", "content": [RESULT]}
    assert A.view_problem([{"role": "user", "content": "go"}, ASSISTANT, answer]) is None
    assert "not answered" in (A.view_problem([ASSISTANT, {"role": "user", "content": "next"}]) or "")
    assert "without its tool_use" in (A.view_problem([{"role": "user", "content": "go"}, answer]) or "")
    openai_call = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}
    assert OA.view_problem([openai_call, {"role": "tool", "tool_call_id": "c", "content": "x"}]) is None
    assert OA.view_problem([openai_call, {"role": "user", "content": "x"}])


def test_headers_forwarded_both_ways_without_hop_by_hop_or_the_proxys_own() -> None:
    sent = [
        ("Authorization", "Bearer sk-1"),
        ("x-api-key", "k"),
        ("anthropic-beta", "a,b"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"),
        ("Host", "proxy"),
        ("Content-Length", "10"),
        ("Accept-Encoding", "gzip, br"),
        ("X-Microcompact-Session", "s"),
        ("X-Microcompact-Key", "secret"),
    ]
    up = upstream_headers(sent)
    assert up == [
        ("Authorization", "Bearer sk-1"),
        ("x-api-key", "k"),
        ("anthropic-beta", "a,b"),
        ("accept-encoding", "identity"),
    ]
    back = client_headers(
        [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"), ("retry-after", "3")],
        {"x-microcompact-session": "s"},
    )
    assert back == [(b"content-type", b"text/event-stream"), (b"retry-after", b"3"), (b"x-microcompact-session", b"s")]
