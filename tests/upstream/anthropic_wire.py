"""Anthropic Messages API wire format: the JSON message, the SSE event sequence and the error body.

The stream follows the documented order: message_start (usage with the input side and output_tokens 1),
then per block content_block_start / deltas / content_block_stop (a ping after the first start, as the API
sends), then message_delta (stop_reason, final output usage) and message_stop. Tool input arrives as
input_json_delta pieces beginning with an empty one; thinking as thinking_delta pieces then one
signature_delta; redacted_thinking whole in its content_block_start.
"""

from __future__ import annotations

import json
from typing import Any

from .replies import RedactedThinking, Reply, Text, Thinking, ToolCall
from .usage import PromptUsage

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def tool_use_id(request_number: int, index: int) -> str:
    return f"toolu_{request_number:012d}{index:012d}"


def message_id(request_number: int) -> str:
    return f"msg_{request_number:024d}"


def content_blocks(reply: Reply, request_number: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for index, block in enumerate(reply.blocks):
        if isinstance(block, Text):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, Thinking):
            blocks.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        elif isinstance(block, RedactedThinking):
            blocks.append({"type": "redacted_thinking", "data": block.data})
        elif isinstance(block, ToolCall):
            call_id = block.id or tool_use_id(request_number, index)
            blocks.append({"type": "tool_use", "id": call_id, "name": block.name, "input": block.input})
    return blocks


def usage_json(prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt.input_tokens,
        "cache_creation_input_tokens": prompt.cache_creation_input_tokens,
        "cache_read_input_tokens": prompt.cache_read_input_tokens,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message(reply: Reply, model: str, request_number: int, prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "id": message_id(request_number),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(reply, request_number),
        "stop_reason": reply.effective_stop_reason,
        "stop_sequence": None,
        "usage": usage_json(prompt, output_tokens),
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _block_events(index: int, block: dict[str, Any], size: int) -> list[bytes]:
    kind = block["type"]
    if kind == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], size)]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], size)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        arguments = json.dumps(block["input"], separators=(",", ":"))
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments, size)]
    else:  # redacted_thinking arrives whole
        start, deltas = block, []
    events = [_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})]
    if index == 0:
        events.append(_event("ping", {"type": "ping"}))
    events += [
        _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas
    ]
    events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def stream_events(reply: Reply, full_message: dict[str, Any]) -> list[bytes]:
    """Every SSE event of the streamed form of ``full_message`` (as built by ``message``), in order."""
    usage = full_message["usage"]
    start = {**full_message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(full_message["content"]):
        events += _block_events(index, block, reply.chunk_chars)
    delta = {"stop_reason": full_message["stop_reason"], "stop_sequence": None}
    events.append(
        _event(
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}},
        )
    )
    events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def error_body(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    kind = error_type or ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(status: int, message: str) -> bytes:
    """The in-stream error event the API sends when it fails after the stream has started."""
    return _event("error", error_body(status, message))
