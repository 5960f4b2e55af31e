"""One Session path: inline and background are two runners of the same hooks.

Driven turn by turn and drained after each, both modes leave the same transcript; what differs is when a
pass runs, never what it does. ``abandon`` drops a session without waiting for or applying its pass.
"""

from __future__ import annotations

import threading
import time

from microcompact.config import parse_config
from microcompact.messages import marker_count, to_api
from microcompact.session import Session
from microcompact.session.runners import BackgroundRunner, InlineRunner, PassRunner
from microcompact.tokens import EstimateCounter, TokenCounter
from support.micro_helpers import Recorder, turn


def config(background: bool) -> object:
    compression = {
        "micro_compact": True,
        "micro_compact_background": background,
        "micro_compact_max_exchange_tokens": 4000,
    }
    return parse_config({"compression": compression, "model": {"context_length": 20_000}})


def session(background: bool, summarizer: Recorder | None = None) -> Session:
    return Session(config(background), summarizer or Recorder(), counter=TokenCounter(EstimateCounter()))


class Held(Recorder):
    """A summarizer that waits for ``release`` (at most ``limit`` seconds) before it answers."""

    def __init__(self, limit: float = 10.0) -> None:
        super().__init__()
        self.release = threading.Event()
        self.started = threading.Event()
        self.limit = limit

    def merge(self, summary, exchange):
        self.started.set()
        self.release.wait(self.limit)
        return super().merge(summary, exchange)


def test_both_runners_satisfy_the_protocol_the_session_holds() -> None:
    inline, background = session(False), session(True)
    runners: list[PassRunner] = [inline._runner, background._runner]
    assert [type(r) for r in runners] == [InlineRunner, BackgroundRunner]
    assert inline.background is None and background.background is not None
    background.close()


def test_inline_and_background_reach_the_same_transcript_turn_by_turn() -> None:
    inline, background = session(False), session(True)
    for i in range(10):
        for s in (inline, background):
            s.extend(turn(i))
            s.before_request()
            s.finalize_turn()
            s.drain()
        assert to_api(background.transcript) == to_api(inline.transcript), f"after turn {i}"
    assert marker_count(inline.transcript, "micro") == 1
    background.close()


def test_inline_hooks_run_the_pass_before_they_return_and_drain_has_nothing_to_wait_for() -> None:
    s = session(False)
    for i in range(6):
        s.extend(turn(i))
        s.finalize_turn()
    assert marker_count(s.transcript, "micro") == 1
    assert s.drain(5) == [] and s.take_spent() == []
    s.abandon()  # nothing runs on another thread: nothing to stop
    s.close()


def test_abandon_leaves_a_running_pass_unwaited_and_unapplied() -> None:
    held = Held()
    s = session(True, held)
    for i in range(6):
        s.extend(turn(i))
    before = s.transcript
    s.finalize_turn()
    assert held.started.wait(5) and s.background is not None and s.background.busy
    started = time.monotonic()
    s.abandon()
    assert time.monotonic() - started < held.limit / 2, "abandon never waits for the summarizer"
    assert s.transcript == before
    held.release.set()
