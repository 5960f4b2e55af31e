"""Ready-made scripts: answers computed from the request alone, so retries and replays get the same answer.

``ToolLoop`` drives an agent (Claude Code, an SDK loop) through a long turn: it calls a tool until the
conversation holds ``iterations`` tool results, then answers with a final text. It counts tool results in
the request itself rather than requests seen, so side requests (title generation, count_tokens) and
client retries do not move it on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .recorded import RecordedRequest
from .replies import Block, Reply, Text, Thinking, ToolCall, text


def tool_results(messages: list[Any]) -> int:
    """Tool results in a conversation: Anthropic tool_result blocks plus OpenAI role "tool" messages."""
    count = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            count += 1
        elif isinstance(message.get("content"), list):
            count += sum(1 for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return count


def offers_tool(body: Any, name: str) -> bool:
    """Whether the request lists tool ``name`` (Anthropic ``name`` or OpenAI ``function.name``)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    for tool in tools or []:
        if isinstance(tool, dict) and name in (tool.get("name"), (tool.get("function") or {}).get("name")):
            return True
    return False


def seq_command(iteration: int, lines: int = 3000) -> str:
    """A command printing ``lines`` numbers, different in every iteration (8 bytes a line).

    3000 lines (24 KB) stay under Claude Code's limit for inline Bash output (30,000 characters); larger
    outputs are saved to a file and only a 2 KB preview reaches the conversation.
    """
    start = iteration * 1_000_000
    return f"seq {start + 1} {start + lines}"


@dataclass
class ToolLoop:
    """Call ``tool`` with ``make_input(i)`` until ``iterations`` tool results are in the conversation.

    Requests that do not offer the tool (an agent's side requests) get ``side_reply``.
    """

    iterations: int
    tool: str = "Bash"
    make_input: Callable[[int], dict[str, Any]] = lambda i: {
        "command": seq_command(i),
        "description": f"Print a long list of numbers (step {i + 1})",
    }
    final_text: str = "All steps are done."
    side_reply: str = "Side request answered."
    thinking: bool = False  # start each reply with a signed thinking block, as extended thinking does

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, self.tool):
            return text(self.side_reply)
        done = tool_results(request.messages)
        if done >= self.iterations:
            return text(self.final_text)
        blocks: list[Block] = [Thinking(f"Plan for step {done + 1}.", f"sig-step-{done + 1}")] if self.thinking else []
        blocks += [Text(f"Step {done + 1} of {self.iterations}."), ToolCall(self.tool, self.make_input(done))]
        return Reply(tuple(blocks))
