"""Anthropic Messages: content blocks to session messages and back, without losing a block.

One client message becomes:

- user: one ``tool`` session message per ``tool_result`` block (they are tool results, not the user
  speaking), then one ``user`` message holding every other block (text, ``<system-reminder>`` text,
  images, documents) when there is any;
- assistant: one ``assistant`` message whose ``tool_use`` blocks are ``tool_calls`` and whose other
  blocks (text, thinking and redacted_thinking with their signatures, server tool blocks) are its content;
- system (an entry inside ``messages``): one ``system`` message, never summarized.

Forwarding goes the other way from the client's own message: a block is sent exactly as the client sent
it unless the session dropped it (absorbed) or shortened it (then only its text changes).
"""

from __future__ import annotations

import json
from typing import Any

from ..messages import Message
from ..render import content_text
from ..wire import Upstream, WireApi
from .breakpoints import cache_stable_prefix
from .errors import BadRequest
from .provider import dumps, history_array, identity_form, rewritten
from .usage_tap import anthropic_cache_fields

ROLES = ("user", "assistant", "system")
THINKING_BLOCKS = ("thinking", "redacted_thinking")
# Anthropic accepts at most this many cache_control breakpoints per request (tools, system and messages).
MAX_CACHE_BREAKPOINTS = 4


def _blocks(message: Message) -> list[Any]:
    content = message.get("content")
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if isinstance(content, str) and content else []


def _is_tool_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


