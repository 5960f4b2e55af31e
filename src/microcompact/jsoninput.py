"""Strict JSON for transcripts read from files: what every store and provider can take, or an error naming where.

Python's ``json`` accepts ``NaN``/``Infinity`` (not JSON; PostgreSQL's jsonb refuses them), escaped lone
surrogates such as ``"\\ud800"`` (not encodable as UTF-8: writing ``--out`` or the store fails long after the
read) and nesting deep enough to raise ``RecursionError``. Each is refused here, at input, with the place.

:func:`library_keys` checks the keys a transcript may carry beside the message's own (see
:mod:`microcompact.keys`), the same way for ``replay`` and ``import --from openai``:

- ``_mc`` (marker metadata and importer flags) must be an object, and its ``marker``, if any, ``micro`` or
  ``batch``; ``_ts`` must be a time in epoch seconds (a number from 0 to the year 9999);
- the store's and replay's bookkeeping (``_tokens``, ``_row``, ``_pos``, ``_src``) and the absorbed state of
  ``sessions export --include-absorbed`` (``_state``, ``_absorbed_by``) are refused: no exported transcript
  holds them, and a copied count, row id or replay index would pass for the library's own;
- the proxy's and the Agents SDK's history keys (``_hid``, ``_hd``, ``_hn``, ``_items``: in ``sessions export``
  of a proxy session) index a client's history that a replay does not have: they are dropped, and the
  caller says so in one line;
- any other key starting with ``_`` is the caller's own metadata: kept and stored with the message, never
  sent to a provider (``to_api`` leaves out every ``_`` key).

:func:`field_types` checks the message fields the provider types strictly and ``validate_message`` only
checks for presence: ``name``, a tool message's ``tool_call_id``, a tool call's ``type`` and ``refusal``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .keys import (
    ABSORBED_BY_KEY,
    DIGEST_KEY,
    HID_KEY,
    ITEMS_KEY,
    META_KEY,
    PARTS_KEY,
    POS_KEY,
    ROW_KEY,
    SRC_KEY,
    STATE_KEY,
    TOKENS_KEY,
    TS_KEY,
)
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


def too_deep(value: Any) -> bool:
    """True when a container in ``value`` is more than MAX_DEPTH levels down (``value`` itself is level 1).
    Iterative and over containers only: well under a millisecond for a 150K-token request body."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def check_value(value: Any, where: str, *, surrogates: bool = True) -> None:
    """Raise TranscriptError when ``value`` nests deeper than MAX_DEPTH or (``surrogates``) holds a string
    that is not valid Unicode text. Iterative, so it cannot itself run out of stack."""
    if not surrogates:
        if too_deep(value):
            raise TranscriptError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels)")
        return
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


# ---------------------------------------------------------------------------------- the library's keys

# Keys a transcript never carries: what each one is, for the error.
_REFUSED_KEYS = {
    TOKENS_KEY: "the store's cached token count",
    ROW_KEY: "the store's row id",
    POS_KEY: "the store's position",
    SRC_KEY: "replay's index into the recording it read",
    STATE_KEY: "the absorbed state that sessions export --include-absorbed adds",
    ABSORBED_BY_KEY: "the absorbed state that sessions export --include-absorbed adds",
}
# Keys dropped on read: a client history's index (the proxy) and the Agents SDK's items.
HISTORY_KEYS = (HID_KEY, DIGEST_KEY, PARTS_KEY, ITEMS_KEY)
MARKER_KINDS = ("micro", "batch")
# 9999-12-31T23:59:59Z: a larger "time" is a unit mistake (nanoseconds) or garbage.
MAX_EPOCH_SECONDS = 253_402_300_799


def library_keys(message: dict[str, Any], where: str) -> None:
    """Raise TranscriptError naming ``where`` and the key when ``message`` holds a refused or malformed library
    key (see the module's docstring); the history keys pass (:func:`without_history_keys` drops them)."""
    for key, value in message.items():
        if not key.startswith("_"):
            continue
        if key in _REFUSED_KEYS:
            hint = (
                "export without --include-absorbed to get a replayable transcript"
                if key in (STATE_KEY, ABSORBED_BY_KEY)
                else "sessions export and replay --out leave it out; remove it"
            )
            raise TranscriptError(
                f"{where}: {key!r} is {_REFUSED_KEYS[key]}, which a transcript must not carry; {hint}"
            )
        if key == META_KEY:
            _check_meta(value, where)
        elif key == TS_KEY:
            check_ts(value, where)


def without_history_keys(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` without the proxy's and the Agents SDK's history keys (itself when it has none)."""
    if any(k in message for k in HISTORY_KEYS):
        return {k: v for k, v in message.items() if k not in HISTORY_KEYS}
    return message


def _check_meta(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise TranscriptError(f"{where}: {META_KEY} must be an object (the library's metadata), got {_short(value)}")
    kind = value.get("marker")
    if kind is not None and kind not in MARKER_KINDS:
        raise TranscriptError(f"{where}: {META_KEY}.marker must be 'micro' or 'batch', got {_short(kind)}")


def check_ts(value: Any, where: str) -> None:
    """Raise TranscriptError unless ``value`` is a time in epoch seconds, 0 to the year 9999."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_EPOCH_SECONDS:
        raise TranscriptError(
            f"{where}: {TS_KEY} must be a time in epoch seconds (a number from 0 to {MAX_EPOCH_SECONDS}), got "
            f"{_short(value)} (microcompact import --from openai converts ISO-8601 times)"
        )


def field_types(message: dict[str, Any], where: str) -> None:
    """Raise TranscriptError when a field the providers type strictly has another type (see the docstring)."""
    name = message.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise TranscriptError(f"{where}: name must be a non-empty string, got {_short(name)}")
    if message.get("role") == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise TranscriptError(f"{where}: tool_call_id must be a string, got {_short(message.get('tool_call_id'))}")
    refusal = message.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise TranscriptError(f"{where}: refusal must be a string or null, got {_short(refusal)}")
    for j, tc in enumerate(message.get("tool_calls") or ()):
        kind = tc.get("type") if isinstance(tc, dict) else None
        if kind is not None and not isinstance(kind, str):
            raise TranscriptError(
                f"{where}: tool_calls[{j}].type must be a string such as 'function', got {_short(kind)}"
            )


def _short(value: Any) -> str:
    """``value`` as an error shows it: its repr, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
