"""The context rules of :mod:`microcompact.redact` (rules 4 and 5 of its docstring, and signed-URL
parameters): secrets recognised by what surrounds them, as edits of the text.

Authorization and cookie headers, a lone ``Bearer``, ``--password``-style flags and ``name = value``
assignments under a secret name, with the predicates that keep a value that reads as code (a dotted
name, a call, a path, a type, a variable named after the secret) readable; the command and
credential-file rules of :mod:`microcompact.redact.commands` join them in :func:`_context_edits`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .commands import (
    Edit,
    _aws_secret_edits,
    _command_edits,
    _credential_file_edits,
    _is_placeholder,
    _starts_word,
)
from .patterns import (
    _ASSIGNMENT_KEY,
    _AUTH_HEADER,
    _BEARER,
    _CLASS_NAME,
    _COOKIE_ATTRIBUTES,
    _COOKIE_HEADER,
    _DOTTED,
    _ENV_KEY_NAME,
    _FLAG,
    _IDENTIFIER,
    _LITERALS,
    _MAX_NAME,
    _MIN_COOKIE_VALUE,
    _MIN_SECRET_LEN,
    _NAME_CHARS,
    _PASSWORD_NAME,
    _PATH,
    _SECRET_WORD_AT_END,
    _SNAKE_PART,
    _URL_SIGNATURE,
    _URL_SIGNATURE_NAMES,
    _VALUE,
    REDACTED,
)
from .shapes import _looks_random


def _context_edits(text: str) -> list[Edit]:
    """Secrets recognised by what surrounds them (a header, an assignment, a flag, ...), as sorted edits."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a few non-ASCII letters grow when lowercased; keep indexes aligned
        lowered = "".join(c.lower() if c.isascii() else c for c in text)
    return sorted(
        [
            *_header_edits(text, lowered),
            *_assignment_edits(text, lowered),
            *_flag_edits(text, lowered),
            *_command_edits(text, lowered),
            *_credential_file_edits(text, lowered),
            *_url_signature_edits(lowered),
            *_aws_secret_edits(text, lowered),
        ]
    )


def _header_edits(text: str, lowered: str) -> Iterator[Edit]:
    """Credentials of Authorization headers, cookie values, and random-looking tokens after a lone ``Bearer``."""
    if "authorization" in lowered:
        for m in _AUTH_HEADER.finditer(lowered):
            yield m.start("cred"), m.end("cred"), REDACTED
    if "cookie" in lowered:
        for header in _COOKIE_HEADER.finditer(lowered):
            yield from _cookie_value_edits(header["pairs"], header.start("pairs"))
    if "bearer" in lowered:
        for m in _BEARER.finditer(lowered):
            if _starts_word(lowered, m.start()) and _looks_random(text[m.start("cred") : m.end("cred")]):
                yield m.start("cred"), m.end("cred"), REDACTED


def _cookie_value_edits(pairs: str, offset: int) -> Iterator[Edit]:
    """Values of ``name=value; ...`` pairs (one pass over the header, no backtracking)."""
    pos = 0
    for segment in pairs.split(";"):
        eq = segment.find("=")
        if eq > 0 and segment[:eq].strip() not in _COOKIE_ATTRIBUTES:
            value = segment[eq + 1 :]
            stripped = value.lstrip()
            end = next((i for i, ch in enumerate(stripped) if ch.isspace()), len(stripped))
            if end >= _MIN_COOKIE_VALUE:
                start = offset + pos + eq + 1 + (len(value) - len(stripped))
                yield start, start + end, REDACTED
        pos += len(segment) + 1


def _flag_edits(text: str, lowered: str) -> Iterator[Edit]:
    if "--" not in text:
        return
    for m in _FLAG.finditer(lowered):
        value = text[m.start("value") : m.end("value")]
        if _starts_word(lowered, m.start()) and len(value) >= _MIN_SECRET_LEN and not _is_placeholder(value):
            yield m.start("value"), m.end("value"), REDACTED


def _assignment_edits(text: str, lowered: str) -> Iterator[Edit]:
    """Values of ``name = value`` pairs whose name ends in a secret word (see the module docstring).

    A key found inside a value already read is skipped: each character is scanned by one value at most, so
    the rule stays linear on adversarial input such as ``password=password=...``.
    """
    covered = 0
    for m in _ASSIGNMENT_KEY.finditer(lowered):
        if m.start() < covered:
            continue
        start, word_end = m.start(), m.start("sep")
        while start > 0 and word_end - start < _MAX_NAME and lowered[start - 1] in _NAME_CHARS:
            start -= 1
        name = lowered[start:word_end]
        original_name = text[start:word_end]
        env_style = original_name.isupper()
        if not (_SECRET_WORD_AT_END.search(name) or (env_style and _ENV_KEY_NAME.fullmatch(original_name))):
            continue
        value = _VALUE.match(text, m.end())
        if value is None:
            continue
        covered = value.end()
        if value["quoted"] is not None:
            inner = value["quoted"].strip()
            is_template = "f" in (value["prefix"] or "").lower() and "{" in inner
            if len(inner) >= _MIN_SECRET_LEN and not _is_placeholder(inner) and not is_template:
                yield value.start("quoted"), value.end("quoted"), REDACTED
            continue
        end = _password_tail_end(text, value.end("bare")) if not value["after"] else value.end("bare")
        bare = text[value.start("bare") : end]
        covered = max(covered, end)
        if _is_code_value(name, bare, value["after"], m["sep"], env_style=env_style and "=" in m["sep"]):
            continue
        # A number after a quoted key is a JSON/YAML/dict value: quote the marker so the document parses.
        key_quote = _quote_before(text, start)
        replacement = f"{key_quote}{REDACTED}{key_quote}" if bare.isdigit() else REDACTED
        yield value.start("bare"), end, replacement


