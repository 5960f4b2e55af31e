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
:class:`~microcompact.secret_memory.SecretMemory` is active, the values found are remembered and later
bare mentions of them are hidden too (see that module).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .keys import TOKENS_KEY
from .redact_commands import _aws_secret_edits, _command_edits, _credential_file_edits, _is_placeholder, _starts_word
from .redact_patterns import (
    _ASSIGNMENT_KEY,
    _AUTH_HEADER,
    _BASE64_CHARS,
    _BEARER,
    _CHECKED_TOKENS,
    _CLASS_NAME,
    _COOKIE_ATTRIBUTES,
    _COOKIE_HEADER,
    _DOCKER_AUTH,
    _DOTTED,
    _ENV_KEY_NAME,
    _FLAG,
    _GUARDED_TOKENS,
    _IDENTIFIER,
    _LINE_BREAKS,
    _LITERALS,
    _MAX_NAME,
    _MIN_COOKIE_VALUE,
    _MIN_SECRET_LEN,
    _NAME_CHARS,
    _PASSWORD_NAME,
    _PATH,
    _PEM_BEGIN,
    _PEM_BODY,
    _PEM_END,
    _SECRET_WORD_AT_END,
    _SNAKE_PART,
    _STRIPE,
    _TOKENS,
    _TWILIO,
    _URL_PASSWORD,
    _URL_SIGNATURE,
    _URL_SIGNATURE_NAMES,
    _VALUE,
    _WEBHOOKS,
    REDACTED,
)
from .secret_memory import SecretMemory, active_memory, remembering

__all__ = ["REDACTED", "redact_message", "redact_text", "remember_secrets", "remembering"]

Edit = tuple[int, int, str]  # replace text[start:end] with the string


def redact_text(text: str) -> str:
    """``text`` with every secret the module docstring describes replaced by ``[REDACTED]``; while a
    session's :class:`~microcompact.secret_memory.SecretMemory` is active (:func:`remembering`), the values
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
    slashed: list[str] = []
    if "\\/" in text:  # JSON that escapes slashes: the rules read it with plain slashes
        slashed = _redact_found(_ESCAPES.sub("\\\\", _ESCAPED_SLASH.sub("/", text)))[1]
        text = _hide_escaped(text, slashed)
    out, found = _redact_found(text)
    return out, found + slashed


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


# --------------------------------------------------------------------------- rules


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
