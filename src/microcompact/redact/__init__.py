"""Deterministic secret redaction for text that leaves the process (summarizer requests, summaries).

Every secret becomes ``[REDACTED]``; the same input always gives the same output, and redacting twice
changes nothing. The rules, applied in this order:

1. PEM private key blocks, BEGIN line to END line, become one ``[REDACTED]`` (a block cut off before its
   END line is redacted through its last base64 line).
2. Tokens recognisable by their prefix, wherever they appear: OpenAI ``sk-``/``sk-proj-``/``sk-svcacct-``,
   Anthropic ``sk-ant-``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab
   ``glpat-``, Hugging Face ``hf_``, npm ``npm_``, AWS access key IDs (``AKIA``/``ASIA``...), Slack ``xox?-``/
   ``xapp-``, Google ``AIza``, Stripe ``sk_live_``/``rk_live_``/``sk_test_``..., SendGrid ``SG.x.y``,
   DigitalOcean ``dop_v1_``, Shopify ``shpat_``, Twilio ``SK`` + 32 hex, PyPI ``pypi-AgE``, Mailgun
   ``key-`` + 32 hex, Databricks ``dapi``, Square ``sq0atp-``/``sq0csp-``, age ``AGE-SECRET-KEY-1``,
   Telegram bot tokens (``123456789:AA...``), JWTs (``eyJ...eyJ...sig``), and Docker's
   ``"auth": "<base64 of user:password>"``.
   Prefixes that also start ordinary words (``sk-``, ``hf_``, ``key-``) additionally need the body to look random
   (letters and digits mixed). Webhook URLs (Slack ``hooks.slack.com/services/...``, Discord
   ``discord(app).com/api/webhooks/ID/...``) keep their host and route and lose the rest; signed-URL
   parameters (``sig=``, ``X-Amz-Signature=``...) lose their value.
3. Passwords in URLs: ``scheme://user:PASSWORD@host`` keeps scheme, user and host.
4. ``Authorization:`` / ``Proxy-Authorization:`` headers keep the scheme word (``Bearer``, ``Basic``...)
   and lose the credential; a lone ``Bearer <token>`` loses the token when it looks random.
5. Assignments whose key name ends in a secret word (``password``, ``passwd``, ``pwd``, ``passphrase``,
   ``secret``, ``token``, ``credential(s)``, ``api_key``/``apikey``/``api-key``, ``access_key``,
   ``secret_key``, ``private_key``, ``signing_key``, ``encryption_key``, ``master_key``, ``AccountKey``,
   npm's ``_auth``), and any upper-case environment-style name ending in ``_KEY`` (``STRIPE_WEBHOOK_KEY``)
   followed by ``=``, ``:``, ``:=`` or ``=>`` — env files, shell, JSON, YAML, HTTP headers, code — and
   command-line flags such as ``--password VALUE``. The key name and quotes are kept, the value is
   redacted, however long. Names merely containing such a word (``password_field``, ``token_count``,
   ``max_tokens``) do not count. Rules 4 and 5 ignore case. An unquoted value ends at whitespace, a quote,
   ``,()[]{}<>|`` or a backslash; at ``&`` or ``;`` it ends only when the next ``name=`` parameter
   follows (``password=abc&def`` is one password, ``?token=abc&page=2`` keeps ``page=2``).
6. Credentials in commands and credential files: ``curl -u user:PASS``, ``mysql -pPASS``, ``sshpass -p``,
   ``docker login -p`` (the command must be on the same line, so ``docker run -u 1000:1000`` stays),
   ``.pgpass`` lines (``host:port:db:user:PASS``; quoted, before a shell redirect, ``\\:`` escapes), ``.netrc``
   entries (``machine h login u password P``).
7. A bare AWS secret access key: 40 base64 characters alone on a line (or in the credentials CSV AWS hands
   out), mixing upper and lower case with digits or ``+``/``/``; hex-only strings such as git SHAs stay.

Rule 5 keeps values that are not secrets readable, because transcripts are mostly code:

* quoted values shorter than 4 characters, blank, placeholders or references (``${VAR}``, ``$VAR``,
  ``{{ var }}``, ``{name}``, ``<your-key>``, ``%s``, ``***``, ``xxxx``, ``...``), and f-strings with
  ``{...}`` fields;
* unquoted values shorter than 4 characters, placeholders, and code: dotted names (``form.password``),
  calls and subscripts (``get_token(``, ``tokens[-1]``), literals and keywords (``None``, ``null``,
  ``true``, ``await``...), type names (``str``, ``Optional``, and capitalised class names after ``:``
  that name what they hold, such as ``Token`` or ``SecretStr``; ``Password: Swordfish`` is redacted),
  identifiers passed on as call arguments unless they look random (``login(password=user_pass)``), identifiers that
  repeat the secret word as a snake_case or camelCase part (``api_key=api_key``,
  ``password=new_password``), filesystem paths (``PWD=/home/me``; under a password or secret name a
  one-segment or random-looking path is a password: ``password=/Xk9pQz2``), and integers of up to 6 digits under
  names that are not password-like (``eos_token=2``). In environment-style assignments (``NAME=value``
  with an upper-case name) values are data: dotted values and one-segment paths are redacted there.

An unquoted number redacted after a quoted key (``"password": 123456``) becomes a quoted
``"[REDACTED]"`` so JSON stays valid; everywhere else the replacement sits inside existing quotes or
replaces bare text. Every rule is linear in the input (no rule rescans the text from each position; a
megabyte of adversarial input takes well under a second); rarer formats sit behind a substring test, so
ordinary text pays little for them.

Text that escapes its slashes (JSON from PHP, Java, some loggers: ``postgres:\\/\\/u:PW@h``) is also read
with plain slashes, and what the rules find there is hidden in the escaped spelling. While a session's
:class:`~microcompact.redact.secret_memory.SecretMemory` is active, the values found are remembered and later
bare mentions of them are hidden too (see that module).

This module is the entry (texts, messages, the escaped reading, the memory); the rules live beside it:
``shapes`` (1-3), ``context`` (4, 5 and signed URLs), ``commands`` (6, 7), their
patterns in ``patterns`` (modules of this package).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from ..keys import TOKENS_KEY
from ..textmemo import MEMO_CHARS, SHORT_TEXT_CHARS, TextMemo
from .commands import Edit
from .context import _context_edits
from .patterns import REDACTED
from .secret_memory import SecretMemory, active_memory, remembering
from .shapes import _substitute_tokens

__all__ = ["REDACTED", "error_text", "redact_message", "redact_text", "remember_secrets", "remembering"]


def redact_text(text: str) -> str:
    """``text`` with every secret the module docstring describes replaced by ``[REDACTED]``; while a
    session's :class:`~microcompact.redact.secret_memory.SecretMemory` is active (:func:`remembering`), the values
    found are remembered and every value it remembers is hidden too, bare mentions included."""
    if not text:
        return text
    out, found = _redact_all(text)
    memory = active_memory()
    if memory is not None:
        memory.remember(found)
        out = memory.hide(out, REDACTED)
    return out


def _redact_all(text: str) -> tuple[str, list[str]]:
    """The rules on ``text`` (and on its reading with plain slashes): the text redacted, the values found."""
    if len(text) <= SHORT_TEXT_CHARS:
        return _read_all(text)
    out, found = _long_readings(text)
    return out, list(found)


# A message's text is read at its append (its secrets remembered) and again when a fold redacts it for the
# summarizer, and a re-sent history brings it back: the rules' answer for the most recent long texts is kept
# (the rules depend on the text alone; see microcompact.textmemo).


def _read_all(text: str) -> tuple[str, list[str]]:
    slashed: list[str] = []
    if "\\/" in text:  # JSON that escapes slashes: the rules read it with plain slashes
        slashed = _redact_found(_ESCAPES.sub("\\\\", _ESCAPED_SLASH.sub("/", text)))[1]
        text = _hide_escaped(text, slashed)
    out, found = _redact_found(text)
    return out, found + slashed


def _read_all_kept(text: str) -> tuple[str, tuple[str, ...]]:
    out, found = _read_all(text)
    return out, tuple(found)


_long_readings: TextMemo[tuple[str, tuple[str, ...]]] = TextMemo(_read_all_kept, MEMO_CHARS)


def _redact_found(text: str) -> tuple[str, list[str]]:
    """The redacted text and the values the rules removed (in order; a value may repeat)."""
    found: list[str] = []
    text = _substitute_tokens(text, found)
    edits = _context_edits(text)
    found += [text[start:end] for start, end, _ in edits]
    return _apply(text, edits), found


# JSON that escapes slashes writes ``\/``; inside another JSON string that becomes ``\\\/``. The rules
# read such text with plain slashes (a backslash before a slash is never part of a secret the rules know).
_ESCAPED_SLASH = re.compile(r"\\+/")
_ESCAPES = re.compile(r"\\\\+(?=[nrt\"])")  # a doubly escaped line break or quote, read as singly escaped
_WORD_CHAR = "A-Za-z0-9"


def _hide_escaped(text: str, values: list[str]) -> str:
    """``text`` without ``values`` spelled with escaped slashes (``a\\/b`` for ``a/b``), as whole words."""
    spelled = sorted({v for v in values if REDACTED not in v}, key=len, reverse=True)
    if not spelled:
        return text
    alternatives = "|".join(r"\\*/".join(re.escape(part) for part in v.split("/")) for v in spelled)
    pattern = re.compile(rf"(?:(?<![{_WORD_CHAR}])|(?<=\\[ntr]))(?:{alternatives})(?![{_WORD_CHAR}])")
    return pattern.sub(REDACTED, text)


def error_text(exc: BaseException, limit: int = 200) -> str:
    """An exception's message as a log line or a record may carry it: redacted, then cut to ``limit``
    characters (cut after, so a secret cut in half is still found). A server's error may quote the request or
    a header; a summarizer's, what it was sent."""
    return redact_text(str(exc))[:limit]


