"""AsyncSession: the Session contract for asyncio agents; a pass never blocks the event loop.

Summarizers are real: the OpenAI SDK's async and sync clients against a slow local server, async
callables, the extractive summarizer on the shared real transcripts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from microcompact import AsyncSession, Session, open_store, summarizer_from
from microcompact.config import parse_config
from microcompact.messages import TranscriptError, marker_body, marker_kind, to_api
from microcompact.replay import load_transcript, replay
from microcompact.session import HistoryDiverged
from microcompact.tokens import EstimateCounter, TokenCounter
from support import builders
from support.chat_server import ChatServer
from support.lazy_sdk import lazy
from support.paths import NORMALIZED

openai = lazy("openai")

LATENCY = 0.5


config = partial(builders.config, protect_first_n=1, micro_compact_max_exchange_tokens=4000)


def turn(n: int) -> list[dict[str, Any]]:
    """A user request and a long answer: after a few of these, each finalize_turn absorbs one exchange."""
    return [
        {"role": "user", "content": f"request {n}"},
        {"role": "assistant", "content": f"Working on request {n}. " + "detail " * 700},
    ]


async def ticking_while(work: Any, period: float = 0.01) -> tuple[Any, int]:
    """(result of awaiting ``work``, how many times a ticker ran meanwhile)."""
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(period)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        return await work, ticks
    finally:
        done.set()
        await task


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_the_loop_keeps_ticking_while_a_slow_summarizer_runs(chat_server: ChatServer, asynchronous: bool) -> None:
    cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    chat_server.latency = LATENCY

    async def main() -> None:
        client = cls(api_key="k", base_url=chat_server.base_url)
        session = AsyncSession(config(), summarizer_from(client, model="slow-model"))
        for n in range(3):
            session.extend(turn(n))
        t0 = time.monotonic()
        results, ticks = await ticking_while(session.finalize_turn())
        elapsed = time.monotonic() - t0
        assert [r.outcome for r in results] == ["absorbed"]
        assert elapsed >= LATENCY and ticks >= 10  # the loop ran all along (blocked, it ticks at most once)
        (marker,) = [m for m in session.transcript if marker_kind(m) == "micro"]
        assert marker_body(marker).startswith("### Goal\nnone\n### Work done\nTest summary")
        if asynchronous:  # the agent keeps using the same client on its loop: nothing broke
            chat_server.latency = 0
            reply = await client.chat.completions.create(model="main", messages=session.messages)
            assert reply.choices[0].message.content
        await session.close()

    asyncio.run(main())


def test_an_async_summarizer_runs_on_the_sessions_loop_in_background_mode() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def summarize(prompt: str) -> str:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(LATENCY)
        return "### Decisions\n- keep going"

    async def main() -> None:
        session = AsyncSession(config(micro_compact_background=True), summarizer_from(summarize))
        for n in range(3):
            session.extend(turn(n))
        t0 = time.monotonic()
        assert await session.finalize_turn() == []  # the pass went to the background thread
        assert time.monotonic() - t0 < LATENCY
        results, ticks = await ticking_while(session.drain())
        assert [r.outcome for r in results] == ["absorbed"] and ticks >= 10
        assert loops == [asyncio.get_running_loop()]
        assert any(marker_kind(m) == "micro" for m in session.transcript)
        await session.close()

    asyncio.run(main())


def test_many_tasks_appending_keep_every_message_once_and_in_their_order() -> None:
    # A window large enough that batch compaction never folds user messages; a small tail so micro passes run.
    settings = parse_config(
        {"compression": {"micro_compact": True, "target_ratio": 0.01}, "model": {"context_length": 10**6}}
    )

    async def main() -> AsyncSession:
        session = AsyncSession(settings, counter=TokenCounter(EstimateCounter()))
        session.append({"role": "system", "content": "You are a coding agent."})

        async def writer(t: int) -> None:
            for k in range(10):
                session.append({"role": "user", "content": f"task {t} message {k}"})
                session.append({"role": "assistant", "content": f"answer {t}.{k} " + "text " * 300})
                await asyncio.sleep(0)

        async def hooks() -> None:
            for _ in range(20):
                await session.before_request()
                await session.finalize_turn()

        await asyncio.gather(*(writer(t) for t in range(20)), hooks())
        await session.close()
        return session

    session = asyncio.run(main())
    users = [m["content"] for m in session.messages if m["role"] == "user"]
    assert len(users) == len(set(users)) == 200
    for t in range(20):
        assert [u for u in users if u.startswith(f"task {t} ")] == [f"task {t} message {k}" for k in range(10)]
    assert session.session.micro.state.passes_total > 0  # passes ran while the tasks appended
    assert to_api(session.session.transcript) == session.messages


def test_appended_messages_show_at_once_and_bad_ones_are_refused_at_the_call() -> None:
    async def main() -> None:
        session = AsyncSession(config(), counter=TokenCounter(EstimateCounter()))
        session.append({"role": "user", "content": "hello", "_note": "library metadata is stripped"})
        assert session.messages == [{"role": "user", "content": "hello"}]
        assert session.tokens == TokenCounter(EstimateCounter()).count_message({"role": "user", "content": "hello"})
        with pytest.raises(TranscriptError, match="message 1: unknown role"):
            session.append({"role": "robot", "content": "beep"})
        with pytest.raises(TranscriptError, match="message 2"):
            session.extend([{"role": "assistant", "content": "fine"}, {"role": "user", "content": float("nan")}])
        assert len(session.messages) == 1  # neither call queued anything
        await session.flush()
        assert len(session.session.transcript) == 1
        await session.close()
        await session.close()  # harmless
        with pytest.raises(RuntimeError, match="is closed"):
            await session.finalize_turn()

    asyncio.run(main())


def test_a_stored_session_resumes_through_async_open(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"

    async def first() -> None:
        store = open_store(db)
        async with AsyncSession(config(), store=store, session_id="s1") as session:
            for n in range(4):
                session.extend(turn(n))
                await session.finalize_turn()
        store.close()

    async def second() -> list[dict[str, Any]]:
        store = open_store(db)
        session = await AsyncSession.open(store, "s1", config())
        session.extend(turn(4))
        await session.finalize_turn()
        messages = session.messages
        await session.close()
        store.close()
        return messages

    asyncio.run(first())
    messages = asyncio.run(second())
    assert [m["content"] for m in messages if m["role"] == "user"] == [f"request {n}" for n in range(5)]
    store = open_store(db)
    with Session.open(store, "s1", config()) as reopened:  # the lease was given back
        assert reopened.messages == messages
    store.close()


async def replay_async(messages: list[dict[str, Any]], session: AsyncSession) -> list[str]:
    """replay()'s schedule on an AsyncSession: finalize before each user message after a turn, before_request
    before each assistant message."""
    outcomes: list[str] = []
    in_turn = False
    for m in messages:
        if m["role"] == "user" and in_turn:
            outcomes += [r.outcome for r in await session.finalize_turn()]
            in_turn = False
        if m["role"] == "assistant":
            outcomes += [r.outcome for r in await session.before_request()]
            in_turn = True
        session.append(m)
    if in_turn:
        outcomes += [r.outcome for r in await session.finalize_turn()]
    outcomes += [r.outcome for r in await session.drain()]
    return outcomes


@pytest.mark.parametrize("name", ["cc_subagent_a2898e3", "sweplay_openhands_largest"])
def test_same_transcript_as_the_sync_session_on_a_real_session(name: str) -> None:
    messages = load_transcript(NORMALIZED / f"{name}.jsonl")
    settings = parse_config({"compression": {"micro_compact": True}, "model": {"context_length": 32_000}})
    sync = Session(settings, session_id="same", clock=lambda: 0.0)
    stats = replay(messages, sync)

    async def main() -> tuple[AsyncSession, list[str]]:
        session = AsyncSession(settings, session_id="same", clock=lambda: 0.0)
        outcomes = await replay_async(messages, session)
        await session.close()
        return session, outcomes

    session, outcomes = asyncio.run(main())
    assert Counter(outcomes) == stats.outcomes + stats.batch_outcomes
    assert json.dumps(session.transcript, sort_keys=True) == json.dumps(sync.transcript, sort_keys=True)
    assert any(marker_kind(m) for m in session.transcript)  # compaction happened


def request_points(messages: list[dict[str, Any]]) -> list[int]:
    """Where an agent calls the model: after a user message or the last of a call's tool results."""
    return [
        i + 1
        for i, m in enumerate(messages)
        if m["role"] in ("user", "tool") and (i + 1 == len(messages) or messages[i + 1]["role"] != "tool")
    ]


