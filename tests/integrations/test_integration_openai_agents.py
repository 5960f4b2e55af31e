"""MicroCompactSession and its input filter inside the Agents SDK's own runner, against a scripted model
served over HTTP on 127.0.0.1 (OpenAIChatCompletionsModel with a real AsyncOpenAI client)."""

from __future__ import annotations

import asyncio
import json
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from microcompact import open_store
from support.agent_script import (
    CUT_NOTE,
    ITERATIONS_PER_TURN,
    PROMPTS,
    RequestLog,
    check_requests,
    config,
    oversized_output,
    tool_path,
)
from support.chat_server import ChatServer
from support.lazy_sdk import lazy

if TYPE_CHECKING:
    from microcompact.integrations.openai_agents import MicroCompactSession

pytestmark = pytest.mark.skipif(find_spec("agents") is None, reason="the OpenAI Agents SDK is not installed")

# The Agents SDK (and the adapter and scripted agent that import it) load at this file's first test, through
# support.lazy_sdk, not when every xdist worker collects the file: about a second of CPU each.
agents = lazy("agents")
adapter = lazy("microcompact.integrations.openai_agents")
coder = lazy("support.openai_agents_coder")


def scripted_coder(log: RequestLog) -> Any:
    """Reads a file per request until a turn has had its iterations, then answers; records what it was sent."""
    steps: dict[int, int] = {}

    def respond(body: dict[str, Any]) -> str | dict[str, Any]:
        sent = [m for m in body["messages"] if m["role"] != "system"]
        log.requests.append(sent)
        turn = sum(1 for m in sent if m["role"] == "user") - 1
        step = steps.get(turn, 0)
        steps[turn] = step + 1
        if step < ITERATIONS_PER_TURN:
            arguments = json.dumps({"path": tool_path(turn, step)})
            call = {
                "id": f"call_{turn}_{step}",
                "type": "function",
                "function": {"name": "read_file", "arguments": arguments},
            }
            return {"role": "assistant", "content": f"Reading {tool_path(turn, step)}.", "tool_calls": [call]}
        return f"Turn {turn} done: the bug is in {tool_path(turn, 0)}."

    return respond


def run_session(session: MicroCompactSession, log: RequestLog, prompts: list[str]) -> list[dict[str, Any]]:
    """The runner over ``prompts`` in ``session``; the session's items afterwards."""

    async def run() -> list[dict[str, Any]]:
        with ChatServer(scripted_coder(log)) as server:
            agent = coder.coder_agent(server)
            for prompt in prompts:
                await agents.Runner.run(agent, prompt, session=session, run_config=session.run_config(), max_turns=50)
            return await session.get_items()

    return asyncio.run(run())


def without_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "_items"} for m in messages]


def test_the_runner_gets_a_bounded_view_and_the_session_keeps_every_item() -> None:
    log = RequestLog()
    items = run_session(adapter.MicroCompactSession("chat-1", config=config()), log, PROMPTS)
    assert len(items) == len(PROMPTS) * (3 * ITERATIONS_PER_TURN + 2)  # message, call, output per iteration
    check_requests(log, without_items(adapter.flatten(items)[0]))


def test_another_process_gets_the_whole_history_back_from_the_store(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    with open_store(db) as store:
        session = adapter.MicroCompactSession("chat-1", config=config(), store=store)
        items = run_session(session, RequestLog(), PROMPTS[:1])
        session.close()
    assert len(items) == 3 * ITERATIONS_PER_TURN + 2
    with open_store(db) as store:
        reopened = adapter.MicroCompactSession("chat-1", config=config(), store=store)
        assert asyncio.run(reopened.get_items()) == items
        reopened.close()


def test_pop_and_clear_continue_in_a_new_branch_and_nothing_is_deleted(tmp_path: Path) -> None:
    async def run() -> None:
        with open_store(tmp_path / "s.db") as store:
            session = adapter.MicroCompactSession("chat-2", context_length=32_000, store=store)
            await session.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
            assert await session.pop_item() == {"role": "user", "content": "two"}
            assert await session.get_items() == [{"role": "user", "content": "one"}]
            session.close()
            reopened = adapter.MicroCompactSession("chat-2", context_length=32_000, store=store)
            assert await reopened.get_items() == [{"role": "user", "content": "one"}]
            await reopened.clear_session()
            assert await reopened.get_items() == []
            reopened.close()
            assert [m["content"] for m in store.export("chat-2")] == ["one", "two"]  # the first branch stays

    asyncio.run(run())


def test_the_filter_alone_compacts_runs_without_a_session() -> None:
    log = RequestLog()

    async def run() -> None:
        with ChatServer(scripted_coder(log)) as server:
            agent = coder.coder_agent(server)
            run_filter = adapter.compacting_input_filter(config=config())
            history: list[Any] = []
            for prompt in PROMPTS:
                result = await agents.Runner.run(
                    agent,
                    [*history, {"role": "user", "content": prompt}],
                    run_config=agents.RunConfig(call_model_input_filter=run_filter),
                    max_turns=50,
                )
                history = result.to_input_list()
            check_requests(log, without_items(adapter.flatten(history)[0]))

    asyncio.run(run())


def test_a_tool_output_over_the_window_reaches_the_model_cut_with_its_call_id() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Read the log."},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "log.txt"}', "id": "f"},
        {"type": "function_call_output", "call_id": "c1", "output": oversized_output()},
    ]
    view = adapter.compacting_input_filter(context_length=4096).compacted(items)
    assert view[:2] == items[:2]
    assert view[2]["call_id"] == "c1" and view[2]["type"] == "function_call_output"
    assert CUT_NOTE in view[2]["output"] and len(view[2]["output"]) < len(oversized_output()) // 2
