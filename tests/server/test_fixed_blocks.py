"""Messages a client re-sends at the same place every turn (aider's file-context pair before the current
message, a reminder as the last system message): the conversation continues; real divergence still forks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.identity import digests
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction, larger, stable
from microcompact.server.fixed_blocks import Block, FixedBlocks, canonical_order, client_order, recognise
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import proxy_config
from microcompact.store import open_store
from support.strategies import examples

OA = OpenAIFormat()
SYSTEM = {"role": "system", "content": "Act as an expert software developer."}
FILES = [
    {"role": "user", "content": "I am not sharing any files that you can edit yet."},
    {"role": "assistant", "content": "Ok."},
]
REMINDER = {"role": "system", "content": "# SEARCH/REPLACE block rules"}


def aider_request(turn: int, reminder: bool = True) -> list[dict[str, Any]]:
    """What aider sends at ``turn``: system, the history, the file-context pair, the message, the reminder."""
    done: list[dict[str, Any]] = []
    for i in range(turn):
        done += [{"role": "user", "content": f"turn {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return [SYSTEM, *done, *FILES, {"role": "user", "content": f"turn {turn}"}, *([REMINDER] if reminder else [])]


def canonical(history: list[dict[str, Any]], blocks: list[Block]) -> list[str]:
    d = digests(stable(history))
    return [d[i] for i in canonical_order(d, blocks)]


def test_aider_pair_and_reminder_are_recognised_and_each_turn_continues_the_last() -> None:
    first, second = digests(aider_request(0)), digests(aider_request(1))
    blocks = recognise(first, second)
    assert blocks is not None and [len(b.digests) for b in blocks] == [2, 1]
    previous = canonical(aider_request(1), blocks)
    for turn in range(2, 8):
        now = canonical(aider_request(turn), blocks)
        assert now[: len(previous)] == previous, f"turn {turn} continues turn {turn - 1}"
        assert recognise(previous, now) is None, "nothing new to recognise"
        previous = now


def test_real_divergence_is_not_recognised() -> None:
    before = digests(aider_request(2))
    edited = aider_request(3)
    edited[1] = {"role": "user", "content": "turn 0, edited"}
    assert recognise(before, digests(edited)) is None
    dropped = aider_request(3)
    del dropped[1:3]
    assert recognise(before, digests(dropped)) is None
    retried = aider_request(2)
    retried[-2] = {"role": "user", "content": "turn 2, said otherwise"}
    assert recognise(before, digests(retried)) is None


def test_the_view_puts_every_message_back_where_the_client_put_it() -> None:
    blocks = recognise(digests(aider_request(0)), digests(aider_request(1)))
    assert blocks is not None
    history = aider_request(4)
    order = canonical_order(digests(history), blocks)
    assert order != list(range(len(history)))
    runs = [(h, history[i]) for h, i in enumerate(order)]
    assert client_order(runs, order) == history
    marker = {"role": "assistant", "content": "[summary]"}
    assert history[order[5]] == {"role": "assistant", "content": "answer 0"}
    compacted = [*runs[:5], (None, marker), *runs[6:]]  # the first answer folded into a marker
    out = client_order(compacted, order)
    assert out[-4:] == history[-4:], "the pair and the reminder stay where aider put them"
    assert [m for m in out if m is not marker] == [m for m in history if m["content"] != "answer 0"]


@st.composite
def fixed_block_histories(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], int]:
    """Requests of one conversation that re-sends a fixed block (1-3 messages) before its current message,
    and maybe a fixed trailing block; turns of 1-3 messages."""
    block = [{"role": "user", "content": f"fixed {i}"} for i in range(draw(st.integers(1, 3)))]
    trailing = [{"role": "system", "content": "reminder"}] if draw(st.booleans()) else []
    turns = draw(st.lists(st.integers(1, 3), min_size=3, max_size=7))
    done: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    requests = []
    for t, size in enumerate(turns):
        current = [{"role": "user", "content": f"turn {t}"}]
        current += [{"role": "assistant", "content": f"step {t}.{k}"} for k in range(size - 1)]
        requests.append([*done, *block, *current, *trailing])
        done += [*current, {"role": "assistant", "content": f"answer {t}"}]
    return requests, len(block) + len(trailing)


@settings(max_examples=examples(60), deadline=None)
@given(fixed_block_histories())
def test_property_a_fixed_block_never_forks_and_the_client_order_comes_back(
    case: tuple[list[list[dict[str, Any]]], int],
) -> None:
    requests, _ = case
    tracker = FixedBlocks()
    previous: list[str] = []
    for request in requests:
        d = digests(stable(request))
        key, order = tracker.resolve("k", d)
        now = [d[i] for i in order]
        assert key == "k"
        assert now[: len(previous)] == previous, "each request continues the last in canonical order"
        assert client_order([(h, request[i]) for h, i in enumerate(order)], order) == request
        previous = now


@settings(max_examples=examples(60), deadline=None)
@given(fixed_block_histories(), st.data())
def test_property_an_edited_message_is_still_a_divergence(
    case: tuple[list[list[dict[str, Any]]], int], data: st.DataObject
) -> None:
    requests, _ = case
    tracker = FixedBlocks()
    for request in requests[:-1]:
        d = digests(stable(request))
        previous = [d[i] for i in tracker.resolve("k", d)[1]]
    conversation = [m for m in requests[-2] if m["content"] not in ("reminder",) and "fixed" not in m["content"]]
    target = data.draw(st.sampled_from(conversation[1:]))
    after = [{**m, "content": f"{m['content']} (edited)"} if m == target else m for m in requests[-1]]
    d = digests(stable(after))
    now = [d[i] for i in tracker.resolve("k", d)[1]]
    assert now[: len(previous)] != previous, "the edit leaves no common prefix: the router forks"


def _compaction(tmp_path: Path) -> tuple[Compaction, SessionRouter, Any]:
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, 32_000), store=store)
    return Compaction(router, Metrics()), router, store


def test_ten_aider_turns_are_one_stored_session_and_go_out_as_aider_sent_them(tmp_path: Path) -> None:
    compaction, router, store = _compaction(tmp_path)
    sessions = set()
    for turn in range(10):
        history = aider_request(turn)
        prepared = compaction.prepare(OA, {"model": "gpt-4o"}, "k", history)
        assert prepared.degraded is None and prepared.messages == history
        assert prepared.session is not None
        sessions.add(prepared.session.session_id)
        compaction.answered(prepared, None)
    assert sessions == {"k"}, "no fork"
    assert [s.session_id for s in router.sessions()] == ["k"]
    router.close()
    store.close()


def test_an_edited_history_still_forks(tmp_path: Path) -> None:
    compaction, router, store = _compaction(tmp_path)
    for turn in range(3):
        compaction.prepare(OA, {}, "k", aider_request(turn))
    edited = aider_request(3)
    edited[1] = {"role": "user", "content": "turn 0, edited"}
    prepared = compaction.prepare(OA, {}, "k", edited)
    assert prepared.session is not None and prepared.session.session_id == "k~2"
    router.close()
    store.close()


def test_a_view_larger_than_the_clients_messages_is_not_forwarded(tmp_path: Path) -> None:
    assert larger([{"role": "assistant", "content": "x" * 421}], [{"role": "assistant", "content": "Ok."}])
    assert not larger([{"role": "assistant", "content": "Ok."}], [{"role": "assistant", "content": "x" * 421}])
    compaction, router, store = _compaction(tmp_path)
    history = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "Ok."}]
    prepared = compaction.prepare(OA, {}, "k", history)
    assert prepared.session is not None
    prepared.session.append({"role": "assistant", "content": "m" * 421})  # a view longer than the request
    history = [*history, {"role": "user", "content": "second"}]
    prepared = compaction.prepare(OA, {}, "k", history)
    assert prepared.messages == history, "the client's own messages went out"
    router.close()
    store.close()
