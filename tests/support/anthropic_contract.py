"""What a request ``microcompact serve`` forwards in Anthropic's format must keep of the client's request,
as a list of readable failures (empty: kept). Stricter than ``server_contract``: it knows Claude Code's
shape (a ``system``-role environment message in the head) and checks the API's own rules on the way.

- every top-level field but ``messages`` unchanged (system, tools, metadata, thinking, ...);
- user and system text verbatim and in order; the head (first message, environment message) as sent;
  ``system``-role entries inside ``messages`` kept as sent; the newest message as sent;
- at most 4 cache breakpoints;
- each tool_use answered in the very next message, its tool_result blocks first, no marker with them;
- signed thinking and redacted_thinking blocks exactly as the client sent them, opening their message (on
  models that bind thinking to its prefix, those of the oldest turns may be left out whole).
"""

from __future__ import annotations

from typing import Any

from microcompact.config import PRESERVED_THINKING_FAMILIES
from microcompact.messages import MARKER_PREFIX
from microcompact.server.thinking import family_of
from support.server_contract import contract_errors

MAX_BREAKPOINTS = 4  # the Anthropic API refuses a request with more cache_control blocks


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def is_marker_text(block: dict[str, Any]) -> bool:
    return block.get("type") == "text" and str(block.get("text", "")).startswith(MARKER_PREFIX)


def marker_texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each marker's whole text. The proxy sends a marker with a breakpoint as two text blocks, its fixed
    opening (carrying the breakpoint) then the summary (server/breakpoints.py): those are joined again."""
    texts = []
    for message in messages:
        blocks = blocks_of(message)
        for i, block in enumerate(blocks):
            if not is_marker_text(block):
                continue
            text = str(block["text"])
            following = blocks[i + 1] if i + 1 < len(blocks) else {}
            if text == MARKER_PREFIX and following.get("type") == "text":
                text += str(following.get("text", ""))
            texts.append(text)
    return texts


def user_words(messages: list[dict[str, Any]]) -> list[str]:
    """What the person (and Claude Code's reminders) said: text blocks of user and system messages, in order."""
    return [b["text"] for m in messages if m["role"] in ("user", "system") for b in blocks_of(m) if b["type"] == "text"]


def breakpoints(body: dict[str, Any]) -> int:
    places = [*(body.get("system") or []), *(body.get("tools") or [])]
    places += [b for m in body["messages"] for b in blocks_of(m)]
    return sum(1 for b in places if isinstance(b, dict) and "cache_control" in b)


def tool_pair_errors(messages: list[dict[str, Any]]) -> list[str]:
    """Each tool_use answered in the very next message, its tool_result blocks first, nothing between."""
    errors = []
    for i, message in enumerate(messages):
        calls = [b["id"] for b in blocks_of(message) if b["type"] == "tool_use"]
        answered = [b["tool_use_id"] for b in blocks_of(message) if b["type"] == "tool_result"]
        if answered:
            before = messages[i - 1] if i else {}
            asked = [b["id"] for b in blocks_of(before) if b.get("type") == "tool_use"] if before else []
            if before.get("role") != "assistant" or sorted(asked) != sorted(answered):
                errors.append(f"messages.{i}: tool results {answered} do not answer the message before ({asked})")
            kinds = [b["type"] for b in blocks_of(message)]
            if kinds[: len(answered)] != ["tool_result"] * len(answered):
                errors.append(f"messages.{i}: something comes before its tool results: {kinds}")
        if calls and message["role"] == "assistant":
            after = messages[i + 1] if i + 1 < len(messages) else None
            if after is None or after["role"] != "user":
                errors.append(f"messages.{i}: tool calls {calls} are not followed by their results")
            elif any(is_marker_text(b) for b in blocks_of(after)):
                errors.append(f"messages.{i + 1}: a marker sits with the results of {calls}")
    return errors


def binds_thinking(model: Any) -> bool:
    """Whether ``model`` binds thinking blocks to their prefix (then a fold removes the blocks it invalidated)."""
    return family_of(model) in PRESERVED_THINKING_FAMILIES


def thinking_errors(
    client: list[dict[str, Any]], forwarded: list[dict[str, Any]], removable: bool = False
) -> list[str]:
    """Every signed block goes out exactly as the client sent it, in its assistant message, in order. With
    ``removable`` (a model that binds thinking to its prefix) a message's blocks may also be left out whole,
    those of the oldest turns only: from the start, never between blocks that go out."""
    errors = []
    sent_by_call: dict[str, list[dict[str, Any]]] = {}
    for m in client:
        signed = [b for b in blocks_of(m) if b["type"] in ("thinking", "redacted_thinking")]
        for b in blocks_of(m):
            if b["type"] == "tool_use":
                sent_by_call[b["id"]] = signed
    kept: list[bool] = []
    for i, m in enumerate(forwarded):
        if m["role"] != "assistant":
            continue
        signed = [b for b in blocks_of(m) if b["type"] in ("thinking", "redacted_thinking")]
        kinds = [b["type"] for b in blocks_of(m)]
        if signed and kinds[: len(signed)] != [b["type"] for b in signed]:
            errors.append(f"messages.{i}: thinking does not open the assistant message: {kinds}")
        for call in (b["id"] for b in blocks_of(m) if b["type"] == "tool_use"):
            theirs = sent_by_call.get(call)
            if removable and theirs and not signed:
                kept.append(False)
            elif signed != theirs:
                errors.append(f"messages.{i}: the thinking before {call} is not the client's")
            elif theirs:
                kept.append(True)
    if False in kept[kept.index(True) :] if True in kept else False:
        errors.append("thinking was left out between blocks that went out")
    return errors


def request_errors(client: dict[str, Any], forwarded: dict[str, Any]) -> list[str]:
    """Everything one forwarded request must keep of the client's, as readable failures."""
    errors = [
        f"top-level {k!r} changed"
        for k in client.keys() | forwarded.keys()
        if k != "messages" and client.get(k) != forwarded.get(k)
    ]
    sent, out = client["messages"], forwarded["messages"]
    if user_words(sent) != user_words(out):
        errors.append("user or system text changed, dropped or reordered")
    head = 2 if len(sent) > 1 and sent[1]["role"] == "system" else 1
    if out[:head] != sent[:head]:
        errors.append("the head (the first user message and the environment message) changed")
    if [m for m in out if m["role"] == "system"] != [m for m in sent if m["role"] == "system"]:
        errors.append("system-role entries inside messages were not kept as sent")
    if out[-1] != sent[-1]:
        errors.append("the newest message (with its breakpoint) did not go out as sent")
    if breakpoints(forwarded) > MAX_BREAKPOINTS:
        errors.append(f"{breakpoints(forwarded)} cache breakpoints")
    removable = binds_thinking(client.get("model"))
    errors += tool_pair_errors(out) + thinking_errors(sent, out, removable) + contract_errors(sent, out, head=head)
    return errors
