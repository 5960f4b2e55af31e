"""Rewriting single messages without a model: the prune phase's stubs and shortened tool-call arguments,
and the last resort's head-and-tail cut.

Pure functions: they plan a :class:`~microcompact.events.Prune` (or one replacement message); the engine
commits and applies it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..events import Prune
from ..identity import identity_of
from ..messages import META_KEY, Message, is_marker
from ..render import content_text
from ..summarizers import describe_tool_result

CUT_NOTE = (
    "\n[... {chars:,} characters (about {tokens:,} tokens) omitted by microcompact: the request was over the "
    "context window; the original is kept in the session store ...]\n"
)
_STORE_ONLY_KEYS = ("_tokens", "_row", "_pos")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


def _is_stub(message: Message) -> bool:
    meta = message.get(META_KEY)
    return isinstance(meta, dict) and bool(meta.get("stub"))


def shorten_arguments(arguments: str, max_chars: int) -> str | None:
    """Tool-call arguments with long string values cut head-and-tail, still valid JSON; None if not JSON."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    keep = max(40, max_chars // 4)

    def cut(v: Any) -> Any:
        if isinstance(v, str) and len(v) > keep * 2:
            return f"{v[:keep]}[... {len(v) - 2 * keep:,} characters omitted by microcompact ...]{v[-keep:]}"
        if isinstance(v, dict):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v

    return json.dumps(cut(value), ensure_ascii=False)


def plan_prune(
    msgs: list[Message], tokens: list[int], start: int, end: int, *, min_tool_tokens: int, max_argument_tokens: int
) -> Prune | None:
    """Stubs for tool outputs in ``[start, end)``, newest copy of duplicate outputs kept whole."""
    calls: dict[str, dict[str, Any]] = {}
    for i in range(start, end):
        for tc in msgs[i].get("tool_calls") or ():
            calls[str(tc.get("id"))] = tc
    replacements: list[tuple[int, Message]] = []
    newest: set[str] = set()  # digests of outputs seen later in the transcript
    whole: set[str] = set()  # ... whose newest copy stays whole
    for i in range(end - 1, start - 1, -1):  # newest first, so the newest copy of a duplicate is the one kept
        m = msgs[i]
        replacement: Message | None = None
        if m.get("role") == "tool" and not _is_stub(m):
            replacement = _stub(m, tokens[i], calls, newest, whole, min_tool_tokens)
        elif m.get("role") == "assistant" and m.get("tool_calls") and tokens[i] > max_argument_tokens:
            replacement = _shortened_calls(m, max_argument_tokens)
        if replacement is not None:
            replacements.append((i, replacement))
    if not replacements:
        return None
    return Prune(tuple(sorted(replacements, key=lambda r: r[0])))


def _stub(
    m: Message, tokens: int, calls: dict[str, dict[str, Any]], newest: set[str], whole: set[str], min_tool_tokens: int
) -> Message | None:
    """The one-line stub for a tool output (a large one, or an older copy of a later output), or None to keep
    it whole; records the output's digest in ``newest`` (and ``whole`` when this newest copy stays whole)."""
    text = content_text(m)
    call = calls.get(str(m.get("tool_call_id")))
    key = _digest(text)
    if key in newest and tokens > 20:
        note = "kept there" if key in whole else "also shortened"
        stub = f"{describe_tool_result(call, text)} [identical to a later output, {note}]"
    elif tokens > min_tool_tokens:
        stub = describe_tool_result(call, text)
    else:
        if key not in newest:
            whole.add(key)
        newest.add(key)
        return None
    newest.add(key)
    if len(stub) >= len(text):  # a stub that is not shorter saves nothing and loses the detail
        return None
    return {
        "role": "tool",
        "tool_call_id": m.get("tool_call_id"),
        "content": stub,
        META_KEY: {"stub": True, "original_tokens": tokens},
        **identity_of(m),  # still the same client message, shortened
    }


def _shortened_calls(m: Message, max_argument_tokens: int) -> Message | None:
    """The assistant message with its long tool-call arguments shortened (still valid JSON), or None when
    no argument gets shorter."""
    new_calls, changed = [], False
    for tc in m["tool_calls"]:
        fn = dict(tc.get("function") or {})
        args = fn.get("arguments")
        short = shorten_arguments(args, max_argument_tokens * 4) if isinstance(args, str) else None
        if short is not None and isinstance(args, str) and len(short) < len(args):
            fn["arguments"], changed = short, True
        new_calls.append({**tc, "function": fn})
    if not changed:
        return None
    return {
        **{k: v for k, v in m.items() if not k.startswith("_")},
        "tool_calls": new_calls,
        META_KEY: {**(m.get(META_KEY) or {}), "shortened": True},
        **identity_of(m),
    }


def cuttable(message: Message) -> bool:
    """Tool outputs and assistant texts; never user or system messages, markers, or earlier cuts."""
    meta = message.get(META_KEY)
    if isinstance(meta, dict) and meta.get("cut"):
        return False
    return message.get("role") in ("tool", "assistant") and not is_marker(message) and bool(content_text(message))


def cut_message(message: Message, tokens: int, keep_tokens: int) -> Message:
    """``message`` with its text cut to about ``keep_tokens``: its start and its end, and a note between."""
    text = content_text(message)
    keep_chars = max(2, int(len(text) * keep_tokens / max(tokens, 1)))
    head, tail = text[: keep_chars // 2], text[len(text) - keep_chars // 2 :]
    omitted = len(text) - len(head) - len(tail)
    note = CUT_NOTE.format(chars=omitted, tokens=max(0, tokens - keep_tokens))
    out = {k: v for k, v in message.items() if k not in _STORE_ONLY_KEYS}
    out["content"] = head + note + tail
    out[META_KEY] = {**(message.get(META_KEY) or {}), "cut": True, "original_tokens": tokens}
    return out
