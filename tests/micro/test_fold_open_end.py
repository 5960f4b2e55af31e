"""A fold computed ahead that kept none of the transcript it ran on (``FoldJob.open_end``), driven through a
real background :class:`Session`: it is never adopted at a retry of the request it ran on (the price rule's
verdict, the batch threshold's ``adopt_held``), the next request with new messages adopts it, and at no
request of a long session does the forwarded view break the contract: user messages verbatim and in order,
every tool result after its call, never a marker at the end, the request's newest message never absorbed.

Deterministic: the session's clock is a list the test moves, and the test waits for the worker after every
request (``background.wait``), so what the worker computed is there at the next request whatever the load.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from microcompact.bill.fold_price import Verdict
from microcompact.config import parse_config
from microcompact.contract import tool_pairing_errors, user_message_errors
from microcompact.events import MICRO_ABSORBS
from microcompact.messages import is_marker, to_api
from microcompact.micro import FoldJob
from microcompact.micro.price import PricePolicy
from microcompact.session import Session
from support.price_loop import Notes
from support.price_loop import step_session as session
from support.strategies import examples

WINDOW = 200_000
FOLDS = (Verdict.FOLD, Verdict.COLD, Verdict.FORCED)
TTL = 300.0  # the anthropic preset's 5-minute cache


def config(**compression: Any) -> Any:
    return parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": True, **compression},
            "model": {"context_length": WINDOW},
            "pricing": {"preset": "anthropic"},
        }
    )


def policy(s: Session) -> PricePolicy:
    assert isinstance(s.micro.policy, PricePolicy)
    return s.micro.policy


def answered(s: Session) -> None:
    """The provider's answer: the prompt read from the cache up to the last request, the rest written."""
    t = s.tokens
    last = s.cache.last
    read = min(t, last.cached_after) if last is not None else 0
    s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)


def absorbed(results: list[Any]) -> int:
    return sum(1 for r in results if getattr(r, "outcome", None) in MICRO_ABSORBS)