class AnthropicFormat:
    name: Upstream = Upstream.ANTHROPIC
    wire: WireApi = WireApi.MESSAGES
    binds_thinking: bool = True
    fixed_fields: tuple[str, ...] = ("tools", "system")

    # ------------------------------------------------------------------ client -> session

    def history(self, body: Any) -> list[Message]:
        messages = history_array(body, "messages", "messages: must be an array of message objects")
        for i, message in enumerate(messages):
            _check_message(message, f"messages.{i}")
        return messages

    def passthrough_reason(self, body: dict[str, Any]) -> str | None:
        return None

    def body(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        return dumps({**body, "messages": messages})

    def convert(self, message: Message) -> list[Message]:
        role, content = message["role"], message.get("content")
        if role == "system":
            return [{"role": "system", "content": content}]
        if not isinstance(content, list):
            return [{"role": role, "content": content}]
        if role == "assistant":
            calls = [_tool_call(b) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            rest = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_use")]
            converted: Message = {"role": "assistant", "content": rest or None}
            if calls:
                converted["tool_calls"] = calls
            return [converted]
        results = [_tool_message(b) for b in content if _is_tool_result(b)]
        rest = [b for b in content if not _is_tool_result(b)]
        if rest or not results:
            results.append({"role": "user", "content": rest})
        return results

    def part_count(self, message: Message) -> int:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            return 1
        results = sum(1 for b in content if _is_tool_result(b))
        return results + (1 if results < len(content) or not results else 0)

    # ------------------------------------------------------------------ session -> client

    def rebuild(self, original: Message, parts: list[Message]) -> Message:
        if original.get("role") == "user":
            return {**original, "content": _user_blocks(original, parts)}
        if original.get("role") == "assistant" and parts:
            return {**original, "content": _assistant_blocks(original, parts[0])}
        return original

    def render(self, message: Message) -> Message:
        role = message.get("role")
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id"),
                "content": content_text(message),
            }
            return {"role": "user", "content": [block]}
        if role == "assistant":
            blocks: list[Any] = [{"type": "text", "text": content_text(message)}] if content_text(message) else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": _input(call)}
                )
            return {"role": "assistant", "content": blocks}
        return {"role": role if role in ROLES else "user", "content": message.get("content")}

    def normalize(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        merged: list[Message] = []
        for message in messages:
            role = message.get("role")
            if merged and role in ("user", "assistant") and merged[-1].get("role") == role:
                merged[-1] = _merge(merged[-1], message)
            else:
                merged.append(message)
        return _limit_breakpoints(body, merged)

    def view_problem(self, messages: list[Message]) -> str | None:
        """Every tool_use answered by a tool_result in the very next message, and every tool_result
        answering a tool_use of the message right before it."""
        offered: set[Any] = set()
        for i, message in enumerate(messages):
            blocks = [b for b in _blocks(message) if isinstance(b, dict)]
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if answered - offered:
                return f"messages.{i}: a tool_result without its tool_use in the message before"
            if offered - answered:
                return f"messages.{i}: tool_use ids {sorted(map(str, offered - answered))} are not answered here"
            offered = (
                {b.get("id") for b in blocks if b.get("type") == "tool_use"}
                if message.get("role") == "assistant"
                else set()
            )
        return None

    def key_material(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        return [body.get("system"), identity_form(first_user)]

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return anthropic_cache_fields(usage)

    def with_breakpoints(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return cache_stable_prefix(body, messages)

    def prompt_tokens(self, response: Any) -> int | None:
        """input + cache creation + cache read tokens: the whole prompt, however much of it was cached.
        A response, or a stream's ``message_start`` / ``message_delta`` event."""
        if not isinstance(response, dict):
            return None
        message = response.get("message")
        usage = (message if isinstance(message, dict) else response).get("usage")
        if not isinstance(usage, dict):
            return None
        keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        values = [usage.get(k) for k in keys]
        total = sum(v for v in values if isinstance(v, int) and not isinstance(v, bool))
        return total or None


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise BadRequest(f"{where}: Input should be a valid dictionary")
    role = message.get("role")
    if role not in ROLES:
        raise BadRequest(f"{where}.role: unknown role {role!r} (expected 'user' or 'assistant')")
    content = message.get("content")
    if role == "system" and content is None:
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: must be a string or an array of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise BadRequest(f"{where}.content.{j}: must be an object with a string 'type'")
        if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise BadRequest(f"{where}.content.{j}.tool_use_id: must be a string")
        if block["type"] == "tool_use" and (role != "assistant" or not isinstance(block.get("id"), str)):
            raise BadRequest(f"{where}.content.{j}: a tool_use block belongs to an assistant message and needs an id")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise BadRequest(f"{where}.content.{j}.text: must be a string")


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": arguments},
    }


def _tool_message(block: dict[str, Any]) -> Message:
    message: Message = {"role": "tool", "tool_call_id": block["tool_use_id"], "content": block.get("content", "")}
    if block.get("is_error"):
        message["is_error"] = True
    return message


def _input(call: dict[str, Any]) -> Any:
    arguments = (call.get("function") or {}).get("arguments")
    try:
        return json.loads(arguments) if isinstance(arguments, str) else {}
    except ValueError:
        return {"arguments": arguments}


def _user_blocks(original: Message, parts: list[Message]) -> list[Any]:
    """The original user message's blocks that ``parts`` kept: tool results by id (a shortened one with
    its new text), the other blocks when the user part survived."""
    results = {p.get("tool_call_id"): p for p in parts if p.get("role") == "tool"}
    user_kept = any(p.get("role") == "user" for p in parts)
    blocks: list[Any] = []
    for block in _blocks(original):
        if _is_tool_result(block):
            part = results.get(block.get("tool_use_id"))
            if part is not None:
                blocks.append({**block, "content": content_text(part)} if rewritten(part) else block)
        elif user_kept:
            blocks.append(block)
    return blocks


def _assistant_blocks(original: Message, part: Message) -> list[Any]:
    """The original assistant blocks with what the session shortened: tool inputs (shortened arguments),
    the text (a cut). Thinking blocks are never touched: their signatures must still verify."""
    if not rewritten(part):
        return _blocks(original)
    calls = {c.get("id"): c for c in part.get("tool_calls") or []}
    text = content_text(part)
    blocks: list[Any] = []
    text_placed = False
    for block in _blocks(original):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use" and block.get("id") in calls:
            blocks.append({**block, "input": _input(calls[block["id"]])})
        elif kind == "text":
            if not text_placed and text:
                blocks.append({**block, "text": text})
            text_placed = True
        else:
            blocks.append(block)
    return blocks


def _merge(first: Message, second: Message) -> Message:
    """Two consecutive messages of one role as one (the API wants roles to alternate). A following
    assistant message's leading thinking blocks go first: a turn's thinking must open it."""
    a, b = _blocks(first), _blocks(second)
    if first.get("role") == "assistant" and not (a and isinstance(a[0], dict) and a[0].get("type") in THINKING_BLOCKS):
        lead = 0
        while lead < len(b) and isinstance(b[lead], dict) and b[lead].get("type") in THINKING_BLOCKS:
            lead += 1
        return {**first, "content": b[:lead] + a + b[lead:]}
    return {**first, "content": a + b}


def _breakpoints(blocks: Any) -> int:
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control")) if isinstance(blocks, list) else 0


def _limit_breakpoints(body: dict[str, Any], messages: list[Message]) -> list[Message]:
    """At most MAX_CACHE_BREAKPOINTS cache_control blocks: the oldest message breakpoints go first (the
    latest ones are where the client wants the cache to reach)."""
    fixed = _breakpoints(body.get("tools")) + _breakpoints(body.get("system"))
    total = fixed + sum(_breakpoints(m.get("content")) for m in messages)
    excess = total - MAX_CACHE_BREAKPOINTS
    if excess <= 0:
        return messages
    out = list(messages)
    for i, message in enumerate(out):
        if excess <= 0:
            break
        content = message.get("content")
        if not isinstance(content, list) or not _breakpoints(content):
            continue
        blocks = []
        for block in content:
            if excess > 0 and isinstance(block, dict) and block.get("cache_control"):
                block = {k: v for k, v in block.items() if k != "cache_control"}
                excess -= 1
            blocks.append(block)
        out[i] = {**message, "content": blocks}
    return out
