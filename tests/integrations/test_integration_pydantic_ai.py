"""The pydantic-ai history processor inside pydantic-ai's own agent loop, against a scripted FunctionModel."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from microcompact.integrations.pydantic_ai import flatten, microcompact_processor
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


def scripted_coder(log: RequestLog) -> FunctionModel:
    """Reads a file per call until a turn has had its iterations, then answers; records what it was sent."""
    steps: dict[int, int] = {}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent = flatten(messages)[0]
        log.requests.append(sent)
        turn = sum(1 for m in sent if m["role"] == "user") - 1
        step = steps.get(turn, 0)
        steps[turn] = step + 1
        if step < ITERATIONS_PER_TURN:
            call = ToolCallPart("read_file", {"path": tool_path(turn, step)}, tool_call_id=f"call_{turn}_{step}")
            return ModelResponse(parts=[TextPart(f"Reading {tool_path(turn, step)}."), call])
        return ModelResponse(parts=[TextPart(f"Turn {turn} done: the bug is in {tool_path(turn, 0)}.")])

    return FunctionModel(respond)


def read_file(path: str) -> str:
    """Read a file of the project."""
    turn, step = (int(x) for x in path.removeprefix("src/module_").removesuffix(".py").split("_"))
    return tool_output(turn, step)


def test_the_agent_loop_gets_a_bounded_view_and_the_full_history_is_kept() -> None:
    log = RequestLog()
    processor = microcompact_processor(config=config())
    agent = Agent(
        scripted_coder(log), system_prompt="You fix bugs.", tools=[read_file], capabilities=[ProcessHistory(processor)]
    )
    history: list[ModelMessage] = []
    for prompt in PROMPTS:
        history = agent.run_sync(prompt, message_history=history).all_messages()
    full = processor.full_history(history)
    assert len(full) == len(PROMPTS) * (2 * ITERATIONS_PER_TURN + 2)
    assert len(history) < len(full)  # pydantic-ai keeps what the processor returned: the compacted view
    check_requests(log, flatten(full)[0])


def test_conversion_keeps_tool_ids_results_system_prompt_and_images() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("You fix bugs."),
                UserPromptPart(["What is this?", ImageUrl("https://example.com/a.png")]),
            ]
        ),
        ModelResponse(parts=[TextPart("Reading."), ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("read_file", "print(1)", tool_call_id="c1")]),
    ]
    dicts, sources = flatten(messages)
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
    out = microcompact_processor(context_length=32_000)(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))  # nothing compacted: the same objects


def test_a_tool_output_over_the_window_reaches_the_model_cut_with_its_call_id() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("Read the log.")]),
        ModelResponse(parts=[ToolCallPart("read_file", {"path": "log.txt"}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("read_file", oversized_output(), tool_call_id="c1")]),
    ]
    view = microcompact_processor(context_length=4096)(messages)
    assert view[0] is messages[0] and view[1] is messages[1]
    cut = view[2]
    assert isinstance(cut, ModelRequest)
    part = cut.parts[0]
    assert isinstance(part, ToolReturnPart) and (part.tool_call_id, part.tool_name) == ("c1", "read_file")
    assert CUT_NOTE in part.content and len(part.content) < len(oversized_output()) // 2
