"""OpenAI Chat Completions wire format: chat.completion, chat.completion.chunk SSE, and the error body.

Streaming: a first chunk with the role, content pieces, tool calls (the first delta of each carries id,
type and name with empty arguments, later ones only argument pieces), a last choice chunk with
finish_reason, then, when ``stream_options.include_usage`` is set, a chunk with empty choices and the usage
(every earlier chunk then carries ``"usage": null``), and ``data: [DONE]``. Thinking is rendered as
``reasoning_content``, the field OpenAI-compatible reasoning servers use.
"""

from __future__ import annotations

import json
from typing import Any

from .replies import Reply, Text, Thinking, ToolCall

CREATED = 1_767_225_600  # fixed, so recorded responses are reproducible
FINGERPRINT = "fp_scripted"

ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def call_id(request_number: int, index: int) -> str:
    return f"call_{request_number:010d}{index:010d}"


def completion_id(request_number: int) -> str:
    return f"chatcmpl-{request_number:020d}"


def _tool_calls(reply: Reply, request_number: int) -> list[dict[str, Any]]:
    calls = []
    for index, block in enumerate(reply.blocks):
        if isinstance(block, ToolCall):
            arguments = json.dumps(block.input, separators=(",", ":"))
            calls.append(
                {
                    "id": block.id or call_id(request_number, index),
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments},
                }
            )
    return calls


def _joined(reply: Reply, kind: type[Text] | type[Thinking]) -> str | None:
    parts = [b.text if isinstance(b, Text) else b.thinking for b in reply.blocks if isinstance(b, kind)]
    return "".join(parts) if parts else None


def finish_reason(reply: Reply) -> str:
    if any(isinstance(b, ToolCall) for b in reply.blocks):
        return "tool_calls"
    return {"end_turn": "stop", "max_tokens": "length"}.get(reply.effective_stop_reason, "stop")


def usage_json(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def completion(reply: Reply, model: str, request_number: int, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": _joined(reply, Text), "refusal": None, "annotations": []}
    reasoning = _joined(reply, Thinking)
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    calls = _tool_calls(reply, request_number)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id(request_number),
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(reply)}],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(reply: Reply, full: dict[str, Any], include_usage: bool) -> list[bytes]:
    """Every SSE line of the streamed form of ``full`` (as built by ``completion``), ``[DONE]`` last."""
    base = {k: full[k] for k in ("id", "object", "created", "model", "service_tier", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice], **({"usage": None} if include_usage else {})}

    message = full["choices"][0]["message"]
    size = reply.chunk_chars
    payloads = [
        chunk({"role": "assistant", "content": "" if message["content"] is not None else None, "refusal": None})
    ]
    payloads += [chunk({"reasoning_content": p}) for p in _pieces(message.get("reasoning_content") or "", size)]
    payloads += [chunk({"content": p}) for p in _pieces(message["content"] or "", size)]
    for index, call in enumerate(message.get("tool_calls") or []):
        head = {"index": index, "id": call["id"], "type": "function"}
        payloads.append(
            chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        )
        for piece in _pieces(call["function"]["arguments"], size):
            payloads.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    payloads.append(chunk({}, full["choices"][0]["finish_reason"]))
    if include_usage:
        payloads.append({**base, "choices": [], "usage": full["usage"]})
    lines = [f"data: {json.dumps(p, separators=(',', ':'))}\n\n".encode() for p in payloads]
    return [*lines, b"data: [DONE]\n\n"]


def error_body(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    kind, code = ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": message, "type": error_type or kind, "param": None, "code": code}}
