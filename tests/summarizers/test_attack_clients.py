"""Adversarial review of the caller's-client summarizer path and AsyncSession: event loops that stop or
block under a pending summary, chain links that hang, secrets in failures, and callers that change a
message after handing it over."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from microcompact import Session, summarizer_from
from microcompact.config import parse_config
from microcompact.messages import is_marker
from microcompact.session.aio import AsyncSession
from microcompact.summarizers import (
    ExtractiveSummarizer,
    FallbackChain,
    SummarizerError,
    SummarizerTimeout,
    SummarizerUnavailable,
)
from microcompact.tokens import EstimateCounter, TokenCounter
from support.chat_server import ChatServer
from support.lazy_sdk import lazy

openai = lazy("openai")

MICRO = {
    "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
    "model": {"context_length": 20_000},
}
SECRET = "sk-proj-" + "Zq8wE4rT6yU2iO0pA9sD7fG5hJ3kL1xC"
EXCHANGE = [
    {"role": "assistant", "content": "Running the tests."},
    {"role": "tool", "tool_call_id": "c1", "content": "3 passed"},
]


async def _summary(prompt: str) -> str:
    await asyncio.sleep(0.01)
    return "### Decisions\n- keep going"


async def _never(prompt: str) -> str:
    await asyncio.Event().wait()
    return "unreachable"


@pytest.fixture
def idle_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop that ran once and is now stopped but open (``run_until_complete`` style)."""
    loop = asyncio.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0))
    yield loop
    loop.run_until_complete(asyncio.sleep(0.05))  # running again, it drops the summaries given up on
    loop.close()


def _in_thread(call, limit: float):
    """``call()``'s result or exception from another thread, and how long it took (None: still running)."""
    out: list[object] = []
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: out.append(_outcome(call)), daemon=True)
    thread.start()
    thread.join(limit)
    return (out[0] if out else None), time.monotonic() - t0


def _outcome(call):
    try:
        return call()
    except Exception as exc:
        return exc


# --------------------------------------------------------------------------- event loops under a pending summary


def test_a_stopped_bound_loop_fails_the_call_instead_of_hanging(idle_loop):
    summarizer = summarizer_from(_summary, timeout=None)
    summarizer.bind_loop(idle_loop)
    outcome, took = _in_thread(lambda: summarizer.merge("", EXCHANGE), limit=6)
    assert isinstance(outcome, SummarizerUnavailable), f"still waiting after {took:.1f}s: {outcome!r}"
    assert "stopped" in str(outcome)


def test_a_blocked_loop_is_given_up_soon_after_the_timeout():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    release = threading.Event()
    loop.call_soon_threadsafe(release.wait, 10)  # a callback that blocks the loop (sync I/O in a handler)
    try:
        summarizer = summarizer_from(_summary, timeout=0.3)
        summarizer.bind_loop(loop)
        outcome, took = _in_thread(lambda: summarizer.merge("", EXCHANGE), limit=8)
        assert isinstance(outcome, SummarizerTimeout), outcome
        assert took < 4, f"the timeout is 0.3 s, the call took {took:.1f} s"
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), loop).result(5)  # the given-up summary is dropped
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()


def test_a_chain_link_waiting_on_a_stopped_loop_falls_over_to_the_next(idle_loop):
    chain = FallbackChain(summarizer_from(_never, timeout=None), ExtractiveSummarizer())
    chain.bind_loop(idle_loop)
    outcome, _ = _in_thread(lambda: chain.merge("", EXCHANGE), limit=6)
    assert isinstance(outcome, str) and chain.last_used == "extractive", outcome


def test_an_sdk_client_is_bounded_by_default():
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    summarizer = summarizer_from(client, model="m")
    assert summarizer.backend.client.timeout == 60.0, "the SDK's own default is ten minutes"
    assert summarizer_from(_never).timeout == 60.0, "an async callable that never answers would hang forever"


# --------------------------------------------------------------------------- secrets in failures


