"""The shape rules of :mod:`microcompact.redact` (rules 1 to 3 of its docstring): secrets recognised by
what they look like wherever they stand.

Private key blocks, tokens known by their prefix (some only when the body looks random), Docker's
base64 ``auth``, webhook URLs and passwords in URLs, replaced in the text in one fixed order, before the
context rules (:mod:`microcompact.redact.context`) read it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

from .commands import _is_placeholder, _starts_word
from .patterns import (
    _BASE64_CHARS,
    _CHECKED_TOKENS,
    _DOCKER_AUTH,
    _GUARDED_TOKENS,
    _LINE_BREAKS,
    _PEM_BEGIN,
    _PEM_BODY,
    _PEM_END,
    _STRIPE,
    _TOKENS,
    _TWILIO,
    _URL_PASSWORD,
    _WEBHOOKS,
    REDACTED,
)


def _recording(found: list[str], rule: Callable[[re.Match[str]], str], group: str) -> Callable[[re.Match[str]], str]:
    """``rule`` as a ``sub`` callback that also notes the value of ``group`` whenever it replaces a match."""

    def replace(match: re.Match[str]) -> str:
        out = rule(match)
        if out != match.group():
            found.append(match[group])
        return out

    return replace


def _substitute_tokens(text: str, found: list[str]) -> str:
    """Secrets recognised by their own shape (keys, tokens, webhooks, URL passwords), replaced in order;
    the values of the rules that need context (Docker auth, webhooks, URL passwords) go to ``found``.

    Each guard is a cheap substring test that skips a pattern which cannot match; the order matters
    because an earlier replacement can hide a later pattern's match.
    """
    if "PRIVATE KEY" in text:
        text = _redact_pem(text)
    for pattern in _TOKENS:
        text = pattern.sub(REDACTED, text)
    for guard, pattern in _GUARDED_TOKENS:
        if guard in text:
            text = pattern.sub(REDACTED, text)
    if "_live_" in text or "_test_" in text:
        text = _STRIPE.sub(REDACTED, text)
    for pattern in _CHECKED_TOKENS:
        text = pattern.sub(_redact_if_random_word, text)
    text = _TWILIO.sub(_redact_if_word, text)
    if "auth" in text:
        text = _DOCKER_AUTH.sub(_recording(found, _redact_docker_auth, "value"), text)
    for guard, pattern in _WEBHOOKS:
        if guard in text:
            text = pattern.sub(_recording(found, _keep_prefix, "tail"), text)
    if "://" in text:
        text = _URL_PASSWORD.sub(_recording(found, _redact_url_password, "pw"), text)
    return text


def _redact_pem(text: str) -> str:
    """Each private key block becomes one marker (END is not searched for again once known missing)."""
    out: list[str] = []
    pos = 0
    end_missing = False
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        end = None if end_missing else _PEM_END.search(text, begin.end())
        if end is None:
            end_missing = True
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body else begin.end()
        else:
            stop = end.end()
        out += [text[pos : begin.start()], REDACTED]
        pos = stop
    out.append(text[pos:])
    return _redact_pem_tails("".join(out))


def _redact_pem_tails(text: str) -> str:
    """Base64 lines (16+ characters each) that end at an END line, with the END line, become one marker."""
    out: list[str] = []
    pos = 0
    for end in _PEM_END.finditer(text):
        start = _base64_lines_before(text, end.start(), pos)
        if start < end.start():
            out += [text[pos:start], REDACTED]
            pos = end.end()
    out.append(text[pos:])
    return "".join(out)


def _base64_lines_before(text: str, pos: int, floor: int) -> int:
    """Start of the run of whole base64 lines that ends with a line break at ``pos`` (``pos`` if none);
    never before ``floor``, so each character is looked at once."""
    start = pos
    while True:
        brk = next((b for b in _LINE_BREAKS if text.endswith(b, floor, start)), None)
        if brk is None:
            return start
        content_end = start - len(brk)
        i = content_end
        while i > floor and text[i - 1] in _BASE64_CHARS:
            i -= 1
        if i > floor and text[i - 1] == "\\" and text[i] == "n":
            i += 1  # the ``n`` of an escaped line break, not base64
        line_starts = i == 0 or text[i - 1] == "\n" or text.endswith("\\n", floor, i)
        if content_end - i < 16 or not line_starts:
            return start
        start = i


def _looks_random(token: str) -> bool:
    """Generated keys mix letters and digits; slugs and words do not."""
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _redact_if_random_word(match: re.Match[str]) -> str:
    token = match.group()
    return REDACTED if _starts_word(match.string, match.start()) and _looks_random(token) else token


def _redact_if_word(match: re.Match[str]) -> str:
    return REDACTED if _starts_word(match.string, match.start()) else match.group()


def _redact_docker_auth(match: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(match["value"], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return match.group()
    if ":" not in decoded or match.string[match.start() - 1 : match.start()] != '"':  # the key is "auth"
        return match.group()
    whole, start = match.group(), match.start()
    return whole[: match.start("value") - start] + REDACTED + whole[match.end("value") - start :]


def _keep_prefix(match: re.Match[str]) -> str:
    return match["keep"] + REDACTED


def _redact_url_password(match: re.Match[str]) -> str:
    return match.group() if _is_placeholder(match["pw"]) else match["head"] + REDACTED
