"""Which conversation a request belongs to: the client's own session id when it sends one, else a digest.

Order: ``X-Microcompact-Session`` (set by the user), ``X-Claude-Code-Session-Id`` (Claude Code sends it),
else a digest of the system prompt and the first user message, which stay the same for the life of a
conversation while everything after them grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..identity import digest
from .errors import BadRequest

SESSION_HEADERS = ("x-microcompact-session", "x-claude-code-session-id")
MAX_KEY_CHARS = 200


def session_key(headers: Mapping[str, str], api: str, key_material: Any) -> str:
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        value = value.strip()
        if not value or len(value) > MAX_KEY_CHARS or not value.isprintable():
            raise BadRequest(f"header {name}: expected 1 to {MAX_KEY_CHARS} printable characters")
        return value
    return f"{api}-{digest([api, key_material])[:20]}"