# After ``&`` or ``;`` a password goes on unless what follows is the next ``name=`` parameter.
_PASSWORD_TAIL = re.compile(r"(?:[&;](?![A-Za-z_][A-Za-z0-9_. -]{0,63}=)[^\s'\"`,;&()\[\]{}<>\\|]+)*+")


def _password_tail_end(text: str, end: int) -> int:
    """Where an unquoted secret value really ends: ``abc&def`` and ``x;y`` are one password, while
    ``?token=abc&state=ok`` and ``Pwd=abc;Database=app`` end at the separator."""
    tail = _PASSWORD_TAIL.match(text, end)
    return tail.end() if tail else end


def _url_signature_edits(lowered: str) -> Iterator[Edit]:
    for m in _URL_SIGNATURE.finditer(lowered):
        if _is_url_signature(lowered, m.start(), m.start("value")):
            yield m.start("value"), m.end("value"), REDACTED


def _is_url_signature(lowered: str, start: int, value_start: int) -> bool:
    """The parameter found at ``start`` is one of the signed-URL names (preceded by ``?``/``&`` or its prefix)."""
    window = lowered[max(0, start - 12) : value_start]
    return any(window.endswith(name) for name in _URL_SIGNATURE_NAMES)


def _quote_before(text: str, pos: int) -> str:
    if pos >= 2 and text[pos - 2 : pos] in ('\\"', "\\'"):
        return text[pos - 2 : pos]
    if pos >= 1 and text[pos - 1] in "\"'":
        return text[pos - 1]
    return ""


def _is_code_value(name: str, value: str, after: str, separator: str, *, env_style: bool = False) -> bool:
    """True when an unquoted value reads as code, a reference or a non-secret (see module docstring).

    ``name`` is the lowercased key name. In an environment-style assignment (``NAME=value``, upper-case
    name) values are data, not code: dotted names and single-segment paths are secrets there too.
    """
    if len(value) < _MIN_SECRET_LEN or _is_placeholder(value):
        return True
    if value.lower() in _LITERALS:
        return True
    if _PATH.fullmatch(value) and _reads_as_path(name, value, env_style):
        return True
    if _DOTTED.fullmatch(value) and not env_style:
        return True
    if value.isdigit():
        return len(value) <= 6 and not _PASSWORD_NAME.search(name)
    if not _IDENTIFIER.fullmatch(value):
        return False
    if after in ("(", "["):
        return True  # a call or subscript
    if after and not _looks_random(value):
        return True  # an identifier passed on as a call argument
    if ":" in separator and "=" not in separator and _CLASS_NAME.fullmatch(value) and _names_a_type(value):
        return True  # a type annotation such as `token: Token`
    return _repeats_secret_word(name, value)


def _reads_as_path(name: str, value: str, env_style: bool) -> bool:
    """A path-shaped value is a path, except where it would be data: in an environment-style assignment,
    or under a password or secret name, a one-segment path (``/Xk9pQz2``) or one with a random-looking
    segment is a secret that starts with a slash."""
    if not env_style and not _SLASHED_SECRET_NAME.search(name):
        return True
    if value.count("/") < 2 and value[:1] not in "~.":
        return False
    return env_style or not any(_looks_generated(part) for part in value.split("/"))


_SLASHED_SECRET_NAME = re.compile(r"(?:password|passwd|passphrase|secret)$")


def _looks_generated(part: str) -> bool:
    return any(c.isupper() for c in part) and any(c.islower() for c in part) and any(c.isdigit() for c in part)


# ``password: Password``, ``token: SecretStr``: an annotation names a type, which names what it holds.
_TYPE_WORDS = ("pass", "pwd", "token", "secret", "key", "cred", "auth", "str", "type", "field", "model", "schema")


def _names_a_type(value: str) -> bool:
    lowered = value.lower()
    return any(word in lowered for word in _TYPE_WORDS)


def _repeats_secret_word(name: str, value: str) -> bool:
    """``api_key=openai_api_key``: the value names a variable holding the secret, not the secret."""
    word = _SECRET_WORD_AT_END.search(name)
    if word is None:
        return False
    wanted = _words(word.group())
    have = _words(value)
    return any(have[i : i + len(wanted)] == wanted for i in range(len(have) - len(wanted) + 1))


def _words(identifier: str) -> list[str]:
    return [w.lower() for w in _SNAKE_PART.findall(identifier)]
