"""An agent's tool loop on the openai SDK's Responses API, as the Responses-route tests drive ``serve``: send,
run each ``exec_command`` call (``seq A B``: a large output), send the outputs back, until a text answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]


@dataclass
class ToolLoop:
    items: list[Any]  # the client's history at the end
    answers: list[str] = field(default_factory=list)  # each answer's text
    headers: list[Any] = field(default_factory=list)  # each answer's HTTP headers


def tool_loop(client: Any, steps: int, prompt: str, *, stream: bool = False) -> ToolLoop:
    """The loop through ``client`` (an ``openai.OpenAI``), JSON or streamed answers, at most ``steps + 2``
    requests; AssertionError when it does not end with a text answer by then."""
    loop = ToolLoop([{"role": "user", "content": prompt}])
    for _ in range(steps + 2):
        raw = client.responses.with_raw_response.create(
            model="gpt-test", input=loop.items, tools=TOOLS, store=False, stream=stream
        )
        loop.headers.append(raw.headers)
        response = raw.parse()
        if stream:
            response = next(e.response for e in response if e.type == "response.completed")
        loop.answers.append(response.output_text)
        output = [item.model_dump(exclude_none=True) for item in response.output]
        loop.items += output
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            return loop
        for call in calls:
            start, end = json.loads(call["arguments"])["cmd"].split()[1:]
            result = "\n".join(str(n) for n in range(int(start), int(end) + 1))
            loop.items.append({"type": "function_call_output", "call_id": call["call_id"], "output": result})
    raise AssertionError("the tool loop did not end")
