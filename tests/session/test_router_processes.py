"""Several processes on one store (``SessionRouter(shared=True)``, as several ``serve`` processes run): a
conversation whose requests alternate between two processes ends with exactly the stored transcript one
process makes, every request sends the view one process would send, two conversations never mix, and a
process killed while holding a conversation does not block it. Real processes, both backends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.identity import digests, known_digests
from microcompact.replay import load_transcript
from microcompact.router import SessionRouter
from microcompact.store import StoreLocked
from support.micro_helpers import Recorder, turn
from support.paths import NORMALIZED
from support.router_worker import serve_one, worker
from support.stored_session import normalized_export

# A small window, so that micro passes, batch compaction and prunes all happen within a few dozen requests.
CONFIG: dict[str, Any] = {
    "model": {"context_length": 32_000},
    "compression": {"micro_compact": True, "tokenizer": "estimate"},
}


def requests_of(name: str, limit: int) -> list[list[dict[str, Any]]]:
    """The client's full history at each model request of a recorded session (before each assistant
    message; the recorded assistant messages are the upstream's replies), the first ``limit`` of them."""
    messages = load_transcript(NORMALIZED / f"{name}.jsonl")
    points = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0][:limit]
    return [messages[:i] for i in points]


class Worker:
    """A child process running a shared router on its own connection to the store."""

    def __init__(self, kind: str, target: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker, args=(kind, target, CONFIG, child), daemon=True)
        self.process.start()

    def call(self, *command: Any, timeout: float = 60.0) -> Any:
        self.conn.send(command)
        if not self.conn.poll(timeout):
            raise AssertionError(f"worker {self.process.pid} did not answer {command[0]!r} within {timeout} s")
        answer = self.conn.recv()
        assert not (isinstance(answer, dict) and "error" in answer), answer["error"]
        return answer

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(10)

    def stop(self) -> None:
        if self.process.is_alive():
            self.call("stop")
        self.process.join(10)


@pytest.fixture
def workers(store_factory):
    started: list[Worker] = []

    def start(n: int) -> list[Worker]:
        new = [Worker(store_factory.kind, store_factory.target) for _ in range(n)]
        started.extend(new)
        return new

    yield start
    for w in started:
        if w.process.is_alive():
            w.kill()


@pytest.mark.slow  # 7-12 s: two worker processes replay 60 requests
def test_alternating_processes_store_exactly_what_one_process_stores(store_factory, workers):
    histories = {
        "A": requests_of("cc_4d5611e5", 40),
        "B": requests_of("sweplay_openhands_largest", 20),
    }
    store = store_factory.open()
    alone = SessionRouter(parse_config(CONFIG), store=store)  # one process, the reference
    expected = {key: [serve_one(alone, f"one-{key}", h) for h in hs] for key, hs in histories.items()}
    alone.close()

    a, b = workers(2)
    got: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for i in range(max(len(h) for h in histories.values())):
        for n, key in enumerate(("A", "B")):  # the two keys interleaved, each alternating between processes
            if i < len(histories[key]):
                w = (a, b)[(i + n) % 2]
                got[key].append(w.call("request", f"two-{key}", histories[key][i]))
    a.stop()
    b.stop()

    for key, hs in histories.items():
        assert [g["view"] for g in got[key]] == [e["view"] for e in expected[key]], f"{key}: a view differs"
        assert [g["occupancy"] for g in got[key]] == [e["occupancy"] for e in expected[key]]
        assert normalized_export(store, f"two-{key}") == normalized_export(store, f"one-{key}")
        # nothing lost, nothing twice, nothing of the other conversation: the stored originals are exactly
        # the client's history, in order
        assert known_digests(store.export(f"two-{key}", include_absorbed=True)) == digests(hs[-1])
    assert {s["id"] for s in store.list_sessions()} == {"one-A", "one-B", "two-A", "two-B"}
    made = [(m.get("_mc") or {}) for key in histories for m in store.export(f"two-{key}", include_absorbed=True)]
    markers = [mc.get("marker") for mc in made]
    assert markers.count("micro") >= 10 and markers.count("batch") >= 2, "both engines must have run"
    assert any(mc.get("stub") for mc in made), "and a prune, or the comparison proves less"


def test_a_process_killed_inside_a_request_does_not_block_the_conversation(store_factory, workers):
    history = requests_of("cc_subagent_a2898e3", 3)
    holder, other = workers(2)
    holder.call("request", "k", history[0])
    assert holder.call("hold", "k", history[1]) == "held"
    holder.kill()
    t0 = time.monotonic()
    answer = other.call("request", "k", history[2], timeout=30.0)
    assert time.monotonic() - t0 < 10.0
    assert answer["session"] == "k"
    other.stop()
    store = store_factory.open()
    assert known_digests(store.export("k", include_absorbed=True)) == digests(history[2])


# --------------------------------------------------------------------------- the pieces, in one process


def test_every_write_of_a_session_moves_its_version(store):
    assert store.session_versions(["s"]) == {}
    store.append("s", [{"role": "user", "content": "hi"}])
    v1 = store.session_versions(["s", "other"])["s"]
    store.update_meta("s", {"x": 1})
    v2 = store.session_versions(["s"])["s"]
    store.remember_skip("s", "k")
    v3 = store.session_versions(["s"])["s"]
    assert v1 < v2 < v3
    store.load_active("s")
    store.session_meta("s")
    assert store.session_versions(["s"])["s"] == v3, "reads leave the version alone"


