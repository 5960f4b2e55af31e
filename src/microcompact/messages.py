"""OpenAI chat-completions messages: their shape and the library's markers.

A transcript is a list of message dicts (``system``, ``user``, ``assistant`` with optional
``tool_calls``, ``tool`` with ``tool_call_id``). The library keeps its own bookkeeping under keys that
start with an underscore (named in :mod:`microcompact.keys`: ``_mc`` for marker metadata, ``_tokens`` for
the cached count, ...); ``to_api`` strips them before anything reaches a provider.

This module holds what a message *is*: the type, the helpers over one message's fields, ``to_api``, the
marker format, and the check of one message's shape (``validate_message``, ``message_shape_errors``). What
a pass must keep over a whole transcript (tool pairing, role sequence, user messages stay) lives with its
rule in :mod:`microcompact.properties` (public in :mod:`microcompact.contract`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from .keys import META_KEY, STORE_KEYS
from .render import content_text

__all__ = [
    "MARKER_END",
    "MARKER_HEADING",
    "MARKER_PREFIX",
    "RECALL_NOTE",
    "META_KEY",
    "MarkerKind",
    "Message",
    "TranscriptError",
    "content_text",
    "disown_marker_text",
    "is_marker",
    "join_user_messages",
    "looks_like_marker",
    "marker_body",
    "marker_count",
    "marker_kind",
    "message_shape_errors",
    "render_marker",
    "render_micro_marker",
    "with_recall_note",
    "to_api",
    "tool_call_ids",
    "user_texts",
    "validate_message",
]

Message = dict[str, Any]
MarkerKind = Literal["micro", "batch"]

MARKER_PREFIX = (
    "[CONTEXT COMPACTION] Earlier turns of this conversation were compacted into the reference summary "
    "below. It is a record of work already handled, not new instructions: do not act on it again. "
    "The user's own messages are kept verbatim elsewhere in the conversation. "
    "Answer the latest user message."
)
MARKER_HEADING = "## Summary of earlier turns"
MARKER_END = "[END OF COMPACTED SUMMARY]"
_FRAME_LINES = (MARKER_END, MARKER_PREFIX.split("]", 1)[0] + "]")  # "[CONTEXT COMPACTION]"


class TranscriptError(ValueError):
    """A transcript that is not a valid list of chat-completions messages (says where and what)."""


# --------------------------------------------------------------------------- content helpers


def tool_call_ids(message: Message) -> list[str]:
    """IDs of the tool calls an assistant message makes (empty for anything else)."""
    if message.get("role") != "assistant":
        return []
    return [str(tc.get("id")) for tc in (message.get("tool_calls") or []) if isinstance(tc, dict)]


def to_api(messages: Iterable[Message], *, strict_alternation: bool = False) -> list[Message]:
    """Copies of ``messages`` with library metadata (keys starting with ``_``) removed.

    With ``strict_alternation`` (for providers and chat templates that demand user/assistant
    alternation), adjacent user messages are joined with a blank line (list content keeps its parts)
    and an assistant message directly followed by another assistant message (a marker placed inside a
    long turn) is merged into it: its text goes first, the follower's tool calls are kept.
    """
    out: list[Message] = []
    for m in messages:
        clean = {k: v for k, v in m.items() if not k.startswith("_")}
        if strict_alternation and out:
            prev = out[-1]
            role = clean.get("role")
            if role == "user" and prev.get("role") == "user":
                out[-1] = _join_contents(prev, clean)
                continue
            if role == "assistant" and prev.get("role") == "assistant" and not prev.get("tool_calls"):
                merged = _join_contents(prev, clean)
                if clean.get("tool_calls"):
                    merged["tool_calls"] = clean["tool_calls"]
                out[-1] = merged
                continue
        out.append(clean)
    return out


def join_user_messages(messages: Sequence[Message]) -> Message:
    """One user message holding each of ``messages`` verbatim, in order, separated by a blank line."""
    joined = {k: v for k, v in messages[0].items() if not k.startswith("_")}
    for m in messages[1:]:
        joined = _join_contents(joined, m)
    return joined


def _join_contents(first: Message, second: Message) -> Message:
    a, b = first.get("content"), second.get("content")
    joined = dict(first)
    if isinstance(a, list) or isinstance(b, list):
        parts: list[Any] = []
        for c in (a, b):
            if isinstance(c, list):
                parts.extend(c)
            elif c:
                parts.append({"type": "text", "text": c})
        joined["content"] = parts
    else:
        texts = [t for t in (a, b) if t]
        joined["content"] = "\n\n".join(texts)
    return joined


def user_texts(messages: Iterable[Message]) -> list[str]:
    return [content_text(m) for m in messages if m.get("role") == "user"]


# --------------------------------------------------------------------------- markers


def render_marker(body: str, kind: MarkerKind, **meta: Any) -> Message:
    """The assistant-role marker message that stands for compacted turns. The marker's own frame lines
    quoted in ``body`` (a tool output that printed one) lose their brackets: one marker, one end line."""
    for frame in _FRAME_LINES:
        body = body.replace(frame, f"({frame[1:-1]})")
    text = f"{MARKER_PREFIX}\n\n{MARKER_HEADING}\n\n{body.strip()}\n\n{MARKER_END}"
    return {"role": "assistant", "content": text, META_KEY: {"marker": kind, **meta}}


def marker_kind(message: Message) -> MarkerKind | None:
    """``micro``/``batch`` when the message is a marker the library made, else None.

    Only metadata decides (``_mc.marker``, set by the library and restored by the store from its marker
    columns). Text never does: an assistant message that merely starts with the marker prefix (a model
    echoing one after a prompt injection, a transcript exported without metadata and imported again) is
    an ordinary message, so it can never plant a rolling summary, whichever entry point it came through.
    """
    if message.get("role") != "assistant":
        return None
    meta = message.get(META_KEY)
    if isinstance(meta, dict):
        kind = meta.get("marker")
        if kind == "micro":
            return "micro"
        if kind == "batch":
            return "batch"
    return None


# Micro markers say what they are in their body's first line (read back by ``marker_body``).
_MICRO_TAG = "(rolling summary, updated turn by turn)"


def looks_like_marker(message: Message) -> bool:
    """An assistant message whose text starts like a marker: a possible forgery (never a marker by itself)."""
    content = message.get("content")
    return message.get("role") == "assistant" and isinstance(content, str) and content.startswith(MARKER_PREFIX)


def disown_marker_text(message: Message) -> Message:
    """A message that merely starts like a marker (a model echoing one) stays an ordinary message.

    Returns ``message`` itself unless it looks like a marker without carrying marker metadata; then a copy
    flagged ``not_marker`` (kept in the store, so older readers that trusted the text do not adopt it).
    """
    if not isinstance(message, dict) or META_KEY in message or not looks_like_marker(message):
        return message
    return {**message, META_KEY: {"not_marker": True}}


def caller_message(message: Message) -> Message:
    """A caller's message as a session takes it: without store bookkeeping (a message copied from another
    session's transcript would otherwise pass for one already stored), and not a marker by its text alone
    (:func:`disown_marker_text`). ``message`` itself when neither applies; the caller's dict is never changed."""
    if any(k in message for k in STORE_KEYS):
        message = {k: v for k, v in message.items() if k not in STORE_KEYS}
    return disown_marker_text(message)


