"""Which conversation a request belongs to, kept apart per credential: the client's own session id when it
sends one, else a digest of its opening.

Order: ``X-Microcompact-Session`` (set by the user), ``X-Claude-Code-Session-Id`` (Claude Code sends it),
then ``ID@FINGERPRINT``; else ``API-FINGERPRINT-DIGEST``: a digest of the system prompt and the first user
message (they stay the same for the life of a conversation while everything after them grows), after the
*fingerprint* of the credential the request carries for its provider (:func:`credential_parts`). So two API
keys never share a stored conversation, even when their histories are byte for byte the same or they name
the same session id: one client replaying another's history, or sending another's session id, starts a
conversation of its own. Every key of one credential ends with its fingerprint (derived keys hold no ``@``;
a named one ends with ``@`` and it), so no key is two credentials' by construction. A named id that already
ends with the request's own ``@FINGERPRINT`` (the ``X-Microcompact-Session`` the proxy answered with, an
id from ``sessions list``) is that conversation: it is not suffixed twice.

The fingerprint is an HMAC-SHA-256 of the credential under a salt (:func:`load_salt`), 16 hex digits:
never the credential, and nothing a reader of the store, the logs or ``sessions list`` can test a guessed
key against without the salt. A request without any credential gets the fixed fingerprint
:data:`NO_CREDENTIAL`. :class:`SessionKeys` with ``salt=None`` (``--share-sessions-across-keys``) leaves
the fingerprint out: every key's identical history is one conversation again, and a named id is used as
it comes, the keys of earlier versions.

The salt is generated once, 32 random bytes as hex, in ``$MICROCOMPACT_HOME/session-salt`` (mode 0600),
and never rewritten. Every ``serve`` process on one store must derive the same keys, so they must read
the same salt: processes on one machine share ``$MICROCOMPACT_HOME``; on several machines (one PostgreSQL
store) copy that file into each one's ``$MICROCOMPACT_HOME``. A process with another salt keeps apart from
the others' conversations (it continues none of them, so nothing crosses between keys); ``serve`` prints
the salt's id (a digest of it, :func:`salt_id`) at startup to compare.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from ..config import home_dir
from ..identity import digest
from ..wire import Upstream
from .errors import BadRequest

SESSION_HEADERS = ("x-microcompact-session", "x-claude-code-session-id")
MAX_KEY_CHARS = 200
SALT_FILE = "session-salt"
SALT_BYTES = 32
FINGERPRINT_CHARS = 16
NO_CREDENTIAL = "nokey"  # the fingerprint of a request that carries no credential
# Each provider's credential, in the order its upstream reads it (every one present is part of it).
CREDENTIAL_HEADERS: dict[Upstream, tuple[str, ...]] = {
    Upstream.OPENAI: ("authorization", "api-key"),
    Upstream.ANTHROPIC: ("x-api-key", "authorization"),
    Upstream.GEMINI: ("x-goog-api-key", "authorization"),
}
# The upstreams that also read a key from the query string (Gemini's ``key`` parameter).
QUERY_KEY = frozenset({Upstream.GEMINI})
_SALT_TEXT = re.compile(r"[0-9a-f]{64}")
NAMED_SEPARATOR = "@"  # between a session id the client names and its credential's fingerprint
_FINGERPRINT = rf"[0-9a-f]{{{FINGERPRINT_CHARS}}}|{NO_CREDENTIAL}"
# API-FINGERPRINT-DIGEST and ID@FINGERPRINT (a branch adds ~N): the keys of a credential, and its fingerprint.
DERIVED_KEY = re.compile(rf"(?:{'|'.join(Upstream)})-({_FINGERPRINT})-[0-9a-f]{{20}}(?:~\d+)?")
NAMED_KEY = re.compile(rf".+{NAMED_SEPARATOR}({_FINGERPRINT})(?:~\d+)?", re.DOTALL)


class SaltError(ValueError):
    """The salt file cannot be read or created, or does not hold a salt (one line, naming the file)."""


def default_salt_path() -> Path:
    return home_dir() / SALT_FILE


def load_salt(path: Path | None = None) -> bytes:
    """The salt in ``path`` (default ``$MICROCOMPACT_HOME/session-salt``), created there first when missing:
    readable by its owner only, written whole under a temporary name and linked into place, so processes
    starting together all read the one that got there first."""
    path = path or default_salt_path()
    try:
        return _read_salt(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SaltError(f"cannot read the session salt {path}: {exc.strerror or exc}") from None
    try:
        _create_salt(path)
        return _read_salt(path)
    except OSError as exc:
        raise SaltError(f"cannot create the session salt {path}: {exc.strerror or exc}") from None


def _read_salt(path: Path) -> bytes:
    text = path.read_bytes().decode("ascii", "replace").strip()
    if not _SALT_TEXT.fullmatch(text):
        raise SaltError(
            f"the session salt {path} does not hold 64 hex digits; restore it (or remove it to start every "
            "conversation over)"
        )
    return bytes.fromhex(text)


def _create_salt(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(SALT_BYTES) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process got there first: its salt is the one
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def salt_id(salt: bytes) -> str:
    """What names a salt in the startup line (to compare processes' salts without showing them)."""
    return hashlib.sha256(b"microcompact session salt id\0" + salt).hexdigest()[:8]


def credential_parts(api: Upstream, headers: Mapping[str, str], query: str = "") -> list[bytes]:
    """The credential a request carries for ``api``: the values of its provider's credential headers present
    (OpenAI: ``Authorization``, Azure's ``api-key``; Anthropic: ``x-api-key``, ``Authorization``; Gemini:
    ``x-goog-api-key``, ``Authorization``, the ``key`` query parameter), distinct and sorted.

    A value, not where it came: one key is one credential in whichever header a client puts it (the
    ``anthropic`` SDK sends its ``api_key`` as a bearer token, curl and Claude Code as ``x-api-key``), so
    a count, a retry or a second client of one key all name the conversation its requests built."""
    values = {_token(headers[name]) for name in CREDENTIAL_HEADERS.get(api, ()) if headers.get(name)}
    if api in QUERY_KEY:
        values |= {value.strip() for name, value in parse_qsl(query, keep_blank_values=True) if name == "key"}
    return sorted(v.encode("utf-8", "surrogateescape") for v in values if v)


def _token(value: str) -> str:
    """A header's credential: a bearer token without its scheme, any other value as it is."""
    value = value.strip()
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else value


class SessionKeys:
    """Conversation keys for one proxy: its salt, or None when conversations are shared across keys."""

    def __init__(self, salt: bytes | None) -> None:
        self.salt = salt

    @property
    def shared(self) -> bool:
        return self.salt is None

    def fingerprint(self, api: Upstream, headers: Mapping[str, str], query: str = "") -> str | None:
        """The salted fingerprint of the request's credential (:data:`NO_CREDENTIAL` without one), None
        when keys share conversations."""
        if self.salt is None:
            return None
        parts = credential_parts(api, headers, query)
        if not parts:
            return NO_CREDENTIAL
        return hmac.new(self.salt, b"\0".join(parts), hashlib.sha256).hexdigest()[:FINGERPRINT_CHARS]

    def key(self, api: Upstream, headers: Mapping[str, str], query: str, key_material: Any) -> str:
        """The conversation key of a request (raises BadRequest for a session header it cannot use)."""
        named = client_session(headers)
        fingerprint = self.fingerprint(api, headers, query)
        if named is not None:
            return named if fingerprint is None else named_key(named, fingerprint)
        owner = f"{fingerprint}-" if fingerprint is not None else ""
        return f"{api}-{owner}{digest([api, key_material])[:20]}"


def client_session(headers: Mapping[str, str]) -> str | None:
    """The session id the client names in a session header, or None."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        value = value.strip()
        if not value or len(value) > MAX_KEY_CHARS or not value.isprintable():
            raise BadRequest(f"header {name}: expected 1 to {MAX_KEY_CHARS} printable characters")
        return value
    return None


def named_key(session_id: str, fingerprint: str) -> str:
    """The key of a session id the client names, for the credential with ``fingerprint``: ``ID@FINGERPRINT``,
    the id kept readable in front (an id already ending with that suffix is kept as it is)."""
    suffix = f"{NAMED_SEPARATOR}{fingerprint}"
    return session_id if session_id.endswith(suffix) and len(session_id) > len(suffix) else session_id + suffix


def fingerprint_of(session_id: str) -> str | None:
    """The credential fingerprint in a conversation key or session id of the proxy's (a branch's too), else
    None (a session the library or ``replay`` named, or one of keys shared across credentials)."""
    found = DERIVED_KEY.fullmatch(session_id) or NAMED_KEY.fullmatch(session_id)
    return found.group(1) if found else None


def session_key(headers: Mapping[str, str], api: Upstream, key_material: Any) -> str:
    """The key of earlier versions (no fingerprint): what ``--share-sessions-across-keys`` derives."""
    return SessionKeys(None).key(api, headers, "", key_material)


__all__ = [
    "NO_CREDENTIAL",
    "SaltError",
    "SessionKeys",
    "credential_parts",
    "default_salt_path",
    "fingerprint_of",
    "load_salt",
    "named_key",
    "salt_id",
    "session_key",
]
