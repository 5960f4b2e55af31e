"""Recall of a live conversation, reply by reply: the watch agrees with ``recall.py`` on a whole recorded
session, reads each message once, learns a conversation first seen mid-way, and writes counts only."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact import identifiers
from microcompact.messages import render_micro_marker
from microcompact.recall import reply_indexes, reply_targets, request_recall
from microcompact.recall import watch as recall_watch
from microcompact.recall.watch import RECALL_TAG, RecallLine, RecallWatch, RecallWatches, recall_record, totals

Message = dict[str, Any]


def call(call_id: str, command: str, text: str = "") -> Message:
    arguments = json.dumps({"command": command})
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "Bash", "arguments": arguments}}],
    }


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


USER: Message = {"role": "user", "content": "Fix user_settings in the app."}
LS = call("c1", "ls src/app")
LS_OUT = result("c1", "handlers.py\nsession_store.py\nuser_settings.py")
CAT = call("c2", "cat src/app/session_store.py", "Reading session_store.py.")
CAT_OUT = result("c2", "def open_session(): return SessionRegistry()\nPORT = 40213")
ANSWER: Message = {"role": "assistant", "content": "open_session builds a SessionRegistry on 40213 for user_settings."}


def test_a_reply_is_measured_against_the_prompt_it_answered() -> None:
    watch = RecallWatch()
    assert watch.sent([USER], [USER]) is None  # the first request: nothing answered yet
    first = watch.sent([USER, LS, LS_OUT], [LS, LS_OUT])  # LS answered [USER]: it used nothing a tool showed
    assert first is not None and first.targets == frozenset() and first.recall is None
    second = watch.sent([USER, LS, LS_OUT, CAT, CAT_OUT], [CAT, CAT_OUT])
    assert second is not None and second.targets == {"session_store.py"} and not second.missing
    later: Message = {"role": "user", "content": "Thanks."}
    third = watch.sent([USER, CAT_OUT, ANSWER, later], [ANSWER, later])  # a fold dropped LS_OUT meanwhile
    assert third is not None and third.targets == {"open_session", "SessionRegistry", "40213"}
    assert not third.missing, "ANSWER answered the prompt before, which held CAT_OUT"
    assert watch.sent([USER, CAT_OUT, ANSWER, later], []) is None, "a request without a reply measures nothing"
    assert watch.replies == 3


def test_what_the_prompt_lacked_is_missing_and_user_or_agent_words_are_no_targets() -> None:
    watch = RecallWatch()
    watch.sent([USER, LS, LS_OUT, CAT, CAT_OUT], [])  # first seen here: learned whole
    folded = [USER, render_micro_marker("steps ran: open_session seen"), CAT_OUT]
    watch.sent(folded, [])  # a fold dropped LS_OUT; the marker kept open_session
    measured = watch.sent([*folded, ANSWER], [ANSWER])
    assert measured is not None
    # user_settings the user said first; 40213 / SessionRegistry / open_session a tool showed first
    assert measured.targets == {"open_session", "SessionRegistry", "40213"}
    assert measured.missing == frozenset()
    gone = RecallWatch()
    gone.sent([USER, LS, LS_OUT, CAT, CAT_OUT], [])
    gone.sent([USER, CAT], [])  # the prompt the reply answered lacked CAT_OUT
    lost = gone.sent([USER, CAT, ANSWER], [ANSWER])
    assert lost is not None and lost.missing == {"open_session", "SessionRegistry", "40213"}


def test_the_clients_own_messages_hold_every_target() -> None:
    watch = RecallWatch()
    watch.sent([USER, LS, LS_OUT, CAT, CAT_OUT], [])
    watch.sent([USER], [], whole=True)
    measured = watch.sent([USER, ANSWER], [ANSWER])
    assert measured is not None and measured.targets and not measured.missing


def test_a_marker_seen_first_teaches_what_tools_showed() -> None:
    watch = RecallWatch()
    marker = render_micro_marker("read src/app/session_store.py: open_session returns SessionRegistry")
    watch.sent([USER, marker], [])  # a conversation first seen after a fold (a restart)
    reply: Message = {"role": "assistant", "content": "open_session it is."}
    measured = watch.sent([USER, marker], [reply])
    assert measured is not None and measured.targets == {"open_session"} and not measured.missing


@st.composite
def sessions(draw: st.DrawFn) -> list[Message]:
    """A tool loop whose outputs name values; each reply names some of them (or the agent's own)."""
    names = [f"value_{i}_{c}" for i in range(12) for c in "ab"]
    messages: list[Message] = [{"role": "user", "content": "run it"}]
    for step in range(draw(st.integers(1, 10))):
        used = draw(st.lists(st.sampled_from(names), max_size=3))
        messages.append(call(f"s{step}", f"run step_{step}", " ".join(used)))
        messages.append(result(f"s{step}", " ".join(draw(st.lists(st.sampled_from(names), max_size=4)))))
    messages.append({"role": "assistant", "content": " ".join(draw(st.lists(st.sampled_from(names), max_size=4)))})
    return messages


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_watch_agrees_with_the_recorded_measure(data: st.DataObject) -> None:
    """Every reply measured live against the prompt it answered (any sub-list of what came before, as a
    fold would send) counts what ``recall.py`` counts on the whole session afterwards."""
    messages = data.draw(sessions())
    replies = reply_indexes(messages)
    prompts = {i: [m for m in messages[:i] if data.draw(st.booleans())] for i in replies}
    prompts[replies[0]] = messages[: replies[0]]  # the first request: the conversation as it starts
    watch, previous = RecallWatch(), 0
    live = {}
    for i in replies:
        measured = watch.sent(prompts[i], messages[previous:i])  # new: the previous reply and its results
        if measured is not None:
            live[previous] = measured
        previous = i
    targets = reply_targets(messages)
    for i, measured in live.items():
        expected = request_recall(i, targets[i], prompts[i])
        assert (measured.targets, measured.missing) == (expected.targets, expected.missing)
    assert len(live) == len(replies) - 1, "every reply but the last is measured"


def test_each_message_is_read_once_and_a_copy_shares_the_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    plain = identifiers.message_identifiers

    def counted(message: Any) -> set[str]:
        reads.append(str(message.get("content"))[:20])
        return plain(message)

    monkeypatch.setattr(recall_watch, "message_identifiers", counted)
    watch = RecallWatch()
    history = [USER, LS, LS_OUT, CAT, CAT_OUT]
    watch.sent(history, [])
    assert len(reads) == 5
    copies = [dict(m) for m in history]  # the proxy's view: shallow copies of the session's messages
    watch.sent([*copies, ANSWER], [ANSWER])
    watch.sent([*[dict(m) for m in copies], ANSWER], [])
    assert len(reads) == 6, "only the new reply was read"


def test_the_line_holds_counts_and_never_an_identifier() -> None:
    watch = RecallWatch()
    watch.sent([USER, LS, LS_OUT, CAT, CAT_OUT], [])
    watch.sent([USER, CAT], [])  # what went up for the reply below: a fold took the outputs
    measured = watch.sent([USER, CAT, ANSWER], [ANSWER])
    assert measured is not None
    line = RecallLine.of("s-1", measured)
    text = line.text()
    assert text.startswith(RECALL_TAG)
    assert json.loads(text[len(RECALL_TAG) :]) == {
        "event": "proxy_recall",
        "present": 0,
        "session_id": "s-1",
        "targets": 3,
    }
    for name in measured.targets:
        assert name not in text
    assert recall_record("2026-01-01 00:00:00,000 INFO microcompact.telemetry: " + text) == line


@pytest.mark.parametrize(
    "bad",
    [
        'proxy recall telemetry: {"event": "proxy_recall", "targets": 2, "present": 3}',
        'proxy recall telemetry: {"event": "proxy_recall", "targets": -1, "present": 0}',
        'proxy recall telemetry: {"event": "proxy_recall", "targets": true, "present": 0}',
        'proxy recall telemetry: {"event": "proxy_recall", "targets": 2.5, "present": 1}',
        'proxy recall telemetry: {"event": "proxy_cost", "targets": 2, "present": 1}',
        'proxy recall telemetry: {"event": "proxy_recall", "targets": 2',
        "proxy recall telemetry: [1, 2]",
        "an ordinary line",
    ],
)
def test_a_malformed_line_is_no_recall(bad: str) -> None:
    assert recall_record(bad) is None


def test_totals_pool_targets_and_count_losing_replies() -> None:
    total = totals([RecallLine("a", 4, 4), RecallLine("a", 2, 1), RecallLine("b", 10, 5)])
    assert (total.requests, total.targets, total.present, total.losing) == (3, 16, 10, 2)


class Conversation:
    """A stand-in for a session object (weakly referenced by the watches)."""


def test_watches_read_in_order_and_go_with_their_conversation() -> None:
    watches = RecallWatches()
    one = Conversation()
    watches.sent(one, [USER, LS, LS_OUT, CAT, CAT_OUT], [], whole=False)
    watches.sent(one, [USER, CAT], [], whole=False)
    assert watches.settle(one) == []
    watches.sent(one, [USER, CAT, ANSWER], [ANSWER], whole=False)
    (measured,) = watches.settle(one)
    assert len(measured.missing) == 3
    assert watches.settle(one) == [], "each request is read once"
    watches.sent(one, [USER], [], whole=False)
    del one
    gc.collect()
    assert len(watches._watches) == 0 and len(watches._queued) == 0
