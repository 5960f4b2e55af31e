"""What every request the proxy forwards must keep, checked against the client's request (both in the
provider's own format): the user's text verbatim and in order, the head untouched, tool pairs whole
(the scripted upstream's validation answers 400 otherwise), and nothing but markers added."""

from __future__ import annotations

from typing import Any

from microcompact.messages import MARKER_PREFIX


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [t for m in messages if m.get("role") == "user" for t in _texts(m.get("content"))]


def is_marker(message: dict[str, Any]) -> bool:
    texts = _texts(message.get("content"))
    return message.get("role") == "assistant" and any(t.startswith(MARKER_PREFIX) for t in texts)


def contract_errors(client: list[dict[str, Any]], forwarded: list[dict[str, Any]], head: int = 1) -> list[str]:
    errors = []
    if user_texts(client) != user_texts(forwarded):
        errors.append("user text changed, dropped or reordered")
    opening = _flat(client[:head])
    if _flat(forwarded)[: len(opening)] != opening:
        errors.append("the head changed")
    for m in forwarded:
        if is_marker(m) or m in client:
            continue
        if m.get("role") == "user" or any(b.get("type") == "tool_result" for b in _blocks(m)):
            continue  # a user message rebuilt from kept parts (tool results shortened or absorbed)
        if m.get("role") in ("assistant", "tool"):
            continue  # a shortened copy (stub, cut) of a client message
        errors.append(f"a message the client never sent: {str(m)[:120]}")
    return errors


def _flat(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(role, block) pairs: what a provider that joins consecutive same-role messages (Anthropic) reads."""
    out: list[tuple[str, Any]] = []
    for m in messages:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        out += [(m.get("role"), b) for b in blocks]
    return out


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def compacted(forwarded: list[dict[str, Any]]) -> bool:
    return any(is_marker(m) for m in forwarded)
