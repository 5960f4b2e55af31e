"""Strict JSON for transcripts read from files: what every store and provider can take, or an error naming where.

Python's ``json`` accepts ``NaN``/``Infinity`` (not JSON; PostgreSQL's jsonb refuses them), escaped lone
surrogates such as ``"\\ud800"`` (not encodable as UTF-8: writing ``--out`` or the store fails long after the
read) and nesting deep enough to raise ``RecursionError``. Each is refused here, at input, with the place.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .messages import TranscriptError

# Chat messages nest a handful of levels (message, tool_calls, function, content parts); 64 leaves room for
# provider extras and is far below what recursion in json, copy or a store driver can take.
MAX_DEPTH = 64

# An escaped UTF-16 surrogate in the raw text: the only way a strictly decoded file can produce a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str, where: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity, lone surrogates and deep nesting; errors name ``where``."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ValueError as exc:  # from _refuse_constant
        line = _constant_line(text)
        at = f" (line {line})" if line and "\n" in text.strip() else ""
        raise TranscriptError(f"{where}: {exc}{at}; NaN and Infinity are not allowed") from None
    except RecursionError:
        raise TranscriptError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
    check_value(value, where, surrogates=bool(_SURROGATE_ESCAPE.search(text)))
    return value


def message_values(text: str, source: str) -> list[tuple[str, Any]]:
    """(where, value) of every message in a transcript file's ``text``, in the three shapes people have.

    JSONL (one message per line; ``where`` is ``SOURCE:LINE``), a JSON array of messages, or a JSON object
    with a ``messages`` list such as a chat-completions request body (``where`` is ``SOURCE: element I``).
    Values are strict JSON (see :func:`loads`) but not yet checked to be messages.
    """
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("[") or (stripped.startswith("{") and not _is_jsonl(stripped)):
        data = loads(text, source)
        if isinstance(data, dict):
            if not isinstance(data.get("messages"), list):
                keys = ", ".join(sorted(data)) or "none"
                raise TranscriptError(
                    f"{source}: a JSON object needs a 'messages' list (a chat-completions request body); it has: {keys}"
                )
            data = data["messages"]
        return [(f"{source}: element {i}", m) for i, m in enumerate(data)]
    return [
        (f"{source}:{lineno}", loads(line, f"{source}:{lineno}"))
        for lineno, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]


def _is_jsonl(text: str) -> bool:
    """True when ``text`` (starting with ``{``) is one object per line rather than one JSON document: its
    first line is a whole object, and not the only line of a one-line ``{"messages": [...]}`` body."""
    first, _, rest = text.partition("\n")
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        return False  # a document spread over lines (or broken JSON, which the document read reports)
    if not isinstance(value, dict):
        return False
    return "role" in value or "messages" not in value or bool(rest.strip())


def check_value(value: Any, where: str, *, surrogates: bool = True) -> None:
    """Raise TranscriptError when ``value`` nests deeper than MAX_DEPTH or (``surrogates``) holds a string
    that is not valid Unicode text. Iterative, so it cannot itself run out of stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise TranscriptError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels)")
            if isinstance(item, dict):
                for k, v in item.items():
                    if surrogates:
                        _check_text(k, where)
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        elif surrogates and isinstance(item, str):
            _check_text(item, where)


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(text[exc.start])
        raise TranscriptError(
            f"{where}: a string holds a lone UTF-16 surrogate (\\u{bad:04x}), which is not text"
        ) from None


_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(NaN|-?Infinity)')


def _constant_line(text: str) -> int | None:
    """1-based line of the first NaN/Infinity literal outside strings in ``text`` (None if none)."""
    for match in _CONSTANT.finditer(text):
        if match.group(1):
            return text.count("\n", 0, match.start()) + 1
    return None
