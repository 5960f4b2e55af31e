"""``recall.py``'s rows through ``serve`` itself: a real ``microcompact serve`` process at its defaults in
front of the scripted upstream (tests/upstream), on the chat, Anthropic and Responses routes.

The client resends the recorded session's history up to each reply, in the route's own shape, as an agent
that never compacts on its own does (Anthropic: with Claude Code's breakpoint on the newest block); the
upstream answers each request with the reply the agent recorded there and reports cache usage (Anthropic's
breakpoint cache, OpenAI's and Responses' prefix caches). The prompt measured is what ``serve`` forwarded,
turned back into the session's message shape.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from support.serve_process import ServeProcess
from upstream.recorded import RecordedRequest
from upstream.replay import anthropic_history, reply_from_message
from upstream.replies import Reply, text
from upstream.responses_server import ResponsesUpstream

Message = dict[str, Any]
MODEL = "bench-model"  # unknown to the window table: serve uses --context-limit
ROUTES = ("chat", "anthropic", "responses")


# --------------------------------------------------------------------------- the client's bodies


def _chat_body(history: list[Message]) -> dict[str, Any]:
    return {"model": MODEL, "messages": history}


def anthropic_body(history: list[Message]) -> dict[str, Any]:
    system, messages = anthropic_history(history)
    last = messages[-1]
    blocks = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    blocks = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]  # Claude Code's breakpoint
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [*messages[:-1], {**last, "content": blocks}],
    }
    if system:
        body["system"] = system
    return body


def _responses_body(history: list[Message]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in history:
        role, content = m.get("role"), str(m.get("content") or "")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": content})
            continue
        if content or role != "assistant":
            kind = "output_text" if role == "assistant" else "input_text"
            wire_role = "developer" if role == "system" else role
            items.append({"type": "message", "role": wire_role, "content": [{"type": kind, "text": content}]})
        for call in m.get("tool_calls") or []:
            f = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": f.get("name", ""),
                    "arguments": f.get("arguments", ""),
                }
            )
    return {"model": MODEL, "input": items, "store": False}


# --------------------------------------------------------------------------- what serve forwarded, as messages


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _from_anthropic(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    system = body.get("system")
    if system:
        out.append({"role": "system", "content": _block_text(system)})
    for m in body.get("messages") or []:
        blocks = m["content"] if isinstance(m.get("content"), list) else [{"type": "text", "text": m.get("content")}]
        if m.get("role") == "assistant":
            calls = [
                {
                    "id": b.get("id"),
                    "type": "function",
                    "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input"))},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            out.append(
                {"role": "assistant", "content": _block_text(blocks), **({"tool_calls": calls} if calls else {})}
            )
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                out.append(
                    {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _block_text(b.get("content"))}
                )
        if any(b.get("type") == "text" for b in blocks):
            out.append({"role": "user", "content": _block_text(blocks)})
    return out


def _from_responses(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": str(body["instructions"])})
    for item in body.get("input") or []:
        kind = item.get("type")
        if kind == "function_call_output":
            out.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": _block_text(item.get("output"))}
            )
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "message" or "role" in item:
            role = {"developer": "system"}.get(item.get("role"), item.get("role"))
            parts = item.get("content")
            words = (
                parts
                if isinstance(parts, str)
                else "\n".join(str(p.get("text", "")) for p in parts or [] if isinstance(p, dict))
            )
            out.append({"role": role, "content": words})
    return out


@dataclass(frozen=True)
class Wire:
    path: str
    headers: dict[str, str]
    body: Callable[[list[Message]], dict[str, Any]]
    messages: Callable[[dict[str, Any]], list[Message]]


WIRES = {
    "chat": Wire(
        "/v1/chat/completions", {"authorization": "Bearer bench"}, _chat_body, lambda b: list(b.get("messages") or [])
    ),
    "anthropic": Wire(
        "/v1/messages", {"x-api-key": "bench", "anthropic-version": "2023-06-01"}, anthropic_body, _from_anthropic
    ),
    "responses": Wire("/v1/responses", {"authorization": "Bearer bench"}, _responses_body, _from_responses),
}


# --------------------------------------------------------------------------- the run


class RecordedReplies:
    """The upstream's script: the reply the client is waiting for, and the bodies forwarded meanwhile."""

    def __init__(self) -> None:
        self.reply: Reply = text("")
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if isinstance(request.body, dict):
                self.bodies.append(request.body)
            return self.reply


class ServeRun:
    """One ``serve`` process (its defaults, or ``config`` over them; a 200K window) and one scripted upstream
    for a bench run."""

    def __init__(self, window: int, config: Path | None = None, pace: float = 0.0) -> None:
        self.pace = pace  # seconds between an answer and the next request (an agent's tool run); 0: at once
        self.work = Path(tempfile.mkdtemp(prefix="bench-recall-"))
        if config is not None:  # serve reads $MICROCOMPACT_HOME/config.yaml (the work folder is its home)
            (self.work / "config.yaml").write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
        self.script = RecordedReplies()
        self.upstream = ResponsesUpstream(self.script, keep=4, cache_ttl=300.0, min_cacheable=1024, openai_cache=True)
        self.window = window
        self.served: ServeProcess | None = None

    def __enter__(self) -> ServeRun:
        self.upstream.start()
        base = self.upstream.base_url
        where = ["--db", str(self.work / "s.db"), "--log", str(self.work / "proxy.log")]
        upstreams = ["--anthropic-upstream", base, "--openai-upstream", f"{base}/v1"]
        self.served = ServeProcess(self.work, *where, *upstreams, "--context-limit", str(self.window)).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.served is not None:
            try:
                self.served.stop(timeout=60)
            except Exception:
                self.served.kill()
        self.upstream.close()

    def prompts(self, name: str, route: str, messages: list[Message]) -> Iterator[tuple[int, list[Message]]]:
        """The session through ``route``: at each reply, what serve forwarded upstream, as messages."""
        assert self.served is not None
        wire = WIRES[route]
        headers = {
            "content-type": "application/json",
            **wire.headers,
            "x-microcompact-session": f"recall-{name}-{route}",
        }
        with httpx.Client(timeout=300) as client:
            for i, m in enumerate(messages):
                if m.get("role") != "assistant":
                    continue
                if self.pace > 0:
                    time.sleep(self.pace)
                self.script.reply = reply_from_message(m)
                self.script.bodies.clear()
                answer = client.post(
                    f"{self.served.base_url}{wire.path}", json=wire.body(messages[:i]), headers=headers
                )
                if answer.status_code != 200 or not self.script.bodies:
                    raise SystemExit(
                        f"recall.py: {route} request {i} of {name}: {answer.status_code} {answer.text[:300]}"
                    )
                yield i, wire.messages(self.script.bodies[-1])
