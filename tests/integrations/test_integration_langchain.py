"""MicroCompactMiddleware inside LangChain's own agent loop (create_agent), against a scripted chat model."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from microcompact.integrations.langchain import MicroCompactMiddleware, from_openai, to_openai
from support.agent_script import (
    CUT_NOTE,
    ITERATIONS_PER_TURN,
    PROMPTS,
    RequestLog,
    check_requests,
    config,
    oversized_output,
    tool_output,
    tool_path,
)


class ScriptedCoder(BaseChatModel):
    """Reads a file per call until a turn has had its iterations, then answers; records what it was sent."""

    log: Any
    steps: dict[int, int] = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "scripted-coder"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedCoder:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        sent = [to_openai(m) for m in messages if not isinstance(m, SystemMessage)]
        self.log.requests.append(sent)
        turn = sum(1 for m in sent if m["role"] == "user") - 1
        step = self.steps.get(turn, 0)
        self.steps[turn] = step + 1
        if step < ITERATIONS_PER_TURN:
            call = {"name": "read_file", "args": {"path": tool_path(turn, step)}, "id": f"call_{turn}_{step}"}
            reply = AIMessage(content=f"Reading {tool_path(turn, step)}.", tool_calls=[call])
        else:
            reply = AIMessage(content=f"Turn {turn} done: the bug is in {tool_path(turn, 0)}.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    turn, step = (int(x) for x in path.removeprefix("src/module_").removesuffix(".py").split("_"))
    return tool_output(turn, step)


def test_the_agent_keeps_the_full_history_and_the_model_gets_a_bounded_view() -> None:
    log = RequestLog()
    middleware = MicroCompactMiddleware(config=config())
    agent = create_agent(ScriptedCoder(log=log), [read_file], system_prompt="You fix bugs.", middleware=[middleware])
    messages: list[BaseMessage] = []
    for prompt in PROMPTS:
        state = agent.invoke({"messages": [*messages, HumanMessage(prompt)]})
        messages = state["messages"]
    assert len(messages) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)  # the state kept every message
    assert all(isinstance(m, ToolMessage) for m in messages[2 : 2 * ITERATIONS_PER_TURN : 2])
    check_requests(log, [to_openai(m) for m in messages])


def test_context_length_alone_configures_it() -> None:
    middleware = MicroCompactMiddleware(context_length=32_000)
    assert middleware.compactor.config.model.context_length == 32_000
    assert middleware.compactor.config.compression.micro_compact


def test_conversion_round_trips_tool_calls_results_and_content_blocks() -> None:
    originals: list[BaseMessage] = [
        HumanMessage(
            content=[
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]
        ),
        AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": "a.py"}, "id": "c1"}]),
        ToolMessage(content="print(1)", tool_call_id="c1", name="read_file"),
        AIMessage(content="It prints 1."),
    ]
    dicts = [to_openai(m) for m in originals]
    assert dicts[1]["tool_calls"][0]["id"] == "c1"
    assert dicts[2] == {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "print(1)"}
    back = [from_openai(d) for d in dicts]
    assert [to_openai(m) for m in back] == dicts
    assert back[1].tool_calls == [{"name": "read_file", "args": {"path": "a.py"}, "id": "c1", "type": "tool_call"}]


def test_unchanged_messages_come_back_as_the_same_objects() -> None:
    middleware = MicroCompactMiddleware(context_length=32_000)
    messages: list[BaseMessage] = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]
    view = middleware.compacted(messages)
    assert all(a is b for a, b in zip(view, messages, strict=True))


def test_summarization_middleware_settings_carry_over() -> None:
    by_tokens = MicroCompactMiddleware(context_length=100_000, trigger=("tokens", 80_000), keep=("tokens", 8_000))
    assert by_tokens.compactor.config.threshold_tokens() == 80_000
    assert by_tokens.compactor.config.tail_budget_tokens() == 8_000
    no_window = MicroCompactMiddleware(trigger=("tokens", 4_000), keep=("messages", 20)).compactor.config
    assert (no_window.threshold_tokens(), no_window.compression.min_tail_messages) == (4_000, 20)
    with pytest.raises(ValueError, match="trigger=\\('messages', 50\\) is not supported"):
        MicroCompactMiddleware(context_length=100_000, trigger=("messages", 50))


def test_a_tool_output_over_the_window_reaches_the_model_cut_with_its_call_id() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("Read the log.", id="h1"),
        AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": "log.txt"}, "id": "c1"}], id="a1"),
        ToolMessage(oversized_output(), tool_call_id="c1", name="read_file", id="t1"),
    ]
    view = MicroCompactMiddleware(context_length=4096).compacted(messages)
    assert view[0] is messages[0] and view[1] is messages[1]
    cut = view[2]
    assert isinstance(cut, ToolMessage) and (cut.tool_call_id, cut.id) == ("c1", "t1")
    assert CUT_NOTE in cut.text and len(cut.text) < len(messages[2].text) // 2


def test_the_async_agent_loop_gets_the_same_views() -> None:
    log = RequestLog()
    agent = create_agent(ScriptedCoder(log=log), [read_file], middleware=[MicroCompactMiddleware(config=config())])

    async def run() -> list[BaseMessage]:
        messages: list[BaseMessage] = []
        for prompt in PROMPTS:
            state = await agent.ainvoke({"messages": [*messages, HumanMessage(prompt)]})
            messages = state["messages"]
        return messages

    messages = asyncio.run(run())
    check_requests(log, [to_openai(m) for m in messages])


class SummaryModel(BaseChatModel):
    """A chat model that summarizes by saying how much it read."""

    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "summary-model"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.prompts.append("\n".join(m.text for m in messages))
        reply = AIMessage(f"### Decisions\n- read {len(self.prompts[-1])} characters")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_a_chat_model_given_as_model_writes_the_summaries() -> None:
    model = SummaryModel()
    log = RequestLog()
    middleware = MicroCompactMiddleware(model, config=config())
    agent = create_agent(ScriptedCoder(log=log), [read_file], middleware=[middleware])
    agent.invoke({"messages": [HumanMessage(PROMPTS[0])]})
    assert model.prompts, "the chat model was never asked to summarize"
    assert any("characters" in str(m.get("content")) for m in log.requests[-1] if m["role"] == "assistant")


def test_langgraph_prebuilt_agents_get_the_view_through_the_pre_model_hook() -> None:
    log = RequestLog()
    middleware = MicroCompactMiddleware(config=config())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # create_react_agent now points to create_agent
        agent = create_react_agent(ScriptedCoder(log=log), [read_file], pre_model_hook=middleware.pre_model_hook)
    messages: list[BaseMessage] = []
    for prompt in PROMPTS:
        messages = agent.invoke({"messages": [*messages, HumanMessage(prompt)]})["messages"]
    assert len(messages) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)
    check_requests(log, [to_openai(m) for m in messages])