def test_a_named_lock_has_one_holder_and_is_apart_from_session_leases(store_factory):
    one, two = store_factory.open(), store_factory.open()
    token = one.try_lock("k")
    assert token is not None
    assert two.try_lock("k") is None
    assert one.try_lock("k") is None, "another thread of the same store waits too"
    lease = two.acquire_lease("k")  # the session named like the lock is another thing
    assert lease is not None
    one.unlock("k", token)
    assert two.try_lock("k") is not None


def test_waiting_for_a_conversation_another_process_holds_ends_with_a_clear_error(store_factory):
    other = store_factory.open()
    assert other.try_lock("k") is not None
    router = SessionRouter(parse_config(CONFIG), store=store_factory.open(), shared=True, lock_timeout=0.2)
    t0 = time.monotonic()
    held = r"conversation 'k' has been held by another process for over 0.2 s"
    with pytest.raises(StoreLocked, match=held), router.lock("k"):
        pass
    assert time.monotonic() - t0 < 2.0


class Gated(Recorder):
    """Summarizes only once ``gate`` is set; a call that had to wait marks its summary with ``word``."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word
        self.gate = threading.Event()
        self.entered = threading.Event()

    def merge(self, summary, exchange):
        waited = not self.gate.is_set()
        self.entered.set()
        self.gate.wait(10)
        return (f"{self.word} " if waited else "") + super().merge(summary, exchange)


def _background_config():
    return parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": True, "protect_first_n": 3},
            "model": {"context_length": 20_000},
        }
    )


def _until_a_pass_runs(
    router: SessionRouter, turns: list[list[dict[str, Any]]], summarizer: Gated, key: str = "k"
) -> int:
    """Serve one request per turn (each adds a user message) until a background pass waits in the
    summarizer (the key was let go meanwhile)."""
    history: list[dict[str, Any]] = []
    for n, t in enumerate(turns):
        history = [*history, *t]
        serve_one(router, key, history)
        router.sessions()[0].background.wait(0.3)  # returns at once when the pass had nothing to summarize
        if summarizer.entered.is_set():
            return n
    raise AssertionError("no micro pass was started")


def test_a_background_pass_is_applied_only_by_the_process_that_gets_the_conversation_back_unchanged(
    store_factory,
):
    turns = [turn(i) for i in range(12)]
    mine = Gated("MINE")
    one = SessionRouter(_background_config(), store=store_factory.open(), summarizer=mine, shared=True)
    n = _until_a_pass_runs(one, turns, mine)  # the lock was let go with the pass still running
    mine.gate.set()
    one.sessions()[0].background.wait(10)
    serve_one(one, "k", [m for t in turns[: n + 2] for m in t])  # back to this process, the store unchanged
    store = store_factory.open()
    markers = [m for m in store.load_active("k") if (m.get("_mc") or {}).get("marker") == "micro"]
    assert markers and markers[0]["content"].count("MINE"), "the pass was applied and written"


def test_a_background_pass_of_a_process_that_lost_the_conversation_never_reaches_the_store(store_factory, caplog):
    turns = [turn(i) for i in range(12)]
    stale = Gated("STALE")
    one = SessionRouter(_background_config(), store=store_factory.open(), summarizer=stale, shared=True)
    other = SessionRouter(_background_config(), store=store_factory.open(), summarizer=Recorder(), shared=True)
    n = _until_a_pass_runs(one, turns, stale)
    history = [m for t in turns[: n + 2] for m in t]
    serve_one(other, "k", history)  # another process continues the conversation meanwhile
    other.sessions()[0].drain()
    serve_one(other, "k", [*history, {"role": "user", "content": "and now?"}])
    stale.gate.set()
    one.sessions()[0].background.wait(10)
    answer = serve_one(one, "k", [*history, {"role": "user", "content": "and now?"}, *turns[n + 2]])
    assert answer["session"] == "k"
    store = store_factory.open()
    rows = store.export("k", include_absorbed=True)
    assert not any("STALE" in str(m.get("content")) for m in rows)
    assert known_digests(rows) is not None
    assert "StoreConflict" not in caplog.text and "stale" not in caplog.text


def test_closing_a_shared_router_applies_a_pending_pass_only_where_the_store_has_not_moved(store_factory, caplog):
    turns = [turn(i) for i in range(12)]
    late, mine = Gated("LATE"), Gated("MINE")
    one = SessionRouter(_background_config(), store=store_factory.open(), summarizer=late, shared=True)
    n = _until_a_pass_runs(one, turns, late)
    other = SessionRouter(_background_config(), store=store_factory.open(), summarizer=Recorder(), shared=True)
    serve_one(other, "k", [m for t in turns[: n + 2] for m in t])  # the conversation moved on elsewhere
    other.close()
    late.gate.set()
    one.close()  # its pass is stale: abandoned, not written
    rows = store_factory.open().export("k", include_absorbed=True)
    assert not any("LATE" in str(m.get("content")) for m in rows)
    assert "StoreConflict" not in caplog.text

    alone = SessionRouter(_background_config(), store=store_factory.open(), summarizer=mine, shared=True)
    _until_a_pass_runs(alone, turns, mine, key="alone")
    mine.gate.set()
    alone.close()  # nobody wrote since: the pass is finished and written before closing
    active = store_factory.open().load_active("alone")
    markers = [m for m in active if (m.get("_mc") or {}).get("marker") == "micro"]
    assert any("MINE" in str(m["content"]) for m in markers)
