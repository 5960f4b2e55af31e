"""MicroCompactMiddleware inside LangChain's own agent loop (create_agent), against a scripted chat model."""

from __future__ import annotations

import asyncio
import warnings
from importlib.util import find_spec
from typing import TYPE_CHECKING

import pytest

from support.agent_script import (
    CUT_NOTE,
    ITERATIONS_PER_TURN,
    PROMPTS,
    RequestLog,
    check_requests,
    config,
    oversized_output,
)
from support.lazy_sdk import lazy

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

pytestmark = pytest.mark.skipif(find_spec("langchain") is None, reason="LangChain is not installed")

# LangChain (and the adapter and scripted models that import it) load at this file's first test, through
# support.lazy_sdk, not when every xdist worker collects the file: about a second of CPU each.
agents = lazy("langchain.agents")
prebuilt = lazy("langgraph.prebuilt")
lc = lazy("langchain_core.messages")
adapter = lazy("microcompact.integrations.langchain")
coder = lazy("support.langchain_coder")


def test_the_agent_keeps_the_full_history_and_the_model_gets_a_bounded_view() -> None:
    log = RequestLog()
    middleware = adapter.MicroCompactMiddleware(config=config())
    agent = agents.create_agent(
        coder.ScriptedCoder(log=log), [coder.read_file], system_prompt="You fix bugs.", middleware=[middleware]
    )
    messages: list[BaseMessage] = []
    for prompt in PROMPTS:
        state = agent.invoke({"messages": [*messages, lc.HumanMessage(prompt)]})
        messages = state["messages"]
    assert len(messages) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)  # the state kept every message
    assert all(isinstance(m, lc.ToolMessage) for m in messages[2 : 2 * ITERATIONS_PER_TURN : 2])
    check_requests(log, [adapter.to_openai(m) for m in messages])


def test_context_length_alone_configures_it() -> None:
    middleware = adapter.MicroCompactMiddleware(context_length=32_000)
    assert middleware.compactor.config.model.context_length == 32_000
    assert middleware.compactor.config.compression.micro_compact


def test_conversion_round_trips_tool_calls_results_and_content_blocks() -> None:
    originals: list[BaseMessage] = [
        lc.HumanMessage(
            content=[
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]
        ),
        lc.AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": "a.py"}, "id": "c1"}]),
        lc.ToolMessage(content="print(1)", tool_call_id="c1", name="read_file"),
        lc.AIMessage(content="It prints 1."),
    ]
    dicts = [adapter.to_openai(m) for m in originals]
    assert dicts[1]["tool_calls"][0]["id"] == "c1"
    assert dicts[2] == {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "print(1)"}
    back = [adapter.from_openai(d) for d in dicts]
    assert [adapter.to_openai(m) for m in back] == dicts
    assert back[1].tool_calls == [{"name": "read_file", "args": {"path": "a.py"}, "id": "c1", "type": "tool_call"}]


def test_unchanged_messages_come_back_as_the_same_objects() -> None:
    middleware = adapter.MicroCompactMiddleware(context_length=32_000)
    messages: list[BaseMessage] = [lc.HumanMessage("hi", id="h1"), lc.AIMessage("hello", id="a1")]
    view = middleware.compacted(messages)
    assert all(a is b for a, b in zip(view, messages, strict=True))


def test_summarization_middleware_settings_carry_over() -> None:
    by_tokens = adapter.MicroCompactMiddleware(
        context_length=100_000, trigger=("tokens", 80_000), keep=("tokens", 8_000)
    )
    assert by_tokens.compactor.config.threshold_tokens() == 80_000
    assert by_tokens.compactor.config.tail_budget_tokens() == 8_000
    no_window = adapter.MicroCompactMiddleware(trigger=("tokens", 4_000), keep=("messages", 20)).compactor.config
    assert (no_window.threshold_tokens(), no_window.compression.min_tail_messages) == (4_000, 20)
    with pytest.raises(ValueError, match="trigger=\\('messages', 50\\) is not supported"):
        adapter.MicroCompactMiddleware(context_length=100_000, trigger=("messages", 50))


def test_a_tool_output_over_the_window_reaches_the_model_cut_with_its_call_id() -> None:
    messages: list[BaseMessage] = [
        lc.HumanMessage("Read the log.", id="h1"),
        lc.AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": "log.txt"}, "id": "c1"}], id="a1"),
        lc.ToolMessage(oversized_output(), tool_call_id="c1", name="read_file", id="t1"),
    ]
    view = adapter.MicroCompactMiddleware(context_length=4096).compacted(messages)
    assert view[0] is messages[0] and view[1] is messages[1]
    cut = view[2]
    assert isinstance(cut, lc.ToolMessage) and (cut.tool_call_id, cut.id) == ("c1", "t1")
    assert CUT_NOTE in cut.text and len(cut.text) < len(messages[2].text) // 2


def test_the_async_agent_loop_gets_the_same_views() -> None:
    log = RequestLog()
    agent = agents.create_agent(
        coder.ScriptedCoder(log=log), [coder.read_file], middleware=[adapter.MicroCompactMiddleware(config=config())]
    )

    async def run() -> list[BaseMessage]:
        messages: list[BaseMessage] = []
        for prompt in PROMPTS:
            state = await agent.ainvoke({"messages": [*messages, lc.HumanMessage(prompt)]})
            messages = state["messages"]
        return messages

    messages = asyncio.run(run())
    check_requests(log, [adapter.to_openai(m) for m in messages])


def test_a_chat_model_given_as_model_writes_the_summaries() -> None:
    model = coder.SummaryModel()
    log = RequestLog()
    middleware = adapter.MicroCompactMiddleware(model, config=config())
    agent = agents.create_agent(coder.ScriptedCoder(log=log), [coder.read_file], middleware=[middleware])
    agent.invoke({"messages": [lc.HumanMessage(PROMPTS[0])]})
    assert model.prompts, "the chat model was never asked to summarize"
    assert any("characters" in str(m.get("content")) for m in log.requests[-1] if m["role"] == "assistant")


def test_langgraph_prebuilt_agents_get_the_view_through_the_pre_model_hook() -> None:
    log = RequestLog()
    middleware = adapter.MicroCompactMiddleware(config=config())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # create_react_agent now points to create_agent
        agent = prebuilt.create_react_agent(
            coder.ScriptedCoder(log=log), [coder.read_file], pre_model_hook=middleware.pre_model_hook
        )
    messages: list[BaseMessage] = []
    for prompt in PROMPTS:
        messages = agent.invoke({"messages": [*messages, lc.HumanMessage(prompt)]})["messages"]
    assert len(messages) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)
    check_requests(log, [adapter.to_openai(m) for m in messages])
