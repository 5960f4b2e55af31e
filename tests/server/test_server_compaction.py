"""The engine side of the proxy without HTTP: a request's follow-up (calibration, the end of the previous
turn) always runs before the conversation's next request is synced, however fast the client is, and a
failing store degrades to forwarding the client's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from microcompact.messages import is_marker
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


def assert_every_tool_output_stored(store: Any, session_id: str, history: list[dict[str, object]]) -> None:
    stored = store.export(session_id, include_absorbed=True)
    outputs = [m["content"] for m in history if m["role"] == "tool"]
    assert [m["content"] for m in stored if m.get("role") == "tool"] == outputs, "every tool output kept"


def tool_step(history: list[dict[str, object]], k: int) -> None:
    call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": f'{{"path": "f{k}"}}'}}
    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
    history.append(
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"file {k}: " + " ".join(f"l{k}x{i}" for i in range(150))}
    )


def test_a_pass_finished_by_the_follow_up_is_applied_there_not_by_the_next_request(tmp_path: Path) -> None:
    """A background pass that is done when the response ends is committed and applied by the follow-up
    (after the response): the next request's view shows it, and that request commits nothing itself.
    Nothing is lost: the user message verbatim, every tool output in the store. (The cadence schedule: a
    pass is due at every request, none held for a later one as the price schedule does.)"""
    store = open_store(tmp_path / "s.db")
    config_file = tmp_path / "cadence.yaml"
    # Background passes asked for: serve's default with the extractive summarizer is inline.
    config_file.write_text("compression:\n  micro_compact_schedule: cadence\n  micro_compact_background: true\n")
    router = SessionRouter(proxy_config(config_file, 8192), store=store)
    compaction = Compaction(router, Metrics())
    history: list[dict[str, object]] = [{"role": "user", "content": "Fix the failing tests."}]
    for k in range(6):  # a conversation that arrives with a long tool loop: a fold is due at every request
        tool_step(history, k)
    applied_after = 0
    for k in range(6, 14):
        prepared = compaction.prepare(OA, {}, "k", history)
        session = prepared.session
        assert session is not None and session.background is not None
        assert "absorbed" not in prepared.outcomes, "the request did not commit a finished pass"
        compaction.answered(prepared, None)
        session.background.wait(30)  # the pass finishes while the upstream answers (applies nothing itself)
        before = session.transcript
        compaction.follow_up("k")
        applied_after += session.transcript != before
        tool_step(history, k)
    assert applied_after >= 4, "passes were applied by the follow-ups"
    view = compaction.prepare(OA, {}, "k", history).messages
    assert any(is_marker(m) for m in session.transcript) and len(view) < len(history), "folded"
    assert view[0] == history[0], "the user message verbatim"
    assert_every_tool_output_stored(store, session.session_id, history)
    router.close()
    store.close()


def test_a_fold_held_for_later_lands_before_a_threshold_batch_would_prune(tmp_path: Path) -> None:
    """The price schedule holds a fold computed ahead; when the batch threshold is crossed first, that fold
    is adopted instead (a summary, one switch) and no batch runs while it brings the view under. (Folds are
    computed ahead only in the background, which serve's default with the extractive summarizer is not.)"""
    store = open_store(tmp_path / "s.db")
    config_file = tmp_path / "background.yaml"
    config_file.write_text("compression:\n  micro_compact_background: true\n")
    router = SessionRouter(proxy_config(config_file, 8192), store=store)
    compaction = Compaction(router, Metrics())
    history: list[dict[str, object]] = [{"role": "user", "content": "Fix the failing tests."}]
    for k in range(6):
        tool_step(history, k)
    outcomes: list[str] = []
    for k in range(6, 14):
        prepared = compaction.prepare(OA, {}, "k", history)
        outcomes += prepared.outcomes
        session = prepared.session
        assert session is not None and session.background is not None
        compaction.answered(prepared, None)
        session.background.wait(30)
        compaction.follow_up("k")
        tool_step(history, k)
    assert "compacted" not in outcomes, outcomes
    assert outcomes.count("absorbed") >= 6 and session.background.adopted_ahead >= 2, outcomes
    view = compaction.prepare(OA, {}, "k", history).messages
    assert view[0] == history[0], "the user message verbatim"
    assert_every_tool_output_stored(store, session.session_id, history)
    router.close()
    store.close()
