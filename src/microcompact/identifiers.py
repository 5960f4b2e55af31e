"""Distinctive identifiers in text: the names, paths, ids and numbers an agent carries from step to step.

One rule for everything that asks "is what the agent works with still in front of it?": the recall
measure (``bench/recall.py``), the fold's in-use rule and the marker's ledger all read identifiers
through this module, so they agree on what counts.

**The identifier rule.** Text is cut into *tokens*: runs of letters, digits and ``_ . / - : @ # $ ~``
that start with a letter, a digit or one of ``_ ~ $ @ #`` (so ``/etc/hosts`` reads as ``etc/hosts``),
trimmed of trailing ``. , : ; - /``. A token of at least :data:`MIN_LENGTH` characters is an identifier
when it is one of:

- a **path**: it holds a ``/`` and a letter (``src/app/session.py``, ``/etc/hosts``, ``end_session/2``);
- a **dotted name**: word characters on both sides of a ``.``, with a letter (``session.py``,
  ``os.path.join``, ``v1.2.3-rc``);
- a **snake name**: an ``_`` between word characters, with a letter (``end_session``, ``MAX_TOKENS``);
- a **camel name**: a lower-case letter followed by an upper-case one (``commitEvent``,
  ``ActiveSessionRegistry``);
- a **hex id**: 7 or more hex digits with at least one digit and one letter ``a-f`` (``6e3cdee``);
- a **number** of 4 or more digits (``40213``; a number inside a longer token counts as the token).

A path's components and a ``name:line`` token's name are identifiers of their own too, when they pass
the rule by themselves (an agent says ``session.py`` of ``src/app/session.py``, ``end_session`` of
``end_session/2``). Plain words (``Session``, ``request``), flags (``--verbose``)
and short tokens are not identifiers: they are everywhere and carry nothing a later step could lose.

**Where it is read.** :func:`message_identifiers` reads a message's content and, for an assistant
message, the *values* of its tool calls' arguments (not their names or keys: ``file_path`` is the tool's
vocabulary, the path in it is the agent's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from .render import content_text
from .textmemo import MEMO_CHARS, SHORT_TEXT_CHARS, TextMemo

MIN_LENGTH = 5

_TOKEN = re.compile(r"[A-Za-z0-9_~$@#][A-Za-z0-9_./\-:@#$~]*")
_TRIM = ".,:;-/"
_HEX = re.compile(r"[0-9a-fA-F]{7,}")
_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"[0-9]")
_HEX_LETTER = re.compile(r"[a-fA-F]")
_DOTTED = re.compile(r"\w\.\w")
_SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_NUMBER = re.compile(r"[0-9]{4,}")
_LINE_SUFFIX = re.compile(r"^(.*?)(?::[0-9]+)+$")


def is_identifier(token: str) -> bool:
    """Whether one trimmed token is distinctive by the rule above."""
    if len(token) < MIN_LENGTH:
        return False
    letter = _HAS_LETTER.search(token) is not None
    if "/" in token and letter:
        return True
    if letter and (_DOTTED.search(token) or _SNAKE.search(token)):
        return True
    if _CAMEL.search(token):
        return True
    if _HEX.fullmatch(token) and _HAS_DIGIT.search(token) and _HEX_LETTER.search(token):
        return True
    return _NUMBER.fullmatch(token) is not None


def _candidates(token: str) -> Iterator[str]:
    """The token, its name without a ``:line`` suffix, and a path's components."""
    yield token
    stripped = _LINE_SUFFIX.match(token)
    if stripped:
        token = stripped.group(1).rstrip(_TRIM)
        yield token
    if "/" in token:
        yield from token.split("/")


# A ledger's values are read again at every merge (does the agent mention them?): the identifiers of short
# texts are read once per process: at most SHORT_TEXT_CHARS characters each (microcompact.textmemo), this
# many of them.
SHORT_TEXTS = 16384
# Longer texts come back too (a message copied by a splice, a history re-sent or resumed): the identifiers of
# the most recent ones are read once (see :mod:`microcompact.textmemo`).


def identifiers(text: str) -> set[str]:
    """Every identifier in ``text`` (see the module docstring)."""
    if len(text) <= SHORT_TEXT_CHARS:
        return set(_short_identifiers(text))
    return set(_long_identifiers(text))


@lru_cache(maxsize=SHORT_TEXTS)
def _short_identifiers(text: str) -> frozenset[str]:
    return frozenset(_read_identifiers(text))


def _read_identifiers(text: str) -> set[str]:
    found: set[str] = set()
    for token in set(_TOKEN.findall(text)):
        found.update(_token_identifiers(token))
    return found


_long_identifiers: TextMemo[frozenset[str]] = TextMemo(lambda text: frozenset(_read_identifiers(text)), MEMO_CHARS)


# The same tokens come back in every output an agent reads (words, names, paths): each is judged once.
TOKENS = 1 << 16


@lru_cache(maxsize=TOKENS)
def _token_identifiers(token: str) -> tuple[str, ...]:
    """The identifiers one untrimmed token holds (see the module docstring)."""
    token = token.rstrip(_TRIM)
    # Most tokens are plain words or plain numbers (tokens are ASCII): the rule's answer for them, without
    # its searches. A word is an identifier only as a camel name, a number only by its length.
    if token.isalpha():
        return (token,) if len(token) >= MIN_LENGTH and _CAMEL.search(token) else ()
    if token.isdigit():
        return (token,) if len(token) >= MIN_LENGTH else ()
    return tuple(candidate for candidate in _candidates(token) if is_identifier(candidate))


def argument_values(arguments: Any) -> Iterator[str]:
    """The string and number values of a tool call's arguments (JSON text or an object), keys left out;
    text that is not JSON is one value."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            yield arguments
            return
    stack: list[Any] = [arguments]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, str):
            yield value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield str(value)


def message_identifiers(message: Mapping[str, Any]) -> set[str]:
    """The identifiers a message holds: its content and its tool calls' argument values."""
    found = identifiers(content_text(message))
    for value in _call_values(message):
        found |= identifiers(value)
    return found


def _call_values(message: Mapping[str, Any]) -> Iterable[str]:
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            yield from argument_values(function.get("arguments", ""))


__all__ = ["MIN_LENGTH", "argument_values", "identifiers", "is_identifier", "message_identifiers"]