def test_full_history_in_gives_the_sync_sessions_compacted_view_out() -> None:
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:220]
    settings = parse_config({"model": {"context_length": 40_000}, "compression": {"micro_compact": True}})
    points = request_points(history)
    sync = Session(settings, session_id="full", clock=lambda: 0.0)
    expected = [sync.compacted(history[:end]) for end in points]

    async def main() -> list[list[dict[str, Any]]]:
        async with AsyncSession(settings, session_id="full", clock=lambda: 0.0) as session:
            views = []
            for end in points:
                views.append(await session.compacted(history[:end]))
                assert session.messages == views[-1]
            with pytest.raises(HistoryDiverged):
                await session.compacted([{"role": "user", "content": "another conversation"}])
            edited = [*history[: points[-1] - 1], {"role": "user", "content": "edited last message"}]
            result = await session.sync_history(edited)
            assert result.diverged is not None and result.diverged.at == points[-1] - 1
            child = await session.fork("full-child", edited, result.diverged.at)
            assert isinstance(child, AsyncSession)
            assert (await child.compacted(edited))[-1] == {"role": "user", "content": "edited last message"}
            await child.close()
            return views

    views = asyncio.run(main())
    assert views == expected
    assert len(views[-1]) < points[-1] / 2  # the view is compacted, not the full list thrown back


def test_an_async_client_serves_one_loop_and_a_sync_one_serves_any() -> None:
    async def summarize(prompt: str) -> str:
        return "### Decisions\n- keep going"

    def summarize_sync(prompt: str) -> str:
        return "### Decisions\n- keep going"

    first = asyncio.new_event_loop()  # stays open: the async summarizer's "connections" live there
    try:
        for make, second_loop_ok in ((summarize_sync, True), (summarize, False)):
            summarizer = summarizer_from(make)

            async def drive(summarizer: Any = summarizer) -> None:
                session = AsyncSession(config(), summarizer)
                for n in range(3):
                    session.extend(turn(n))
                assert [r.outcome for r in await session.finalize_turn()] == ["absorbed"]
                await session.close()

            first.run_until_complete(drive())
            if second_loop_ok:
                asyncio.run(drive())
            else:
                with pytest.raises(ValueError, match="already runs on another event loop"):
                    asyncio.run(drive())
    finally:
        first.close()
