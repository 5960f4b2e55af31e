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
