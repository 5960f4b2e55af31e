"""Keep the new prefix cached: after a fold, one Anthropic cache breakpoint at the end of the stable part.

A fold rewrites the prompt from its change point on; what comes before the newest marker (system, head,
marker) then stays the same until the next fold. Clients place their own breakpoints (Claude Code: on the
system prompt and on the newest message, which finds the previous request's entry by looking back up to
20 blocks); a request that adds more blocks than that, or a later fold, would find no entry for the stable
part and write it again. So the outgoing request gets one breakpoint on the newest marker's fixed opening
(split from its summary, so the entry is the same for every fold until the head changes), of the kind the
client uses (its ``ttl``), keeping every breakpoint the client placed unless the provider's limit
(4) leaves no room: then the client's oldest message breakpoint gives way, never its newest one, and never
one on its tools or system prompt. With no room at all, nothing is added.
"""

from __future__ import annotations

from typing import Any

from ..messages import MARKER_PREFIX, Message

CACHE_CONTROL = "cache_control"
MAX_BREAKPOINTS = 4
DEFAULT_KIND: dict[str, Any] = {"type": "ephemeral"}


def _blocks(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and bool(block.get(CACHE_CONTROL))


def _is_marker_block(block: Any) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "text" and str(block.get("text", "")).startswith(MARKER_PREFIX)
    )


def marker_position(messages: list[Message]) -> tuple[int, int] | None:
    """(message, block) of the newest marker's text block, or None when the view holds no marker."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        if isinstance(content, str) and content.startswith(MARKER_PREFIX):
            return i, -1  # a plain-string marker: becomes one text block when marked
        blocks = _blocks(content)
        for j in range(len(blocks) - 1, -1, -1):
            if _is_marker_block(blocks[j]):
                return i, j
    return None


def _message_breakpoints(messages: list[Message]) -> list[tuple[int, int]]:
    return [(i, j) for i, m in enumerate(messages) for j, b in enumerate(_blocks(m.get("content"))) if _marked(b)]


def _fixed_breakpoints(body: dict[str, Any]) -> int:
    return sum(1 for b in _blocks(body.get("tools")) + _blocks(body.get("system")) if _marked(b))


def _kind(body: dict[str, Any], found: list[tuple[int, int]], messages: list[Message]) -> dict[str, Any]:
    """The breakpoint the client uses (its newest one), so a 1-hour cache stays a 1-hour cache."""
    if found:
        i, j = found[-1]
        kind = messages[i]["content"][j][CACHE_CONTROL]
        return dict(kind) if isinstance(kind, dict) else dict(DEFAULT_KIND)
    for block in reversed(_blocks(body.get("system")) + _blocks(body.get("tools"))):
        if _marked(block) and isinstance(block[CACHE_CONTROL], dict):
            return dict(block[CACHE_CONTROL])
    return dict(DEFAULT_KIND)


def _without_breakpoint(message: Message, j: int) -> Message:
    blocks = list(message["content"])
    blocks[j] = {k: v for k, v in blocks[j].items() if k != CACHE_CONTROL}
    return {**message, "content": blocks}


def _split_marker(block: dict[str, Any], kind: dict[str, Any]) -> list[dict[str, Any]]:
    """The marker's text block as two: its fixed opening (``MARKER_PREFIX``, the same in every fold's
    marker) carrying the breakpoint, then the summary. The entry written at the opening is then the prefix
    every later fold shares (system, head and the user messages kept before the marker), so the next fold
    reads it instead of writing it again: after a new user turn or an idle gap no breakpoint of the
    client's ever stands at the end of that prefix."""
    text = str(block.get("text", ""))
    rest = text[len(MARKER_PREFIX) :]
    if not rest:
        return [{**block, CACHE_CONTROL: kind}]
    return [{"type": "text", "text": MARKER_PREFIX, CACHE_CONTROL: kind}, {**block, "text": rest}]


def _with_breakpoint(message: Message, j: int, kind: dict[str, Any]) -> Message:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": _split_marker({"type": "text", "text": content}, kind)}
    blocks = list(content) if isinstance(content, list) else []
    blocks[j : j + 1] = _split_marker(blocks[j], kind)
    return {**message, "content": blocks}


def cache_stable_prefix(body: dict[str, Any], messages: list[Message], limit: int = MAX_BREAKPOINTS) -> list[Message]:
    """``messages`` (an outgoing Anthropic view) with a breakpoint on the newest marker's block, within
    ``limit`` breakpoints in all; the list itself when there is no marker, it is marked already, or there is
    no room."""
    where = marker_position(messages)
    if where is None:
        return messages
    i, j = where
    if j >= 0 and _marked(messages[i]["content"][j]):
        return messages
    found = _message_breakpoints(messages)
    kind = _kind(body, found, messages)
    out = list(messages)
    if _fixed_breakpoints(body) + len(found) >= limit:
        if len(found) < 2:  # the newest message breakpoint stays: it is where the client wants the cache to reach
            return messages
        oi, oj = found[0]
        out[oi] = _without_breakpoint(out[oi], oj)
    out[i] = _with_breakpoint(out[i], j, kind)
    return out


def breakpoint_count(body: dict[str, Any], messages: list[Message]) -> int:
    """Every cache_control breakpoint of a request: tools, system and messages."""
    return _fixed_breakpoints(body) + len(_message_breakpoints(messages))


__all__ = ["MAX_BREAKPOINTS", "breakpoint_count", "cache_stable_prefix", "marker_position"]