def redact_message(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``message`` with its text content and tool-call arguments redacted.

    The input is never mutated. A cached token count (``_tokens``) is dropped from the copy because the
    text it counted has changed.
    """
    out = {k: v for k, v in message.items() if k != TOKENS_KEY}
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = redact_text(content)
    elif isinstance(content, list):
        out["content"] = [_redact_part(part) for part in content]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_redact_tool_call(tc) for tc in calls]
    return out


def remember_secrets(memory: SecretMemory, messages: Iterable[dict[str, Any]]) -> None:
    """Let ``memory`` learn the secrets of ``messages`` (a session's new messages, before any is summarized:
    a value a user message gave with its context is hidden when an assistant message repeats it bare)."""
    for message in messages:
        for text in _message_texts(message):
            if text:
                memory.remember(_redact_all(text)[1])


def _message_texts(message: dict[str, Any]) -> Iterator[str]:
    """The texts :func:`redact_message` redacts."""
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        args = function.get("arguments") if isinstance(function, dict) else None
        if args is not None:
            yield args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)


def _redact_part(part: Any) -> Any:
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return {**part, "text": redact_text(part["text"])}
    if isinstance(part, str):
        return redact_text(part)
    return part


def _redact_tool_call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    args = function.get("arguments")
    if args is not None and not isinstance(args, str):
        # Some frameworks hand arguments over as objects; summarizers read them as JSON text.
        args = json.dumps(args, ensure_ascii=False, default=str)
    if isinstance(args, str):
        function["arguments"] = redact_text(args)
    return {**call, "function": function}


def _apply(text: str, edits: list[Edit]) -> str:
    """Apply sorted edits; an edit overlapping an earlier one is dropped (two rules found one secret)."""
    if not edits:
        return text
    out: list[str] = []
    pos = 0
    for start, end, replacement in edits:
        if start < pos:
            continue
        out += [text[pos:start], replacement]
        pos = end
    out.append(text[pos:])
    return "".join(out)
