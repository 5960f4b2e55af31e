"""A tool loop with thinking, driven by the ``anthropic`` SDK against any Anthropic base URL (the signing
upstream straight, or ``microcompact serve`` in front of it), shaped like Claude Code: a ``system``-role
entry in the head, adaptive thinking with every block sent back as received, the cache breakpoint moved to
the newest message, Claude Code's ``context_management`` edit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from support.lazy_sdk import lazy

anthropic = lazy("anthropic")

MODEL = "claude-opus-5-5"
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: thinking-e2e"},
    {"type": "text", "text": "You are an agent that runs shell commands.", "cache_control": EPHEMERAL},
]
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
PROMPT = "Run the numbered steps with the Bash tool until they are done."
CONTEXT_MANAGEMENT = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
API_KEY = "sk-ant-thinking-e2e"  # the loop's credential: the proxy keeps its conversations apart by it


def head() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
        {"role": "system", "content": "Working directory: /work\nPlatform: linux"},
    ]


def run_command(command: str) -> str:
    """What ``seq A B`` prints: the tool, run by the loop itself."""
    _, first, last = command.split()
    return "\n".join(str(n) for n in range(int(first), int(last) + 1))


def with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content]
    blocks[-1]["cache_control"] = EPHEMERAL
    return {**message, "content": blocks}


@dataclass
class Loop:
    """The loop's state: the client's history and every response's headers and status."""

    messages: list[dict[str, Any]] = field(default_factory=head)
    statuses: list[int] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    final: str = ""


def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 8192,
        "system": SYSTEM,
        "tools": TOOLS,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "messages": [*messages[:-1], with_breakpoint(messages[-1])],
    }


def tool_loop(base_url: str, steps: int, *, stream: bool, extra_body: dict[str, Any] | None = None) -> Loop:
    """Call the model, run its Bash calls, send the results, until it answers in text (or ``steps`` + 5
    requests). Any error status ends the loop (it is in ``statuses``)."""
    client = anthropic.Anthropic(base_url=base_url, api_key=API_KEY, max_retries=0)
    loop = Loop()
    for _ in range(steps + 5):
        body = {**request(loop.messages), "extra_body": extra_body}
        try:
            if stream:
                with client.messages.stream(**body) as streamed:
                    loop.headers.append(dict(streamed.response.headers))
                    reply = streamed.get_final_message()
            else:
                raw = client.messages.with_raw_response.create(**body)
                loop.headers.append(dict(raw.headers))
                reply = raw.parse()
        except anthropic.APIStatusError as exc:
            loop.statuses.append(exc.status_code)
            loop.headers.append(dict(exc.response.headers))
            return loop
        loop.statuses.append(200)
        loop.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            loop.final = "".join(b.text for b in reply.content if b.type == "text")
            return loop
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": run_command(c.input["command"])} for c in calls
        ]
        loop.messages.append({"role": "user", "content": results})
    return loop
