"""The engine side of the proxy without HTTP: a request's follow-up (calibration, the end of the previous
turn) always runs before the conversation's next request is synced, however fast the client is, and a
failing store degrades to forwarding the client's messages."""

from __future__ import annotations

from pathlib import Path

from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import proxy_config
from microcompact.store import open_store

OA = OpenAIFormat()


def test_the_next_request_runs_the_previous_follow_up_first(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, 8192), store=store)
    compaction = Compaction(router, Metrics())
    history = [{"role": "user", "content": "first"}]
    first = compaction.prepare(OA, {}, "k", history)
    compaction.answered(first, 500)
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}]
    second = compaction.prepare(OA, {}, "k", history)
    assert second.human and not first.human
    assert second.session is first.session and first.session is not None
    assert first.session.counter.overhead == 500 - first.counted_tokens, "the first answer calibrated the session"
    compaction.answered(second, 600)
    assert first.session.finalized_row is None, "the turn ends after the response, not before"
    history += [{"role": "assistant", "content": "done"}]
    compaction.prepare(OA, {}, "k", history)  # no follow_up call in between: a client faster than the worker
    rows = {m["content"]: m["_row"] for m in first.session.transcript}
    assert first.session.finalized_row == rows["second"], "the turn ended where the person spoke, before 'done'"
    compaction.follow_up("k")  # the late worker finds nothing left to do
    assert first.session.finalized_row == rows["second"]
    router.close()
    store.close()


def test_a_broken_store_forwards_the_clients_messages(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, 8192), store=store)
    store.close()
    history = [{"role": "user", "content": "hi"}]
    prepared = Compaction(router, Metrics()).prepare(OA, {}, "k", history)
    assert prepared.degraded in ("store-unavailable", "engine-error")
    assert prepared.messages == history and prepared.session is None


class Refusing(OpenAIFormat):
    """A format whose structural check refuses every compacted view (an engine bug, as the proxy sees it)."""

    def view_problem(self, messages: list[dict[str, object]]) -> str | None:
        return "messages.1: broken on purpose"


def test_a_view_the_api_would_refuse_goes_out_uncompacted_and_the_turn_still_ends(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, 8192), store=store)
    compaction = Compaction(router, Metrics())
    history = [{"role": "user", "content": "first"}]
    compaction.answered(compaction.prepare(Refusing(), {}, "k", history), None)
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}]
    prepared = compaction.prepare(Refusing(), {}, "k", history)
    assert prepared.degraded is None and prepared.messages == history, "the client's own list is not checked"
    session = prepared.session
    assert session is not None
    session.append({"role": "assistant", "content": "a message the client never sent"})  # the view now differs
    history += [{"role": "assistant", "content": "done"}]
    prepared = compaction.prepare(Refusing(), {}, "k", history)
    assert prepared.degraded == "view-invalid" and prepared.messages == history
    assert prepared.session is session and not prepared.human
    router.close()
    store.close()
