"""One Session shared by several threads (issue 8, item 2): no message lost or stored twice, concurrent
flushes write each message once, readers always get a consistent snapshot, hooks keep running (and never
raise) while other threads append, read and flush. Real stores; stored rows are counted.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from microcompact.config import parse_config
from microcompact.events import BATCH_COMPACTIONS, Outcome
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter

SID = "threads"


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    """Switch threads far more often than the default 5 ms, so that races show up within a short test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def counter() -> TokenCounter:
    return TokenCounter(EstimateCounter())


def compacting_config(background: bool = False):
    return parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_background": background},
            "model": {"context_length": 8_000},
        }
    )


class Summarizer:
    name = "threads"

    def merge(self, summary, exchange):
        return (summary + f"\n- {len(exchange)} messages").strip()

    def batch(self, summary, messages, focus=None):
        return (summary + f"\n- batch of {len(messages)}").strip()

    def condense(self, summary, target_tokens):
        return summary[: len(summary) // 4]


def run_threads(workers: list[Callable[[], None]]) -> list[BaseException]:
    """Start all workers at once; returns what any of them raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(workers))

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            try:
                fn()
            except BaseException as exc:  # reported to the test
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(w)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    return errors


def appender(session: Session, writer: int, n: int, flush_every: int = 0) -> Callable[[], None]:
    def work() -> None:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            session.append(
                {"role": role, "content": f"w{writer} m{i} " + "text " * (i % 7 * 10), "_tag": f"{writer}-{i}"}
            )
            if flush_every and i % flush_every == 0:
                session.flush()

    return work


def stored_tags(store) -> Counter[str]:
    """How many rows hold each appended message (compaction's own rows carry no ``_tag``)."""
    return Counter(m["_tag"] for m in store.export(SID, include_absorbed=True) if "_tag" in m)


def expected_tags(writers: int, n: int) -> Counter[str]:
    return Counter(f"{w}-{i}" for w in range(writers) for i in range(n))


def test_threads_appending_and_flushing_store_every_message_once(store):
    session = Session(parse_config({}), Summarizer(), session_id=SID, store=store, counter=counter())
    writers, n = 4, 150
    errors = run_threads(
        [appender(session, w, n, flush_every=3) for w in range(writers)]
        + [lambda: [session.flush() for _ in range(200)]] * 2
    )
    assert errors == []
    assert session.flush()
    tags = [m["_tag"] for m in session.transcript]
    assert Counter(tags) == expected_tags(writers, n)  # none lost, none twice, in memory...
    for w in range(writers):  # ...each writer's messages in its own order
        mine = [t for t in tags if t.startswith(f"{w}-")]
        assert mine == [f"{w}-{i}" for i in range(n)]
    assert stored_tags(store) == expected_tags(writers, n)  # ...and in the store, once each
    assert [m["_tag"] for m in store.load_active(SID)] == tags
    session.close()


def test_readers_get_consistent_snapshots_while_others_write(store):
    session = Session(parse_config({}), Summarizer(), session_id=SID, store=store, counter=counter())
    writers, n = 3, 200
    done = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while not done.is_set():
            api = session.messages
            json.dumps(api)  # iterating every message: no "dictionary changed size during iteration"
            snap = session.transcript
            rows = [m.get("_row") for m in snap]
            session.flush()  # stores (and stamps) messages of the snapshot...
            assert [m.get("_row") for m in snap] == rows  # ...without changing what the reader holds
            pending = sum(1 for m in snap if "_row" not in m)
            assert all("_row" in m for m in snap[: len(snap) - pending])  # stored: a prefix
            seen.append(len(api))

    def writers_then_stop() -> None:
        errors = run_threads([appender(session, w, n) for w in range(writers)])
        done.set()
        assert errors == []

    errors = run_threads([writers_then_stop, reader, reader])
    assert errors == []
    assert seen  # the readers ran
    assert session.flush()
    assert stored_tags(store) == expected_tags(writers, n)
    session.close()


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_hooks_compact_while_threads_append_read_and_flush(store, background):
    """An agent whose tool threads append results while the loop thread runs the hooks: compaction goes on,
    the hooks never raise, nothing is lost or stored twice, and the store matches memory at the end."""
    session = Session(compacting_config(background), Summarizer(), session_id=SID, store=store, counter=counter())
    writers, n = 3, 120
    outcomes: Counter[str] = Counter()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            outcomes.update(r.outcome for r in session.before_request())
            outcomes.update(r.outcome for r in session.finalize_turn())
            _ = session.messages  # a read collects a finished background pass

    def appenders() -> None:
        errors = run_threads([appender(session, w, n, flush_every=5) for w in range(writers)])
        stop.set()
        assert errors == []

    errors = run_threads([appenders, loop, lambda: [session.transcript for _ in range(300)]])
    assert errors == []
    outcomes.update(r.outcome for r in session.finalize_turn())
    outcomes.update(r.outcome for r in session.drain())
    session.close()
    # Compaction went on: a micro pass absorbed, or batch compaction pruned or compacted (under load, the
    # batch engine may fold the appenders' many user messages: user_floor_exceeded is a compaction too).
    assert sum(outcomes[o] for o in {Outcome.ABSORBED, Outcome.PRUNED, *BATCH_COMPACTIONS}) >= 1, outcomes
    assert not outcomes["store_failed"], outcomes
    assert stored_tags(store) == expected_tags(writers, n)
    stored = store.load_active(SID)
    assert [(m["role"], m.get("content"), m["_row"]) for m in stored] == [
        (m["role"], m.get("content"), m["_row"]) for m in session.transcript
    ]
