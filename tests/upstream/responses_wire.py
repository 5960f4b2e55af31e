"""OpenAI Responses wire format: the response object, its SSE events, usage, and the API's input checks.

A reply renders as output items in order: ``reasoning`` (a Thinking block: its signature is the item's
``encrypted_content``, its text the summary; a RedactedThinking block: encrypted content only),
``message`` (text blocks, one ``output_text`` part each), ``function_call`` (tool calls, ``call_id`` the
block's id). Streaming follows OpenAI's documented order: ``response.created``, ``response.in_progress``,
then per item ``response.output_item.added``, its part and delta events (``response.content_part.added``,
``response.output_text.delta``/``.done``, ``response.content_part.done``;
``response.function_call_arguments.delta``/``.done``; ``response.reasoning_summary_part.added``,
``response.reasoning_summary_text.delta``/``.done``, ``response.reasoning_summary_part.done``),
``response.output_item.done``, and last ``response.completed`` with the usage. Every event has ``type``
and a ``sequence_number`` and goes out as ``event: TYPE`` plus ``data: JSON``.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .replies import RedactedThinking, Reply, Text, Thinking, ToolCall

CREATED = 1_767_225_600
CACHE_MIN_TOKENS = 1024  # OpenAI caches prompts from this size on, in steps of CACHE_STEP tokens
CACHE_STEP = 128


def response_id(request_number: int) -> str:
    return f"resp_{request_number:024d}"


def call_id(request_number: int, index: int) -> str:
    return f"call_{request_number:010d}{index:010d}"


def _tokens(value: Any) -> int:
    return math.ceil(len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) / 4)


def prompt_pieces(body: dict[str, Any]) -> list[Any]:
    """The prompt in the order the model reads (and OpenAI caches) it: instructions, tools, input items."""
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    head = [{"instructions": body.get("instructions")}, {"tools": body.get("tools") or []}]
    return head + items


class PrefixCache:
    """OpenAI's automatic prompt cache, simplified: a request reads the longest prefix of pieces an earlier
    request sent, in CACHE_STEP-token steps, once the prompt holds CACHE_MIN_TOKENS."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def usage(self, body: dict[str, Any], overhead: int) -> tuple[int, int]:
        """(input tokens, cached tokens) of ``body``; remembers its prefixes."""
        digest = hashlib.sha256()
        total, cached, prefixes = overhead, 0, []
        for piece in prompt_pieces(body):
            digest.update(json.dumps(piece, sort_keys=True).encode())
            total += _tokens(piece)
            key = digest.hexdigest()
            prefixes.append(key)
            if key in self._seen:
                cached = total
        self._seen.update(prefixes)
        cached = cached // CACHE_STEP * CACHE_STEP if total >= CACHE_MIN_TOKENS else 0
        return total, cached


