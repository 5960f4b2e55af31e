"""The pattern table of :mod:`microcompact.redact`: every compiled pattern and word list its rules use.

Kept apart from the rules so that the module reading the text stays short and this table can be read
(and extended) in one place; the module docstring of :mod:`microcompact.redact` says what each rule
catches and why.
"""

from __future__ import annotations

import re

# Speed: Python's ``re`` scans fast only for patterns that start with a literal (or a few literal words),
# so every scanning pattern below does or is guarded by a substring test, and case-insensitive rules
# search a lowercased copy of the text (same indexes) instead of using re.IGNORECASE.

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# The tail of a key without its BEGIN line (``tail key.pem``): base64 lines right before an END line, found
# by walking back from each END line (a forward regex tried every line start: quadratic on base64 text).
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_LINE_BREAKS = ("\\r\\n", "\\n", "\r\n", "\n")  # escaped (JSON text) or real
# A block without END line (output cut short): its base64 and header lines, real or \n-escaped.
_PEM_BODY = re.compile(r"(?:(?:\r?\n|\\(?:r\\)?n)(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\n\\]*)(?=\r?\n|\\[rn]|$|\"))*")

_TOKENS = (
    re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{40,}"),
    re.compile(r"glpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"npm_[A-Za-z0-9]{36,}"),
    re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"xapp-[A-Za-z0-9-]{10,}"),
    re.compile(r"AIza[0-9A-Za-z_-]{35}"),
    re.compile(r"whsec_[A-Za-z0-9]{24,}"),
    re.compile(r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),  # SendGrid
    re.compile(r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),  # Shopify
    re.compile(r"pypi-AgE[A-Za-z0-9_-]{50,}"),  # PyPI upload tokens
    re.compile(r"dapi[0-9a-f]{32}(?![0-9a-f])"),  # Databricks
    re.compile(r"sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}"),  # Square
    re.compile(r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),  # age private keys
)
# Rarer formats, each behind a substring test (a pattern that starts with a lookbehind scans slowly).
_GUARDED_TOKENS = (
    # A JWT starts a word: scanning from every ``eyJ`` inside one long run would be quadratic.
    ("eyJ", re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}")),
    ("_v1_", re.compile(r"do[por]_v1_[a-f0-9]{64}")),  # DigitalOcean ("do" alone starts too many words)
    (":AA", re.compile(r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}")),  # Telegram bot tokens
)
# Docker's config.json keeps ``"auth": "<base64 of user:password>"``; "auth" alone is too common a key,
# so the value must decode to a user:password pair.
_DOCKER_AUTH = re.compile(r"auth\\?\"[ \t]*:[ \t]*\\?\"(?P<value>[A-Za-z0-9+/]{8,}={0,2})\\?\"")  # or JSON-escaped
# Webhook URLs are credentials in themselves: the host and route stay, the rest of the path goes.
_WEBHOOKS = (
    (
        "hooks.slack.com",
        re.compile(r"(?P<keep>hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<tail>[\w/-]+)", re.A),
    ),
    ("/api/webhooks/", re.compile(r"(?P<keep>discord(?:app)?\.com/api/webhooks/[0-9]+/)(?P<tail>[A-Za-z0-9_-]+)")),
)
# Signed-URL query parameters (Azure SAS, S3 and GCS presigned URLs).
_URL_SIGNATURE = re.compile(r"sig(?:nature)?=(?P<value>[^&\s'\"#<>\\]+)")
_URL_SIGNATURE_NAMES = ("?sig=", "&sig=", "?signature=", "&signature=", "-amz-signature=", "-goog-signature=")
# Twilio API key SIDs: ``SK`` and 32 hex digits, as a whole word.
_TWILIO = re.compile(r"SK[0-9a-f]{32}(?![A-Za-z0-9])")
# A bare AWS secret access key: 40 base64 characters standing alone (line, CSV field, quotes). Hex-only
# strings (git SHAs) and single-case words are not keys; see _looks_like_aws_secret.
# Patterns start with a literal (the newline or comma before the key) because those scan fast.
_AWS_SECRET_LINE = re.compile(r"\n[ \t]*(?P<key>[A-Za-z0-9+/]{40})(?=[ \t]*\r?(?:\n|$))")
_AWS_SECRET_ESCAPED_LINE = re.compile(r"\\n[ \t]*(?P<key>[A-Za-z0-9+/]{40})(?=[ \t]*(?:\\[rn]|\"|$))")  # JSON text
_AWS_SECRET_FIELD = re.compile(r",(?P<key>[A-Za-z0-9+/]{40})(?=,|\r?\n|\\[rn]|\"|$)")
# ``.pgpass`` lines: host:port:database:user:password.
_PGPASS = re.compile(  # the password ends the line (before a closing quote or a shell redirect); \: escapes
    r":(?:[0-9]{1,5}|\*):[^:\s\"\\]+:[^:\s\"\\]+:(?P<pw>(?:[^\s\"\\]|\\[:\\])+?)"
    r"(?=['`]?[ \t]*(?:\r?\n|\\[rn]|\"|$|[>|]))"
)  # host checked apart
_MAX_HOST = 255
_STRIPE = re.compile(r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")
# Prefixes that also start ordinary words: the body must look random and the prefix start a word.
_CHECKED_TOKENS = (
    re.compile(r"sk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"hf_[A-Za-z0-9]{30,}"),
    re.compile(r"key-[0-9a-z]{32}(?![0-9A-Za-z])"),
)  # the last: Mailgun

_URL_PASSWORD = re.compile(r"(?P<head>://[^\s:/@'\"<>]{0,128}:)(?P<pw>/?[^\s/'\"<>]{1,256})(?=@[^\s@/'\"<>])")

# The rules below run on the lowercased text.
_AUTH_HEADER = re.compile(
    r"authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?[ \t]*"
    r"(?>(?:(?:bearer|basic|token|digest|apikey|negotiate)[ \t]+)?)"
    r"(?P<cred>[a-z0-9._~+/:-]{6,}=*)"
)
_BEARER = re.compile(r"bearer[ \t]+(?P<cred>[a-z0-9._~+/-]{16,}=*)")
# Cookie and Set-Cookie headers: every cookie value of 8 characters or more is a credential (session ids,
# auth tokens); attributes (Path, Expires, ...) and short preferences (theme=dark) stay.
_COOKIE_HEADER = re.compile(r"(?<![a-z0-9_-])(?:set-)?cookie(?:\\?[\"'])?[ \t]*:[ \t]*(?P<pairs>[^\r\n\"'\\]{1,8192})")
_MIN_COOKIE_VALUE = 8
_COOKIE_ATTRIBUTES = frozenset({"path", "domain", "expires", "max-age", "samesite", "priority", "partitioned"})
_SECRET_WORD = (
    r"(?:password|passwd|passphrase|pwd|secret|token|credentials?"
    r"|api[_-]?key|(?:access|secret|private|signing|encryption|master|account)[_-]?key|^_auth)"
)
_SECRET_WORD_AT_END = re.compile(_SECRET_WORD + "$")
# ``STRIPE_WEBHOOK_KEY=``: any upper-case (environment-style) name ending in ``_KEY`` holds a secret.
_ENV_KEY_NAME = re.compile(r"[A-Z0-9_]*_KEY")
_SEPARATOR = r"(?:\\?[\"'])?\]?[ \t]*(?::=|=>|=(?![=~>])|:(?![:/\\]))[ \t]*"
# Finds the last word of a candidate key name; the whole name is then checked against _SECRET_WORD_AT_END.
_ASSIGNMENT_KEY = re.compile(
    r"(?:password|passwd|passphrase|pwd|secret|token|credentials?|key|_auth)(?P<sep>" + _SEPARATOR + ")"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
_MAX_NAME = 64
_VALUE = re.compile(
    r"(?P<prefix>[rbfuRBFU]{1,2})?(?P<vq>\\?[\"'`])(?P<quoted>(?:[^\\\n]|\\.)*?)(?P=vq)"
    r"|(?P<bare>[^\s'\"`,;()\[\]{}<>&\\|]+)(?P<after>[(\[,)]?)"
)
_FLAG = re.compile(
    r"--(?:[a-z0-9]+-){0,4}(?:password|passwd|passphrase|token|secret|api-?key)[ \t]+"
    r"(?P<vq>[\"']?)(?P<value>[^\s\"'-][^\s\"']*)(?P=vq)"
)

_PASSWORD_NAME = re.compile(r"(?:password|passwd|passphrase|pwd)$")
_LITERALS = frozenset(
    "none null nil true false undefined nan yes no on off".split()
    + "str string bytes int integer bool boolean number any object list dict optional secretstr".split()
    + "await async yield lambda function typeof self this".split()
)
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*\)|\{\{.*\}\}|(?:\{[^{}]*\})+|<[^<>]+>|%\(?\w*\)?[sd]"
    r"|[*xX.•_-]{3,}|\[REDACTED\]"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)+")
_CLASS_NAME = re.compile(r"[A-Z][A-Za-z]*")
_PATH = re.compile(r"(?:/|~/|\./|\.\./)[A-Za-z0-9_./~-]*")
_SNAKE_PART = re.compile(r"[a-z0-9]+|[A-Z][a-z0-9]*|[A-Z0-9]+(?![a-z])")
_MIN_SECRET_LEN = 4
REDACTED = "[REDACTED]"
