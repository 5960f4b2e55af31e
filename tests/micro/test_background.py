"""Background micro-compaction: finalize_turn does not wait for the summarizer; stale results are dropped."""

from __future__ import annotations

import threading
import time

from microcompact.config import parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import marker_count
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter
from support.micro_helpers import Recorder, turn


class Slow(Recorder):
    def __init__(self, delay: float):
        super().__init__()
        self.delay = delay
        self.gate = threading.Event()

    def merge(self, summary, exchange):
        time.sleep(self.delay)
        return super().merge(summary, exchange)


def config(**extra):
    c = {"micro_compact": True, "micro_compact_background": True, "micro_compact_max_exchange_tokens": 4000}
    c.update(extra)
    return parse_config({"compression": c, "model": {"context_length": 20_000}})


def test_finalize_turn_returns_at_once_and_result_is_applied_later():
    summ = Slow(0.3)
    s = Session(config(), summ, counter=TokenCounter(EstimateCounter()))
    turns = [turn(i) for i in range(8)]
    blocked = []
    for t in turns:
        s.extend(t)
        t0 = time.perf_counter()
        s.finalize_turn()
        blocked.append(time.perf_counter() - t0)
    assert max(blocked) < 0.1  # the 0.3 s summarizer never blocks the turn
    s.drain()
    out = s.transcript
    flat = [m for t in turns for m in t]
    assert marker_count(out, "micro") == 1
    assert user_message_errors(flat, out) == [] and role_sequence_errors(out) == []
    assert summ.calls


def test_appends_during_a_pass_do_not_conflict():
    summ = Slow(0.2)
    s = Session(config(), summ, counter=TokenCounter(EstimateCounter()))
    for i in range(6):
        s.extend(turn(i))
    s.finalize_turn()
    assert s.background.busy
    s.extend(turn(6))  # appended while the worker summarizes
    s.drain()
    assert s.background.discarded == 0
    assert marker_count(s.transcript, "micro") == 1


def test_changed_span_is_discarded_and_retried():
    summ = Slow(0.2)
    s = Session(config(), summ, counter=TokenCounter(EstimateCounter()))
    for i in range(6):
        s.extend(turn(i))
    s.finalize_turn()
    s.compact()  # a batch compaction rewrites the middle under the running pass
    s.drain()
    assert s.background.discarded == 1
    out = s.transcript
    assert marker_count(out, "micro") <= 1 and marker_count(out, "batch") >= 1  # (one per run of work)
    assert role_sequence_errors(out) == []


def test_close_waits_for_the_worker():
    s = Session(config(), Slow(0.1), counter=TokenCounter(EstimateCounter()))
    for i in range(6):
        s.extend(turn(i))
    s.finalize_turn()
    s.close()
    assert not s.background.busy
