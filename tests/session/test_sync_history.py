"""Full history in, compacted view out: ``Session.sync_history``, ``Session.compacted``, ``Session.fork`` and
``SessionRouter``, fed the way frameworks and proxies feed them (the whole uncompacted list on every call)."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.config import parse_config
from microcompact.contract import tool_pairing_errors
from microcompact.identity import DIGEST_KEY, HID_KEY, digest, fork_prefix, known_digests
from microcompact.messages import is_marker, user_texts
from microcompact.replay import load_transcript
from microcompact.router import SessionRouter
from microcompact.session import HistoryDiverged, Session
from support.builders import request_points
from support.paths import NORMALIZED
from support.strategies import examples, transcripts

SMALL = {
    "model": {"context_length": 40_000},
    "compression": {"micro_compact": True, "tokenizer": "estimate"},
}


def small_config():
    return parse_config(SMALL)


def feed(session, messages):
    """Drive ``session`` like a framework hook: the whole list up to each request point, every time."""
    views = []
    for end in request_points(messages):
        views.append((end, session.compacted(messages[:end])))
    return views


def assert_view_keeps_contract(view, history):
    assert user_texts(view) == user_texts(history), "user messages must reach the model verbatim, in order"
    assert tool_pairing_errors(view) == []


# --------------------------------------------------------------------------- identity, pure


def test_digest_ignores_key_order_and_library_metadata():
    a = {"role": "user", "content": "hi", "name": "x"}
    b = {"name": "x", "content": "hi", "role": "user", "_row": 3, "_mc": {"k": 1}}
    assert digest(a) == digest(b)
    assert digest(a) != digest({**a, "content": "hi "})


def test_digest_survives_text_orjson_refuses():
    assert digest({"role": "user", "content": "\ud800 lone"}) != digest({"role": "user", "content": "lone"})
    assert digest({"role": "user", "content": 2**70}) == digest({"role": "user", "content": 2**70})


def test_known_digests_refuses_untagged_or_gapped_rows():
    tagged = [{"role": "user", "content": "a", HID_KEY: 0, DIGEST_KEY: "d0"}]
    assert known_digests(tagged) == ["d0"]
    assert known_digests([*tagged, {"role": "assistant", "content": "b"}]) is None
    assert known_digests([*tagged, {"role": "user", "content": "c", HID_KEY: 2, DIGEST_KEY: "d2"}]) is None
    assert known_digests([]) == []


def test_fork_prefix_refuses_when_a_summary_covers_a_later_message():
    marker = {"role": "assistant", "content": "summary", "_mc": {"marker": "micro"}}
    t = [{"role": "user", "content": "a", HID_KEY: 0}, marker, {"role": "user", "content": "d", HID_KEY: 3}]
    # client messages 1 and 2 were absorbed: a fork at 2 would carry a summary of message 2
    assert fork_prefix(t, known=4, at=2) is None
    assert [m.get(HID_KEY) for m in fork_prefix(t, known=4, at=3)] == [0, None]


# --------------------------------------------------------------------------- one session, fed the full list


def test_full_list_every_call_is_compacted_once_not_thrown_away():
    """The regression behind issue 11: fed the full list each time, the work must accumulate."""
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:220]
    session = Session(small_config())
    views = feed(session, history)
    originals = [m for m in session.transcript if HID_KEY in m]
    hids = [m[HID_KEY] for m in originals]
    assert hids == sorted(set(hids)), "each client message is held once, in order"
    end, last = views[-1]
    assert_view_keeps_contract(last, history[:end])
    assert any(is_marker(m) for m in session.transcript)
    assert session.micro.state.passes_total >= 3
    assert len(last) < end / 2, "the view is compacted"
    for end, view in views:
        assert_view_keeps_contract(view, history[:end])


def test_sync_appends_only_the_new_suffix_and_reports_a_new_human_message():
    s = Session()
    h = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ok"}]
    r = s.sync_history(h)
    assert (r.matched, r.appended, r.human, r.ok) == (0, 2, True, True)
    r = s.sync_history(h)
    assert (r.matched, r.appended, r.human) == (2, 0, False)
    r = s.sync_history([*h, {"role": "user", "content": "more"}])
    assert (r.matched, r.appended, r.human) == (2, 1, True)
    assert [m["content"] for m in s.messages] == ["task", "ok", "more"]


def test_a_rewritten_message_diverges_and_nothing_is_appended():
    s = Session()
    h = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ok"}]
    s.sync_history(h)
    r = s.sync_history([{"role": "user", "content": "task (edited)"}, *h[1:]])
    assert r.diverged is not None and r.diverged.at == 0
    assert len(s.messages) == 2
    with pytest.raises(HistoryDiverged, match="client message 0 differs"):
        s.compacted([{"role": "user", "content": "other"}])


def test_an_invalid_new_message_is_refused_whole():
    s = Session()
    s.sync_history([{"role": "user", "content": "task"}])
    with pytest.raises(Exception, match="client message 2"):
        s.sync_history([{"role": "user", "content": "task"}, {"role": "assistant", "content": "a"}, {"content": 1}])
    assert len(s.messages) == 1
    assert s.sync_history([{"role": "user", "content": "task"}]).matched == 1


def test_convert_splits_one_client_message_into_several():
    def convert(m):
        if m["role"] == "user" and isinstance(m["content"], list):
            return [{"role": "tool", "tool_call_id": b["id"], "content": b["text"]} for b in m["content"]]
        return [m]

    s = Session()
    h = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "user", "content": [{"id": "a", "text": "A"}, {"id": "b", "text": "B"}]},
    ]
    r = s.sync_history(h, convert)
    assert r.appended == 3 and not tool_pairing_errors(s.messages)
    assert [m[HID_KEY] for m in s.transcript] == [0, 1, 2, 2]
    assert s.sync_history(h, convert).appended == 0


def _call(cid):
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": "{}"}}


# --------------------------------------------------------------------------- forks


def test_fork_after_an_edited_last_message_keeps_the_compaction_of_the_prefix():
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:200]
    history = history[: request_points(history)[-1]]
    parent = Session(small_config())
    feed(parent, history)
    assert any(is_marker(m) for m in parent.transcript)
    edited = [*history[:-1], {**history[-1], "content": "edited: " + json.dumps(history[-1].get("content"))}]
    r = parent.sync_history(edited)
    assert r.diverged is not None and r.diverged.at == len(history) - 1
    child = parent.fork("child", edited, r.diverged.at)
    markers = [m for m in child.transcript if is_marker(m)]
    assert markers, "the fork starts from the parent's compacted prefix, not from scratch"
    assert child.transcript[-1]["content"] == edited[-1]["content"]
    assert_view_keeps_contract(child.messages, edited)
    assert child.sync_history(edited).appended == 0


def test_fork_from_scratch_when_the_summary_covers_the_divergence():
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:200]
    parent = Session(small_config())
    feed(parent, history)
    # The client ran its own compaction: its list shares only the first message.
    own = [history[0], {"role": "user", "content": "This session continues from a summary: ..."}]
    r = parent.sync_history(own)
    assert r.diverged is not None and r.diverged.at == 1
    child = parent.fork("child", own, 1)
    assert [m.get("content") for m in child.messages] == [m.get("content") for m in own]


# --------------------------------------------------------------------------- the router


def test_router_keeps_interleaved_histories_of_one_key_apart():
    router = SessionRouter(small_config())
    main = [{"role": "user", "content": "main task"}]
    side = [{"role": "user", "content": "write a title"}]
    a = router.route("k", main)
    b = router.route("k", side)
    assert a.session is not b.session and b.forked_from == "k"
    main2 = [*main, {"role": "assistant", "content": "working"}, {"role": "user", "content": "and?"}]
    c = router.route("k", main2)
    assert c.session is a.session and c.sync.appended == 2
    side2 = [*side, {"role": "assistant", "content": "Title"}]
    d = router.route("k", side2)
    assert d.session is b.session
    assert [m["content"] for m in a.session.messages] == ["main task", "working", "and?"]
    assert [m["content"] for m in b.session.messages] == ["write a title", "Title"]


def test_router_resumes_stored_branches_after_a_restart(store_factory):
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:160]
    points = request_points(history)
    half = points[len(points) // 2]
    with store_factory.open() as store:
        router = SessionRouter(small_config(), store=store)
        for end in [p for p in points if p <= half]:
            routed = router.route("key", history[:end])
            with router.lock("key"):
                routed.session.finalize_turn()
        router.route("key", [{"role": "user", "content": "a side request"}])
        router.close()
    with store_factory.open() as store:
        router = SessionRouter(small_config(), store=store)
        routed = router.route("key", history)
        assert routed.forked_from is None and routed.session.session_id == "key"
        assert routed.sync.matched == half and routed.sync.appended == len(history) - half
        routed.session.flush()
        hids = [m[HID_KEY] for m in store.export("key", include_absorbed=True) if HID_KEY in m]
        assert sorted(set(hids)) == list(range(len(history))), "every client message stored once"
        side = router.route(
            "key", [{"role": "user", "content": "a side request"}, {"role": "assistant", "content": "x"}]
        )
        assert side.session.session_id == "key~2" and side.sync.matched == 1
        router.close()


def test_router_serializes_one_key_across_threads():
    router = SessionRouter(small_config())
    history = [{"role": "user", "content": "go"}]
    for i in range(40):
        history += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"next {i}"}]
    errors = []
    sent = [0]

    def worker(offset):
        try:
            while True:
                with router.lock("k"):  # each request takes the next longer history, as one client sends them
                    if sent[0] >= len(history):
                        return
                    sent[0] += 1 + (offset + sent[0]) % 3
                    router.route("k", history[: sent[0]])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(o,)) for o in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    sessions = router.sessions()
    assert len(sessions) == 1, "growing prefixes of one history never fork"
    assert [m["content"] for m in sessions[0].messages] == [m["content"] for m in history]


# --------------------------------------------------------------------------- the contract, generated


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    transcript=transcripts(max_turns=5),
    edits=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["grow", "edit", "truncate"])), max_size=6),
)
def test_a_view_never_mixes_two_histories(transcript, edits):
    """Whatever the client does to its list (grow it, rewrite a message, drop its end), each view holds only
    messages of the history just sent, user messages verbatim and in order, tool pairs whole."""
    router = SessionRouter(
        parse_config(
            {"model": {"context_length": 8_000}, "compression": {"micro_compact": True, "tokenizer": "estimate"}}
        )
    )
    history = list(transcript[: max(1, len(transcript) // 2)])
    rest = list(transcript[len(history) :])
    for frac, op in [(0.0, "grow"), *edits, (1.0, "grow")]:
        if op == "grow":
            history += rest[: max(1, int(len(rest) * frac))]
            rest = rest[max(1, int(len(rest) * frac)) :]
        elif op == "edit" and history:
            i = min(len(history) - 1, int(len(history) * frac))
            if history[i]["role"] == "user":
                history[i] = {**history[i], "content": f"edited {frac}"}
        elif op == "truncate" and len(history) > 1:
            history = history[: max(1, int(len(history) * frac))]
            rest = []
        routed = router.route("k", history)
        with router.lock("k"):
            if routed.sync.human:
                routed.session.finalize_turn()
            routed.session.before_request()
        view = routed.session.transcript
        want = [digest(m) for m in history]
        for m in view:
            if HID_KEY in m:
                assert m[HID_KEY] < len(history) and m[DIGEST_KEY] == want[m[HID_KEY]], "a message of another history"
        assert user_texts(routed.session.messages) == user_texts(history)
        assert tool_pairing_errors(routed.session.messages) == [] or tool_pairing_errors(history) != []
    router.close()