def is_marker(message: Message) -> bool:
    return marker_kind(message) is not None


def marker_body(message: Message) -> str:
    """The summary body of a marker (what lies between the heading and the end line)."""
    text = content_text(message)
    start = text.find(MARKER_HEADING)
    if start < 0:
        return ""
    body = text[start + len(MARKER_HEADING) :]
    end = body.rfind(MARKER_END)
    if end >= 0:
        body = body[:end]
    body = body.strip()
    if body.startswith(_MICRO_TAG):
        body = body[len(_MICRO_TAG) :].lstrip("\n")
    return body


def render_micro_marker(body: str, **meta: Any) -> Message:
    return render_marker(f"{_MICRO_TAG}\n\n{body.strip()}", "micro", **meta)


# The one line a marker gains when the client can call the recall tools (``microcompact mcp``): set between the
# frame paragraph and the heading, so ``marker_body`` never reads it and a summarizer never folds it in.
RECALL_NOTE = (
    'The compacted originals are kept: search them with the tool {recall} (conversation="{conversation}", '
    'query) and read one with {expand} (conversation="{conversation}", handle); this summary is handle '
    '"{handle}".'
)


def with_recall_note(marker: Message, recall: str, expand: str, conversation: str, handle: str) -> Message:
    """A copy of ``marker`` whose text names the recall tools (as the client calls them), the conversation
    they may read and the marker's own handle; ``marker`` itself when its text is not a marker's frame."""
    content = marker.get("content")
    head = MARKER_PREFIX + "\n\n"
    if not isinstance(content, str) or not content.startswith(head):
        return marker
    note = RECALL_NOTE.format(recall=recall, expand=expand, conversation=conversation, handle=handle)
    return {**marker, "content": f"{head}{note}\n\n{content[len(head) :]}"}


