"""The structural checks the real APIs make before answering, with their real error messages.

A proxy that breaks a tool pair or sends too many cache breakpoints gets the same 400 from the scripted
upstream that it would get from the provider, so such bugs fail tests instead of passing silently.
"""

from __future__ import annotations

from typing import Any

MAX_CACHE_BREAKPOINTS = 4


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _count_breakpoints(body: dict[str, Any]) -> int:
    count = sum(1 for tool in body.get("tools") or [] if isinstance(tool, dict) and tool.get("cache_control"))
    system = body.get("system")
    if isinstance(system, list):
        count += sum(1 for block in system if isinstance(block, dict) and block.get("cache_control"))
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            count += sum(1 for block in _blocks(message) if block.get("cache_control"))
    return count


def anthropic_problem(body: Any) -> str | None:
    """The API's error message for this Messages request, or None when it would be accepted."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "messages: Field required"
    messages = body["messages"]
    if not messages:
        return "messages: at least one message is required"
    breakpoints = _count_breakpoints(body)
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        return f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{index}: Input should be a valid dictionary"
        uses = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
        following = messages[index + 1] if index + 1 < len(messages) else None
        if uses and message.get("role") == "assistant" and following is not None:
            answered = {b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                return (
                    f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(map(str, missing))}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
        results = [b.get("tool_use_id") for b in _blocks(message) if b.get("type") == "tool_result"]
        if results:
            previous = messages[index - 1] if index > 0 else {}
            offered = {b.get("id") for b in _blocks(previous) if b.get("type") == "tool_use"}
            stray = [r for r in results if r not in offered]
            if stray:
                return (
                    f"messages.{index}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{stray[0]}. Each `tool_result` block must have a corresponding `tool_use` block in the "
                    "previous message."
                )
    return None


def openai_problem(body: Any) -> str | None:
    """The API's error message for this Chat Completions request, or None when it would be accepted."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "Missing required parameter: 'messages'."
    messages = body["messages"]
    if not messages:
        return "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array."
    pending: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"Invalid type for 'messages[{index}]': expected an object."
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'."
                )
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}"
            )
        if role == "assistant":
            pending = [str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return None