class Loop:
    """A background session and every message the agent appended to it (the client's history)."""

    def __init__(self, s: Session, now: list[float]) -> None:
        self.s, self.now = s, now
        self.history: list[dict[str, Any]] = [dict(m) for m in s.ledger.messages]
        self.calls = 0

    def append(self, message: dict[str, Any]) -> None:
        self.s.append(message)
        self.history.append(message)

    def step(self, n: int, lines: int, args: int = 0, result: bool = True, calls: int = 1) -> list[str]:
        """One assistant message of ``calls`` tool calls (``args`` words of arguments: a Write's file) and,
        unless ``result`` is False, their ``lines``-line outputs."""
        ids = [f"c{n}"] if calls == 1 else [f"c{n}_{k}" for k in range(calls)]
        arguments = json.dumps({"content": "word " * args}) if args else "{}"
        tool_calls = [{"id": i, "type": "function", "function": {"name": "Bash", "arguments": arguments}} for i in ids]
        self.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        if result:
            for call in ids:
                self.result(call, n, lines)
        return ids

    def result(self, call: str, n: int, lines: int) -> None:
        self.append(
            {"role": "tool", "tool_call_id": call, "content": "\n".join(str(n * 10**6 + i) for i in range(lines))}
        )

    def request(
        self, gap: float = 10.0, answer: bool = True, settle: bool = True, **kwargs: Any
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """One model request: its results and the view forwarded (``messages``, checked against the
        contract); then the answer, and the worker's job finishes before the next request (``settle``;
        False when the test holds the summarizer's gate, so the job cannot finish yet)."""
        self.now[0] += gap
        results = self.s.before_request(**kwargs)
        view = self.s.messages
        problems = view_problems(self.history, view, self.s.transcript)
        assert not problems, problems
        if answer:
            answered(self.s)
        assert self.s.background is not None
        if settle:
            self.s.background.wait(60)
        return results, view


def view_problems(
    history: list[dict[str, Any]], view: list[dict[str, Any]], transcript: list[dict[str, Any]]
) -> list[str]:
    """What is wrong with ``view`` (``transcript``, its messages with the library's metadata) as the request
    for ``history`` (whose newest message may be a call whose result has not come yet: the only call
    allowed without results)."""
    problems = user_message_errors(to_api(history), view)
    # The newest call may wait for (some of) its results, in the view as in the history, and nothing else.
    waiting = [e for e in tool_pairing_errors(history) if e.startswith(f"message {trailing_call(history)}:")]
    problems += [
        e
        for e in tool_pairing_errors(view)
        if not (waiting and e.startswith(f"message {trailing_call(view)}:") and e.endswith("have no result"))
    ]
    if to_api(transcript) != view:
        problems.append("the view is not the transcript's")
    if transcript and is_marker(transcript[-1]):
        problems.append("the view ends in the marker")
    if not view or view[-1] != to_api(history[-1:])[0]:
        problems.append("the request's newest message is not the view's last, verbatim")
    return problems


def trailing_call(messages: list[dict[str, Any]]) -> int | None:
    """The index of the newest assistant message when only tool results follow it."""
    j = len(messages) - 1
    while j >= 0 and messages[j].get("role") == "tool":
        j -= 1
    return j if j >= 0 and messages[j].get("role") == "assistant" else None


def markers(s: Session) -> list[int]:
    return [i for i, m in enumerate(s.transcript) if is_marker(m)]


def held(s: Session) -> FoldJob | None:
    assert s.background is not None
    return s.background.ready


def open_end_held(loop: Loop, limit: int = 60) -> int:
    """Steps and requests until an open-ended fold computed ahead is held with nothing after its snapshot:
    the number of the next step."""
    s = loop.s
    for n in range(limit):
        loop.request()
        s.drain(60)  # the ahead job's result is held now (a ``messages`` read would do the same)
        job = held(s)
        if job is not None and job.open_end and job.covered == len(s.ledger.messages):
            return n
        loop.step(n, 3000)
    raise AssertionError(f"no open-ended fold held in {limit} steps")


def test_a_retry_when_a_held_open_ended_fold_is_due_leaves_it_held_and_the_next_step_adopts_it():
    now = [0.0]
    loop = Loop(session(config(), now), now)
    s = loop.s
    assert s.background is not None
    n = open_end_held(loop)
    job = held(s)
    assert job is not None
    before = [dict(m) for m in s.ledger.messages]
    adopted = s.background.adopted_ahead
    # The client retries the same request after the cache went cold: the rule says fold (at no cache cost),
    # the held shadow applies, but adopting it would leave nothing after its marker.
    results, view = loop.request(gap=TTL + 60)
    assert policy(s).last is not None and policy(s).last.verdict in FOLDS, "the fold is due at the retry"
    assert absorbed(results) == 0 and s.background.adopted_ahead == adopted
    assert held(s) is job and s.micro.applies(s.ledger, job) and not s.background.shadows.adoptable(s.ledger, job)
    assert [dict(m) for m in s.ledger.messages] == before and view == to_api(before)
    # Retried once more, warm this time: still the same view.
    results, view = loop.request()
    assert absorbed(results) == 0 and view == to_api(before)
    # The next step comes: the held fold is adopted at that request, the step is its tail.
    loop.step(n, 3000)
    results, view = loop.request()
    assert absorbed(results) > 0 and s.background.adopted_ahead == adopted + 1
    (marker,) = markers(s)
    assert [m["role"] for m in view[marker + 1 :]] == ["assistant", "tool"]
    assert view[marker + 1]["tool_calls"][0]["id"] == f"c{n}"


def test_a_fold_due_while_it_runs_lands_held_at_a_retry_not_adopted_nor_lost():
    """The rule says fold while the fold computed ahead is still on the worker (``_adopt_running``); it lands
    at a retry of the request it ran on: held (adopting it would leave nothing after its marker), and the
    next step adopts it. The summarizer's gate holds the worker: no timing."""
    now = [0.0]
    notes = Notes()
    loop = Loop(session(config(), now, notes), now)
    s = loop.s
    assert s.background is not None
    for n in range(60):
        ahead = policy(s).ahead
        notes.gate.clear()
        now[0] += 10
        s.before_request()
        if s.background.busy and policy(s).ahead > ahead:
            break
        notes.gate.set()
        answered(s)
        s.background.wait(60)
        loop.step(n, 3000)
    else:
        raise AssertionError("no fold started ahead in 60 steps")
    answered(s)
    before = [dict(m) for m in s.ledger.messages]
    # The same request again after the cache went cold: the fold is due, the worker still runs it.
    results, view = loop.request(gap=TTL + 60, settle=False)  # the gate holds the worker: waiting is 60 s lost
    assert policy(s).last is not None and policy(s).last.verdict in FOLDS and s.background.busy
    assert absorbed(results) == 0 and view == to_api(before)
    notes.gate.set()
    adopted, discarded = s.background.adopted_ahead, s.background.discarded
    assert absorbed(s.drain(60)) == 0, "it landed with nothing after its snapshot: held"
    job = held(s)
    assert job is not None and job.open_end and job.covered == len(before)
    assert s.background.discarded == discarded and [dict(m) for m in s.ledger.messages] == before
    loop.step(n, 3000)
    results, view = loop.request()
    assert absorbed(results) > 0 and s.background.adopted_ahead == adopted + 1
    (marker,) = markers(s)
    assert view[marker + 1]["tool_calls"][0]["id"] == f"c{n}"


def test_a_held_open_ended_fold_extended_at_the_turn_end_with_nothing_new_stays_open_ended():
    """The proxy's follow-up runs ``fold_ahead`` on the transcript of the request just answered (the upstream's
    answer is not in it): a fold computed ahead at that request and held is extended there over no new
    message, with the turn end's one-message tail. What it absorbed stays absorbed: a retry of the request
    must still not adopt it."""
    now = [0.0]
    loop = Loop(session(config(), now), now)
    s = loop.s
    assert s.background is not None
    n = open_end_held(loop)
    before = [dict(m) for m in s.ledger.messages]
    ahead = policy(s).ahead
    s.fold_ahead()  # the upstream said the turn is over
    assert policy(s).ahead == ahead + 1, "the turn end's fold was started"
    s.drain(60)
    job = held(s)
    assert job is not None and job.covered == len(before) and job.open_end
    results, view = loop.request(gap=TTL + 60)  # the client retries after an idle gap: the fold is due
    assert policy(s).last is not None and policy(s).last.verdict in FOLDS
    assert absorbed(results) == 0 and view == to_api(before)
    loop.step(n, 3000)
    results, view = loop.request()
    assert absorbed(results) > 0
    (marker,) = markers(s)
    assert view[marker + 1]["tool_calls"][0]["id"] == f"c{n}"


def test_the_batch_threshold_does_not_adopt_an_open_ended_fold_at_a_retry():
    now = [0.0]
    loop = Loop(session(config(), now), now)
    s = loop.s
    assert s.background is not None
    open_end_held(loop)
    job = held(s)
    assert job is not None
    threshold = s.config.threshold_tokens()
    assert threshold is not None
    adopted, discarded = s.background.adopted_ahead, s.background.discarded
    # The same request again, and the provider says the prompt is over the batch threshold: the held fold
    # is not adopted (nothing would follow its marker) nor dropped by ``adopt_held``; the batch runs.
    results, view = loop.request(prompt_tokens=threshold + 1)
    assert absorbed(results) == 0 and s.background.adopted_ahead == adopted
    assert s.background.discarded == discarded and held(s) is job
    assert any(getattr(r, "record", {}).get("event") == "batch_compaction" for r in results), results
    assert not is_marker(s.transcript[-1]) and view[-1] == to_api(loop.history[-1:])[0]


def test_the_batch_threshold_adopts_a_held_open_ended_fold_once_a_step_came():
    now = [0.0]
    loop = Loop(session(config(), now), now)
    s = loop.s
    assert s.background is not None
    n = open_end_held(loop)
    threshold = s.config.threshold_tokens()
    assert threshold is not None
    adopted = s.background.adopted_ahead
    loop.step(n, 3000)
    before = s.tokens
    results, view = loop.request(prompt_tokens=threshold + 1)
    assert absorbed(results) > 0 and s.background.adopted_ahead == adopted + 1, "the fold landed first"
    assert s.tokens < before
    (marker,) = markers(s)
    assert view[marker + 1]["tool_calls"][0]["id"] == f"c{n}"


def test_a_request_in_the_middle_of_an_iteration_never_strands_its_result():
    """A request made while the newest tool call has no result yet (the properties' mid-iteration hook):
    a fold computed ahead there with an empty tail must not absorb that call, or its result comes after a
    marker with no call before it. Small steps, so the exchange in progress is a whole one a turn pass
    takes; a large call (a Write of a file), so no token budget keeps it."""
    now = [0.0]
    loop = Loop(session(config(micro_compact_low_water_tokens=300), now), now)
    s = loop.s
    n = 0
    for turn in range(14):
        if turn:
            loop.append({"role": "user", "content": f"turn {turn}"})
        for _ in range(3):
            loop.request()
            (call,) = loop.step(n, 300, args=600, result=False)
            loop.request()  # mid-iteration: the call's result has not come
            loop.result(call, n, 300)
            n += 1
        loop.request()
        loop.append({"role": "assistant", "content": f"turn {turn} done"})
        s.finalize_turn()
    loop.request()
    assert policy(s).ahead >= 3 and s.micro.state.passes_total > 0, "folds were computed ahead and adopted"


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    plan=st.lists(
        st.tuples(
            st.integers(50, 4000),  # the step's output, in lines (~2 tokens a line)
            st.sampled_from(
                ["step", "step", "step", "retry", "retry-cold", "mid", "parallel-mid", "turn", "turn-proxy"]
            ),
            st.integers(0, 1500),  # the call's arguments, in words
        ),
        min_size=10,
        max_size=45,
    ),
    low_water=st.sampled_from([None, 300, 2_000, 20_000]),
    min_tail=st.sampled_from([None, None, 1, 3]),
)
def test_no_request_of_a_background_session_breaks_the_contract(
    plan: list[tuple[int, str, int]], low_water: int | None, min_tail: int | None
):
    now = [0.0]
    compression: dict[str, Any] = {} if low_water is None else {"micro_compact_low_water_tokens": low_water}
    if min_tail is not None:
        compression["min_tail_messages"] = min_tail
    loop = Loop(session(config(**compression), now), now)
    s = loop.s
    for n, (lines, kind, args) in enumerate(plan):
        note(f"step {n}: {kind}, {lines} lines, {args} words of arguments")
        gap = 10.0
        if kind == "turn":
            loop.append({"role": "assistant", "content": f"done {n}"})
            s.finalize_turn()
            s.fold_ahead()  # as the proxy does when the upstream says the turn is over
            assert s.background is not None
            s.background.wait(60)
            loop.append({"role": "user", "content": f"next {n}"})
            gap = TTL + 1 if n % 2 else 10.0  # an idle gap, or the user answering at once
        loop.request(gap)
        if kind == "turn-proxy":  # the proxy's follow-up: the turn is over, its answer not in the transcript
            s.drain(60)
            s.fold_ahead()
            s.drain(60)
            loop.request(gap=TTL + 1)  # the client did not get the answer: the same request again
            loop.append({"role": "assistant", "content": f"done {n}"})
            loop.append({"role": "user", "content": f"next {n}"})
            loop.request()
        if kind == "retry":
            loop.request(answer=False)  # the upstream failed: the client sends the same request again
        elif kind == "retry-cold":
            loop.request(gap=TTL + 1)
        mid = kind in ("mid", "parallel-mid")
        calls = loop.step(n, lines, args, result=not mid, calls=2 if kind == "parallel-mid" else 1)
        if mid:
            if len(calls) > 1:
                loop.result(calls[0], n, lines)
            loop.request()  # between the call and its (last) result
            loop.result(calls[-1], n, lines)
    loop.request()
    loop.request()  # and a retry of the last one