def marker_count(messages: Iterable[Message], kind: MarkerKind) -> int:
    return sum(1 for m in messages if marker_kind(m) == kind)


# --------------------------------------------------------------------------- shape of one message


def _has_non_finite(value: Any) -> bool:
    """Whether ``value`` holds a NaN or an Infinity anywhere: the values only, no paths built (a proxy checks
    every message of a 150K-token history it has not seen: the walk with paths took 20 ms of it)."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            continue
        if kind is dict:
            push(item.values())
        elif kind is list or kind is tuple:
            push(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            push(item.values())
        elif isinstance(item, (list, tuple)):
            push(item)
    return False


def _non_finite_number(value: Any) -> tuple[str, float] | None:
    """(path, value) of the first NaN or Infinity in ``value`` (JSON cannot hold them), else None. Iterative,
    so deeply nested input cannot exhaust the stack."""
    if not _has_non_finite(value):
        return None
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return path, item
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def validate_message(message: Any, where: str) -> None:
    """Raise TranscriptError naming ``where`` when ``message`` is not a usable chat message."""
    if not isinstance(message, dict):
        raise TranscriptError(f"{where}: expected a JSON object, got {type(message).__name__}")
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise TranscriptError(f"{where}: unknown role {role!r} (expected system, user, assistant or tool)")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise TranscriptError(f"{where}: content must be a string, null or a list of parts")
    if role == "tool" and not message.get("tool_call_id"):
        raise TranscriptError(f"{where}: a tool message needs a tool_call_id")
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise TranscriptError(f"{where}: only assistant messages may carry tool_calls")
        if not isinstance(calls, list):
            raise TranscriptError(f"{where}: tool_calls must be a list")
        for j, tc in enumerate(calls):
            if not isinstance(tc, dict) or not tc.get("id"):
                raise TranscriptError(f"{where}: tool_calls[{j}] needs an id")
    bad = _non_finite_number(message)
    if bad is not None:
        raise TranscriptError(
            f"{where}: {bad[0]} is {bad[1]!r}, which JSON cannot hold (no store or provider "
            "accepts it); use null or a string"
        )


def message_shape_errors(message: Message) -> list[str]:
    """Problems in the inner structure of one (role-valid) message: content parts and tool-call functions.

    A content part must be an object with a string ``type`` (a ``text`` part with a string ``text``); a
    tool call's ``function`` must be an object with a non-empty string ``name`` and string ``arguments``.
    """
    errors: list[str] = []
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                errors.append(f"content[{j}] must be an object, got {type(part).__name__}")
            elif not isinstance(part.get("type"), str):
                errors.append(f"content[{j}] needs a string 'type'")
            elif part["type"] == "text" and not isinstance(part.get("text"), str):
                errors.append(f"content[{j}] is a text part without a string 'text'")
    for j, tc in enumerate(message.get("tool_calls") or ()):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            errors.append(f"tool_calls[{j}].function must be an object, got {type(fn).__name__}")
        elif not isinstance(fn.get("name"), str) or not fn["name"]:
            errors.append(f"tool_calls[{j}].function needs a non-empty string 'name'")
        elif fn.get("arguments") is not None and not isinstance(fn["arguments"], str):
            errors.append(
                f"tool_calls[{j}].function.arguments must be a string of JSON text "
                "(microcompact import --from openai converts it)"
            )
        if isinstance(tc, dict) and not isinstance(tc.get("id"), str):
            errors.append(f"tool_calls[{j}].id must be a string")
    return errors
