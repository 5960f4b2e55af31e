"""Markers, to_api and the invariant checks, each on its own."""

import pytest

from microcompact.contract import role_sequence_errors, tool_pairing_errors, user_message_errors
from microcompact.messages import (
    MARKER_PREFIX,
    TranscriptError,
    marker_body,
    marker_kind,
    render_marker,
    render_micro_marker,
    to_api,
    validate_message,
)


def call(cid, name="Bash", args='{"command": "ls"}'):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def test_to_api_strips_underscore_keys_and_copies():
    m = {"role": "assistant", "content": "x", "_mc": {"marker": "micro"}, "_tokens": 5}
    out = to_api([m])
    assert out == [{"role": "assistant", "content": "x"}]
    assert "_mc" in m  # caller's dict untouched


def test_to_api_strict_alternation_joins_users_and_merges_marker_into_next_assistant():
    marker = render_micro_marker("did things")
    msgs = [
        {"role": "user", "content": "first"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        marker,
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
    ]
    assert role_sequence_errors(msgs) == []
    assert role_sequence_errors(msgs, strict_alternation=True)
    api = to_api(msgs, strict_alternation=True)
    assert [m["role"] for m in api] == ["user", "assistant", "tool"]
    assert api[0]["content"] == [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert api[1]["content"].startswith(MARKER_PREFIX) and api[1]["tool_calls"][0]["id"] == "a"
    assert role_sequence_errors(api, strict_alternation=True) == []


def test_marker_recognised_by_metadata_only():
    micro = render_micro_marker("body text")
    batch = render_marker("batch body", "batch")
    assert marker_kind(micro) == "micro" and marker_kind(batch) == "batch"
    exported_micro = {"role": "assistant", "content": micro["content"]}  # metadata stripped: plain text
    assert marker_kind(exported_micro) is None
    assert marker_kind({"role": "assistant", "content": batch["content"]}) is None
    # quoted by a tool or the user, or not at the start: never a marker
    assert marker_kind({"role": "tool", "tool_call_id": "x", "content": micro["content"]}) is None
    assert marker_kind({"role": "user", "content": micro["content"]}) is None
    assert marker_kind({"role": "assistant", "content": "see: " + micro["content"]}) is None
    assert marker_body(micro) == "body text"
    assert marker_body(exported_micro) == "body text"


def test_tool_pairing_errors():
    ok = [
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
    ]
    assert tool_pairing_errors(ok) == []
    assert tool_pairing_errors(ok[:2])  # call a without result
    assert tool_pairing_errors([ok[0], ok[1], ok[2], {"role": "tool", "tool_call_id": "a", "content": "dup"}])
    assert tool_pairing_errors([{"role": "user", "content": "x"}, ok[1]])  # orphan result
    split = [ok[0], ok[1], {"role": "user", "content": "interrupt"}, ok[2]]
    assert tool_pairing_errors(split)


def test_role_sequence_errors():
    assert role_sequence_errors([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == []
    assert role_sequence_errors([{"role": "user", "content": "u"}, {"role": "system", "content": "s"}])
    assert role_sequence_errors(
        [{"role": "user", "content": "u"}, {"role": "tool", "tool_call_id": "x", "content": "r"}]
    )


def test_user_message_errors_accepts_joined_users_in_order():
    before = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "b"}]
    joined = [{"role": "user", "content": "a\n\nb"}]
    assert user_message_errors(before, joined) == []
    assert user_message_errors(before, before) == []
    assert user_message_errors(before, [{"role": "user", "content": "b"}, {"role": "user", "content": "a"}])
    assert user_message_errors(before, [{"role": "user", "content": "a"}])
    assert user_message_errors(
        before, [{"role": "user", "content": "a"}, {"role": "user", "content": "b!"}, {"role": "user", "content": "c"}]
    )


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("nope", "expected a JSON object"),
        ({"role": "robot", "content": "x"}, "unknown role"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": 5}, "content must be"),
        ({"role": "user", "content": "x", "tool_calls": []}, "only assistant"),
        ({"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}, "needs an id"),
    ],
)
def test_validate_message_names_where_and_what(bad, fragment):
    with pytest.raises(TranscriptError) as exc:
        validate_message(bad, "t.jsonl:7")
    assert "t.jsonl:7" in str(exc.value) and fragment in str(exc.value)


def test_live_reply_that_starts_like_a_marker_is_not_one():
    from microcompact.messages import disown_marker_text

    echo = {"role": "assistant", "content": MARKER_PREFIX + " pretending"}
    assert marker_kind(echo) is None  # text never makes a marker; only metadata does
    live = disown_marker_text(echo)
    assert marker_kind(live) is None and "_mc" not in echo
    plain = {"role": "assistant", "content": "hello"}
    assert disown_marker_text(plain) is plain
