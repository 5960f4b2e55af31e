"""The command-line, credential-file and bare-key rules of :mod:`microcompact.redact` (rules 6 and 7 of
its docstring).

Passwords given as flags to a command named on the same line (``curl -u user:PASS``, ``mysql -pPASS``,
``sshpass -p PASS``, ``docker login -p PASS``), ``.pgpass`` lines and ``.netrc`` entries, bare AWS secret
keys; with the two small predicates the other rules share. Kept apart so each module stays short.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .patterns import (
    _AWS_SECRET_ESCAPED_LINE,
    _AWS_SECRET_FIELD,
    _AWS_SECRET_LINE,
    _MAX_HOST,
    _MIN_SECRET_LEN,
    _PGPASS,
    _PLACEHOLDER,
    REDACTED,
)

Edit = tuple[int, int, str]  # replace text[start:end] with the string


def _starts_word(text: str, start: int) -> bool:
    return start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_-")


def _is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


# Commands that take a password on the command line, and the flag forms they use.
_GLUED_P = re.compile(r"-p(?P<pw>[^\s'\"-][^\s'\"]*)")  # mysql -pPASS
_SPACED_P = re.compile(r"-p[ \t]+(?P<q>['\"]?)(?P<pw>[^\s'\"-][^\s'\"]*)(?P=q)")  # sshpass -p PASS
_CURL_USER = re.compile(r"-(?:u|-user)(?:[ \t]+|=)?(?P<q>['\"]?)[^\s:'\"@]+:(?P<pw>[^\s'\"]+)(?P=q)")
# A command word (lowercase), and the flag forms that carry a password after it on the same line.
_COMMAND_FLAGS = (
    ("curl", (_CURL_USER,)),
    ("mysql", (_GLUED_P, _SPACED_P)),  # also mysqldump, mysqladmin
    ("mariadb", (_GLUED_P, _SPACED_P)),
    ("sshpass", (_SPACED_P,)),
    ("login", (_SPACED_P,)),  # docker/podman/helm registry/oc/cf/az login -p PASS
)


def _command_edits(text: str, lowered: str) -> Iterator[Edit]:
    """Passwords given as command-line flags: ``curl -u user:PASS``, ``mysql -pPASS``, ``sshpass -p PASS``,
    ``docker login -p PASS``. Only the rest of a line that names the command is searched, so
    ``docker run -u 1000:1000`` and ``ssh -p 2222`` stay (and ordinary text costs a substring test)."""
    for command, patterns in _COMMAND_FLAGS:
        for start, end in _command_lines(lowered, command):
            for pattern in patterns:
                for m in pattern.finditer(text, start, end):
                    pw = m["pw"]
                    if (
                        _is_flag(text, m.start())
                        and len(pw) >= _MIN_SECRET_LEN
                        and not _is_placeholder(pw)
                        and not pw.isdigit()
                    ):
                        yield m.start("pw"), m.end("pw"), REDACTED


_LINE_END = re.compile(r"\n|\\n")


def _command_lines(lowered: str, command: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the rest of each line after ``command`` (a JSON-escaped line break ends a line too)."""
    pos = lowered.find(command)
    while pos >= 0:
        line_end = _LINE_END.search(lowered, pos)  # real or JSON-escaped
        end = line_end.start() if line_end else len(lowered)
        yield pos + len(command), end
        pos = lowered.find(command, end)


def _is_flag(text: str, start: int) -> bool:
    """A ``-x`` at ``start`` is a command-line flag, not the middle of a word (``pre-processing``)."""
    return start == 0 or text[start - 1] in " \t\n'\"="


_NETRC_SPACE = r"(?:[ \t\r\n]|\\[nrt])+"  # real or JSON-escaped
_NETRC = re.compile(rf"login{_NETRC_SPACE}[^\s\"\\]+{_NETRC_SPACE}password{_NETRC_SPACE}(?P<pw>[^\s\"'\\]+)")


def _credential_file_edits(text: str, lowered: str) -> Iterator[Edit]:
    """``.pgpass`` lines (host:port:db:user:PASSWORD) and ``.netrc`` entries (machine h login u password P)."""
    for m in _PGPASS.finditer(text):
        pw = m["pw"]
        if _pgpass_host(text, m.start()) and len(pw) >= _MIN_SECRET_LEN and not _is_placeholder(pw):
            yield m.start("pw"), m.end("pw"), REDACTED
    if "machine" in lowered:
        for m in _NETRC.finditer(lowered):
            if _starts_word(lowered, m.start()) and not _is_placeholder(text[m.start("pw") : m.end("pw")]):
                yield m.start("pw"), m.end("pw"), REDACTED


def _pgpass_host(text: str, end: int) -> bool:
    """The word before ``end`` (from whitespace, a JSON-escaped line break, a quote, or the text start) is a
    host name: a pgpass line, or one quoted inline."""
    floor = max(0, end - _MAX_HOST - 2)
    starts = [i + len(b) for b in (" ", "\t", "\n", "\\n", '"', "'", "`") if (i := text.rfind(b, floor, end)) >= 0]
    if not starts and floor > 0:
        return False  # no word start within a host name's length
    host = text[max(starts, default=0) : end]
    return bool(host) and ":" not in host and "\\" not in host


def _aws_secret_edits(text: str, lowered: str) -> Iterator[Edit]:
    """Bare AWS secret access keys: 40 base64 characters alone on a line, or in a field of the credentials
    CSV file AWS hands out (it has a ``Secret access key`` column), mixed like generated keys."""
    first = _AWS_SECRET_LINE.match("\n" + text.split("\n", 1)[0])  # the first line has no newline before it
    if first is not None and _looks_like_aws_secret(first["key"]):
        yield first.start("key") - 1, first.end("key") - 1, REDACTED
    patterns: tuple[re.Pattern[str], ...] = (_AWS_SECRET_LINE, _AWS_SECRET_ESCAPED_LINE)
    if "secret access key" in lowered:
        patterns += (_AWS_SECRET_FIELD,)
    for pattern in patterns:
        for m in pattern.finditer(text):
            if _looks_like_aws_secret(m["key"]):
                yield m.start("key"), m.end("key"), REDACTED


def _looks_like_aws_secret(token: str) -> bool:
    """Random base64: upper and lower case letters, and digits or ``+``/``/``. A git SHA (hex) is not one."""
    has_upper = any(c.isupper() for c in token)
    has_lower = any(c.islower() for c in token)
    digits = sum(c.isdigit() for c in token)
    symbols = sum(c in "+/" for c in token)
    if not (has_upper and has_lower) or (digits < 2 and symbols == 0):
        return False
    return not token.startswith("/") and "//" not in token
