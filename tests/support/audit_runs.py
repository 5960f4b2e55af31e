"""One scripted agent, run through ``serve`` as a rewriting proxy and as ``serve --audit``: the same client
requests (the scripted upstream answers the same whatever prompt it gets), so what the audit says rewriting
would have cost can be held against what the rewriting run cost.

The agent is Claude Code's shape on the Anthropic route (a breakpoint on the system prompt and on the
newest message) or an OpenAI Chat agent's, with a tool output of about 2,500 tokens at every step, so a
40K window folds many times. The client's bodies are sent as exact bytes, kept for comparison with what
the upstream received.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from support.proxy_server import ProxyServer
from upstream import Reply, ScriptedUpstream, Text, ToolCall, text

EPHEMERAL = {"type": "ephemeral"}
ANTHROPIC_MODEL = "claude-sonnet-4-5"
CHAT_MODEL = "gpt-5"
ANTHROPIC_TOOLS = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object", "properties": {}}}]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "Bash", "description": "Run.", "parameters": {"type": "object"}}}
]


def step_reply(n: int) -> Reply:
    return Reply((Text(f"Step {n}."), ToolCall("Bash", {"command": f"seq {n}"})))


def tool_output(tag: str, n: int) -> str:
    return "\n".join(f"{tag} {n} line {i} " + "x" * 60 for i in range(120))


@dataclass
class Run:
    """What one run sent and got back."""

    sent: list[bytes] = field(default_factory=list)  # the client's bodies, byte for byte
    answers: list[httpx.Response] = field(default_factory=list)

    @property
    def last(self) -> httpx.Headers:
        return self.answers[-1].headers


class Agent:
    """One conversation of the scripted agent on ``api`` ("anthropic" or "chat"), a step per call."""

    def __init__(self, api: str, tag: str, headers: dict[str, str] | None = None) -> None:
        self.api = api
        self.tag = tag
        self.headers = {"content-type": "application/json", **(headers or {})}
        self.messages: list[dict[str, Any]] = []
        self.run = Run()
        self.done = False
        task = f"Run the steps of task {tag}."
        if api == "anthropic":
            self.messages.append({"role": "user", "content": [{"type": "text", "text": task}]})
        else:
            self.messages.append({"role": "user", "content": task})

    def body(self) -> dict[str, Any]:
        if self.api == "anthropic":
            last = self.messages[-1]
            marked = {**last, "content": [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]}
            system = [{"type": "text", "text": "system prompt " * 400, "cache_control": EPHEMERAL}]
            return {
                "model": ANTHROPIC_MODEL,
                "max_tokens": 100,
                "tools": ANTHROPIC_TOOLS,
                "system": system,
                "messages": [*self.messages[:-1], marked],
            }
        system = {"role": "system", "content": "system prompt " * 400}
        return {"model": CHAT_MODEL, "tools": CHAT_TOOLS, "messages": [system, *self.messages]}

    @property
    def path(self) -> str:
        return "/v1/messages" if self.api == "anthropic" else "/v1/chat/completions"

    def step(self, client: httpx.Client, n: int) -> httpx.Response:
        """Send the conversation so far; append the reply and, when it called the tool, its output."""
        raw = json.dumps(self.body()).encode()
        answer = client.post(self.path, content=raw, headers=self.headers)
        assert answer.status_code == 200, answer.text
        self.run.sent.append(raw)
        self.run.answers.append(answer)
        reply = answer.json()
        if self.api == "anthropic":
            self.messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b["id"] for b in reply["content"] if b["type"] == "tool_use"]
            result = [{"type": "tool_result", "tool_use_id": c, "content": tool_output(self.tag, n)} for c in calls]
            if result:
                self.messages.append({"role": "user", "content": result})
        else:
            message = reply["choices"][0]["message"]
            self.messages.append({k: v for k, v in message.items() if v is not None and k != "refusal"})
            calls = [c["id"] for c in message.get("tool_calls") or []]
            self.messages += [{"role": "tool", "tool_call_id": c, "content": tool_output(self.tag, n)} for c in calls]
        self.done = not calls
        return answer


def run_script(proxy: ProxyServer, upstream: ScriptedUpstream, api: str, steps: int, tag: str = "a") -> Run:
    """The scripted agent's ``steps`` tool steps and its last answer, each request's follow-up settled."""
    upstream.enqueue(*[step_reply(n) for n in range(steps)], text("done"))
    agent = Agent(api, tag)
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for n in range(steps + 1):
            agent.step(client, n)
            proxy.settle()
    assert agent.done
    return agent.run


__all__ = ["ANTHROPIC_MODEL", "CHAT_MODEL", "Agent", "Run", "run_script", "step_reply", "tool_output"]