def usage_json(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def output_items(reply: Reply, request_number: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for index, block in enumerate(reply.blocks):
        ident = f"{request_number:010d}{index:04d}"
        if isinstance(block, Thinking):
            summary = [{"type": "summary_text", "text": block.thinking}] if block.thinking else []
            items.append(
                {"id": f"rs_{ident}", "type": "reasoning", "summary": summary, "encrypted_content": block.signature}
            )
        elif isinstance(block, RedactedThinking):
            items.append({"id": f"rs_{ident}", "type": "reasoning", "summary": [], "encrypted_content": block.data})
        elif isinstance(block, Text):
            part = {"type": "output_text", "text": block.text, "annotations": [], "logprobs": []}
            items.append(
                {"id": f"msg_{ident}", "type": "message", "status": "completed", "role": "assistant", "content": [part]}
            )
        elif isinstance(block, ToolCall):
            items.append(
                {
                    "id": f"fc_{ident}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": block.id or call_id(request_number, index),
                    "name": block.name,
                    "arguments": json.dumps(block.input, separators=(",", ":")),
                }
            )
    return items


def response(body: dict[str, Any], reply: Reply, number: int, usage: dict[str, Any]) -> dict[str, Any]:
    """The completed response object, echoing the request's settings as the API does."""
    return {
        "id": response_id(number),
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": reply.model or body.get("model") or "scripted-model",
        "output": output_items(reply, number),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _item_events(item: dict[str, Any], index: int, size: int) -> list[dict[str, Any]]:
    """The events between an item's ``output_item.added`` and its ``output_item.done`` (both included)."""
    kind, ident = item["type"], item["id"]
    where = {"item_id": ident, "output_index": index}
    if kind == "message":
        start = {**item, "status": "in_progress", "content": []}
        events = [{"type": "response.output_item.added", "output_index": index, "item": start}]
        for c, part in enumerate(item["content"]):
            empty = {**part, "text": ""}
            events.append({"type": "response.content_part.added", **where, "content_index": c, "part": empty})
            events += [
                {"type": "response.output_text.delta", **where, "content_index": c, "delta": p, "logprobs": []}
                for p in _pieces(part["text"], size)
            ]
            events.append(
                {"type": "response.output_text.done", **where, "content_index": c, "text": part["text"], "logprobs": []}
            )
            events.append({"type": "response.content_part.done", **where, "content_index": c, "part": part})
    elif kind == "function_call":
        start = {**item, "status": "in_progress", "arguments": ""}
        events = [{"type": "response.output_item.added", "output_index": index, "item": start}]
        events += [
            {"type": "response.function_call_arguments.delta", **where, "delta": p}
            for p in _pieces(item["arguments"], size)
        ]
        events.append({"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]})
    elif kind == "compaction":
        events = [{"type": "response.output_item.added", "output_index": index, "item": item}]
    else:  # reasoning
        start = {**item, "summary": []}
        events = [{"type": "response.output_item.added", "output_index": index, "item": start}]
        for s, part in enumerate(item["summary"]):
            events.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **where,
                    "summary_index": s,
                    "part": {**part, "text": ""},
                }
            )
            events += [
                {"type": "response.reasoning_summary_text.delta", **where, "summary_index": s, "delta": p}
                for p in _pieces(part["text"], size)
            ]
            events.append(
                {"type": "response.reasoning_summary_text.done", **where, "summary_index": s, "text": part["text"]}
            )
            events.append({"type": "response.reasoning_summary_part.done", **where, "summary_index": s, "part": part})
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def stream_events(full: dict[str, Any], chunk_chars: int) -> list[bytes]:
    """Every SSE event of the streamed form of ``full`` (as built by ``response``)."""
    started = {**full, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(full["output"]):
        events += _item_events(item, index, chunk_chars)
    events.append({"type": "response.completed", "response": full})
    out = []
    for number, event in enumerate(events):
        data = json.dumps({"type": event["type"], "sequence_number": number, **event}, separators=(",", ":"))
        out.append(f"event: {event['type']}\ndata: {data}\n\n".encode())
    return out


def input_problem(body: dict[str, Any], known_responses: set[str]) -> str | None:
    """The 400 message the Responses API gives for input it refuses (the checks a proxy can break), or None."""
    previous = body.get("previous_response_id")
    if previous is not None and previous not in known_responses:
        return f"Previous response with id '{previous}' not found."
    items = body.get("input")
    if not isinstance(items, list):
        return None if isinstance(items, str) or items is None else "Invalid type for 'input'."
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{i}]': expected an object."
        problem = _item_problem(item, i, items, calls, answered)
        if problem:
            return problem
    missing = sorted(set(calls) - answered)
    return f"No tool output found for function call {missing[0]}." if missing and previous is None else None


def _item_problem(
    item: dict[str, Any], i: int, items: list[Any], calls: dict[str, int], answered: set[str]
) -> str | None:
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") == "assistant" and isinstance(item.get("content"), list):
        for part in item["content"]:
            if isinstance(part, dict) and part.get("type") not in ("output_text", "refusal"):
                return f"Invalid value: '{part.get('type')}'. Supported values are: 'output_text' and 'refusal'."
    if kind == "reasoning" and not _model_item(items[i + 1] if i + 1 < len(items) else None):
        return f"Item '{item.get('id')}' of type 'reasoning' was provided without its required following item."
    if kind in ("function_call", "custom_tool_call"):
        calls[str(item.get("call_id"))] = i
    if kind in ("function_call_output", "custom_tool_call_output"):
        ident = str(item.get("call_id"))
        if ident not in calls:
            return f"No tool call found for function call output with call_id {ident}."
        answered.add(ident)
    return None


def _model_item(item: Any) -> bool:
    """An item the model produced (what a reasoning item must be followed by)."""
    if not isinstance(item, dict):
        return False
    kind = str(item.get("type", "message"))
    return kind == "reasoning" or kind.endswith("_call") or (kind == "message" and item.get("role") == "assistant")
