"""The pydantic-ai history processor inside pydantic-ai's own agent loop, against a scripted FunctionModel."""

from __future__ import annotations

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
    tool_output,
    tool_path,
)
from support.lazy_sdk import lazy

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models.function import AgentInfo, FunctionModel

pytestmark = pytest.mark.skipif(find_spec("pydantic_ai") is None, reason="pydantic-ai is not installed")

# pydantic-ai (and the adapter, which imports it) loads at this file's first test, through support.lazy_sdk,
# not when every xdist worker collects the file: most of a second of CPU each.
pai = lazy("pydantic_ai")
capabilities = lazy("pydantic_ai.capabilities")
pm = lazy("pydantic_ai.messages")
function = lazy("pydantic_ai.models.function")
adapter = lazy("microcompact.integrations.pydantic_ai")


def scripted_coder(log: RequestLog) -> FunctionModel:
    """Reads a file per call until a turn has had its iterations, then answers; records what it was sent."""
    steps: dict[int, int] = {}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent = adapter.flatten(messages)[0]
        log.requests.append(sent)
        turn = sum(1 for m in sent if m["role"] == "user") - 1
        step = steps.get(turn, 0)
        steps[turn] = step + 1
        if step < ITERATIONS_PER_TURN:
            call = pm.ToolCallPart("read_file", {"path": tool_path(turn, step)}, tool_call_id=f"call_{turn}_{step}")
            return pm.ModelResponse(parts=[pm.TextPart(f"Reading {tool_path(turn, step)}."), call])
        return pm.ModelResponse(parts=[pm.TextPart(f"Turn {turn} done: the bug is in {tool_path(turn, 0)}.")])

    return function.FunctionModel(respond)


def read_file(path: str) -> str:
    """Read a file of the project."""
    turn, step = (int(x) for x in path.removeprefix("src/module_").removesuffix(".py").split("_"))
    return tool_output(turn, step)


def test_the_agent_loop_gets_a_bounded_view_and_the_full_history_is_kept() -> None:
    log = RequestLog()
    processor = adapter.microcompact_processor(config=config())
    agent = pai.Agent(
        scripted_coder(log),
        system_prompt="You fix bugs.",
        tools=[read_file],
        capabilities=[capabilities.ProcessHistory(processor)],
    )
    history: list[ModelMessage] = []
    for prompt in PROMPTS:
        history = agent.run_sync(prompt, message_history=history).all_messages()
    full = processor.full_history(history)
    assert len(full) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)
    assert len(history) < len(full)  # pydantic-ai keeps what the processor returned: the compacted view
    check_requests(log, adapter.flatten(full)[0])


def test_conversion_keeps_tool_ids_results_system_prompt_and_images() -> None:
    messages: list[ModelMessage] = [
        pm.ModelRequest(
            parts=[
                pm.SystemPromptPart("You fix bugs."),
                pm.UserPromptPart(["What is this?", pm.ImageUrl("https://example.com/a.png")]),
            ]
        ),
        pm.ModelResponse(
            parts=[pm.TextPart("Reading."), pm.ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1")]
        ),
        pm.ModelRequest(parts=[pm.ToolReturnPart("read_file", "print(1)", tool_call_id="c1")]),
    ]
    dicts, sources = adapter.flatten(messages)
    assert dicts == [
        {"role": "system", "content": "You fix bugs."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    ]
    assert sources == [(0, 0), (0, 1), (1, None), (2, 0)]
    out = adapter.microcompact_processor(context_length=32_000)(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))  # nothing compacted: the same objects


def test_a_tool_output_over_the_window_reaches_the_model_cut_with_its_call_id() -> None:
    messages: list[ModelMessage] = [
        pm.ModelRequest(parts=[pm.UserPromptPart("Read the log.")]),
        pm.ModelResponse(parts=[pm.ToolCallPart("read_file", {"path": "log.txt"}, tool_call_id="c1")]),
        pm.ModelRequest(parts=[pm.ToolReturnPart("read_file", oversized_output(), tool_call_id="c1")]),
    ]
    view = adapter.microcompact_processor(context_length=4096)(messages)
    assert view[0] is messages[0] and view[1] is messages[1]
    cut = view[2]
    assert isinstance(cut, pm.ModelRequest)
    part = cut.parts[0]
    assert isinstance(part, pm.ToolReturnPart) and (part.tool_call_id, part.tool_name) == ("c1", "read_file")
    assert CUT_NOTE in part.content and len(part.content) < len(oversized_output()) // 2