def test_a_failing_client_puts_no_secret_in_errors_or_logs(chat_server: ChatServer, caplog):
    def leaky(prompt: str) -> str:
        raise RuntimeError(f"upstream refused key {SECRET}: {prompt[-200:]}")

    config = parse_config(MICRO)
    client = openai.OpenAI(api_key=SECRET, base_url=chat_server.base_url)
    chat_server.add_faults(401, 500)
    chain = FallbackChain(summarizer_from(client, model="m"), summarizer_from(leaky, model="leaky"))
    with pytest.raises(SummarizerError) as failure:
        chain.merge("", [{"role": "user", "content": f"my key is {SECRET}"}, *EXCHANGE])
    assert SECRET not in str(failure.value)
    session = Session(config, chain, counter=TokenCounter(EstimateCounter()))
    session.append({"role": "user", "content": f"deploy with {SECRET}"})
    for turn in range(4):
        session.append({"role": "assistant", "content": f"Working on step {turn}. " + "detail " * 700})
        session.append({"role": "user", "content": f"next {turn}"})
        with caplog.at_level(logging.DEBUG, logger="microcompact"):
            session.finalize_turn()
    assert caplog.records, "the failures were logged"
    assert SECRET not in caplog.text
    assert all(SECRET not in str(r.get("messages")) for r in chat_server.requests)


# --------------------------------------------------------------------------- AsyncSession and its callers


def test_a_message_changed_after_append_enters_as_checked_and_only_once():
    async def main() -> list:
        session = AsyncSession(parse_config({"compression": {"tokenizer": "estimate"}}))
        call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        session.extend([{"role": "user", "content": "first"}, {"role": "assistant", "tool_calls": [call]}])
        del call["id"]  # the framework reuses its tool-call object after handing the message over
        for _ in range(3):
            await session.before_request()  # never raises
        await session.close()
        return session.transcript

    transcript = asyncio.run(main())
    assert [m.get("content") for m in transcript] == ["first", None]
    assert transcript[1]["tool_calls"][0]["id"] == "c1"


def test_an_async_session_survives_its_loop_closing_mid_pass():
    """The app's asyncio.run ends (its loop closes) while a background pass waits for the async client;
    the next run on a new loop finds the session whole and compacts again."""
    config = parse_config({**MICRO, "compression": {**MICRO["compression"], "micro_compact_background": True}})
    started = threading.Event()

    async def slow(prompt: str) -> str:
        started.set()
        await asyncio.sleep(30)
        return "### Decisions\n- late"

    session = AsyncSession(config, summarizer_from(slow, timeout=None), counter=TokenCounter(EstimateCounter()))

    async def first() -> None:
        session.append({"role": "user", "content": "go"})
        for turn in range(4):
            session.append({"role": "assistant", "content": f"Working on step {turn}. " + "detail " * 700})
            session.append({"role": "user", "content": f"next {turn}"})
            await session.finalize_turn()
        await asyncio.to_thread(started.wait, 5)

    asyncio.run(first())
    assert started.is_set(), "a pass was waiting for the client when the loop closed"
    session.session.summarizer.backend.function = _summary  # the model is reachable again

    async def second() -> list:
        await session.drain(timeout=10)
        for turn in range(4, 8):
            session.append({"role": "assistant", "content": f"Working on step {turn}. " + "detail " * 700})
            session.append({"role": "user", "content": f"next {turn}"})
            await session.finalize_turn()
            await session.drain(timeout=10)
        await session.close()
        return session.transcript

    transcript = asyncio.run(second())
    users = [m["content"] for m in transcript if m["role"] == "user"]
    assert users == ["go"] + [f"next {t}" for t in range(8)]
    assert any(is_marker(m) for m in transcript)


def test_a_summary_after_its_loop_closed_does_not_lock_the_client_out_of_the_next_loop():
    summarizer = summarizer_from(_summary)

    async def first() -> None:
        summarizer.bind_loop(asyncio.get_running_loop())
        await asyncio.to_thread(summarizer.merge, "", EXCHANGE)

    asyncio.run(first())
    # A background pass that reaches the summarizer after the app's loop closed: the client's loop is gone.
    with pytest.raises(SummarizerUnavailable, match="closed"):
        summarizer.merge("", EXCHANGE)

    async def second() -> list:
        session = AsyncSession(parse_config(MICRO), summarizer, counter=TokenCounter(EstimateCounter()))
        session.append({"role": "user", "content": "go"})
        for turn in range(4):
            session.append({"role": "assistant", "content": f"Working on step {turn}. " + "detail " * 700})
            session.append({"role": "user", "content": f"next {turn}"})
            await session.finalize_turn()
        await session.close()
        return session.transcript

    assert any(is_marker(m) for m in asyncio.run(second())), "the next loop's session compacts with the client"


@pytest.mark.parametrize("key", ["messages", "model", "system", "stream"])
def test_options_that_would_break_every_request_are_refused_at_once(key):
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=f"options may not set {key}"):
        summarizer_from(client, model="m", options={key: True})
