"""Replaying a recorded transcript: the upstream serves its assistant messages, a client resends its history.

``TranscriptReplay`` is a script that answers each request with the assistant message that followed the
same tail in the transcript. The tail is the text of the user and tool messages after the request's last
assistant message. A compacting proxy keeps that tail verbatim, so the lookup survives compaction, and it
reads the same in either wire format. Requests whose tail matches nothing (a summarizer's own calls) get
``fallback``.

``anthropic_history`` turns the shared normalized transcripts (OpenAI-style messages) into the
``system`` + ``messages`` an Anthropic client would send.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .recorded import RecordedRequest
from .replies import Block, Reply, Text, ToolCall, text


def load_transcript(path: str | Path) -> list[dict[str, Any]]:
    """The messages of a normalized transcript (one JSON object a line)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {"arguments": raw}  # recorded as invalid JSON; kept whole
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def reply_from_message(message: dict[str, Any]) -> Reply:
    """An assistant message (OpenAI style, or Anthropic content blocks) as a reply, tool call ids kept."""
    content = message.get("content")
    blocks: list[Block] = []
    if isinstance(content, list):
        for block in content:
            if block.get("type") == "text" and block.get("text"):
                blocks.append(Text(block["text"]))
            elif block.get("type") == "tool_use":
                blocks.append(ToolCall(block["name"], block.get("input") or {}, block.get("id")))
    elif content:
        blocks.append(Text(str(content)))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append(ToolCall(function.get("name", ""), _arguments(function.get("arguments")), call.get("id")))
    return Reply(tuple(blocks) or (Text(""),))


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    found: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            found.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            found.extend(_texts(block.get("content")))
    return found


def tail_key(messages: Iterable[dict[str, Any]]) -> str:
    """The text of the user and tool messages after the last assistant message, in order."""
    tail: list[str] = []
    for message in messages:
        if message.get("role") == "assistant":
            tail = []
        elif message.get("role") in ("user", "tool"):
            tail.extend(_texts(message.get("content")))
    return "\n".join(tail)


class TranscriptReplay:
    """A script serving the transcript's assistant messages, each for the tail that preceded it."""

    def __init__(self, messages: list[dict[str, Any]], fallback: Reply | None = None) -> None:
        self.fallback = fallback or text("### Summary\n- Replay fallback answer.")
        self.served = 0
        self.missed = 0
        self._lock = threading.Lock()
        self._by_tail: dict[str, deque[Reply]] = defaultdict(deque)
        for index, message in enumerate(messages):
            if message.get("role") == "assistant":
                self._by_tail[tail_key(messages[:index])].append(reply_from_message(message))

    def __call__(self, request: RecordedRequest) -> Reply:
        with self._lock:
            queue = self._by_tail.get(tail_key(request.messages))
            if queue:
                self.served += 1
                return queue.popleft() if len(queue) > 1 else queue[0]  # the last one answers retries
            self.missed += 1
            return self.fallback


def anthropic_history(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` in Anthropic form.

    Tool calls become tool_use blocks, and consecutive tool messages become one user message of
    tool_result blocks. System messages are joined into ``system``.
    """
    system: list[str] = []
    converted: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append(str(content or ""))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": function.get("name", ""),
                        "input": _arguments(function.get("arguments")),
                    }
                )
            converted.append({"role": "assistant", "content": blocks or [{"type": "text", "text": ""}]})
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": str(content or "")}
            previous = converted[-1] if converted else None
            if previous and previous["role"] == "user" and isinstance(previous["content"], list):
                previous["content"].append(result)
            else:
                converted.append({"role": "user", "content": [result]})
        else:
            converted.append({"role": "user", "content": str(content or "")})
    return "\n\n".join(system), converted
