"""The stored id of a session a client names, worked out here from the salt file as the README states it:
``ID@FINGERPRINT``, the fingerprint the first 16 hex digits of an HMAC-SHA-256 of the credential under the
salt, so a test checks the proxy's keys without asking the proxy for them."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path


def fingerprint(salt_file: Path, credential: str) -> str:
    """The fingerprint of one credential (a single API key; a bearer token without its scheme)."""
    salt = bytes.fromhex(salt_file.read_text(encoding="ascii").strip())
    return hmac.new(salt, credential.encode(), hashlib.sha256).hexdigest()[:16]


def named(session_id: str, salt_file: Path, credential: str) -> str:
    """The conversation key (and first branch's session id) of ``session_id`` sent with ``credential``."""
    return f"{session_id}@{fingerprint(salt_file, credential)}"


__all__ = ["fingerprint", "named"]
