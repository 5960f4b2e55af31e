"""Capabilities and handles: what names a conversation to the recall tools, and what names a message in it.

A capability is 24 random hex digits (96 bits) made once per conversation and kept in its meta under
:data:`~microcompact.keys.RECALL_META`. It is a bearer capability, not an identity: whoever holds it reads that
conversation's folded originals and nothing else, and only that conversation's marker prints it.

A handle is ``m`` and a store row id (``m1042``): an absorbed original, or a marker (which stands for every
original it folded). Row ids are not secret; a handle is read only inside the conversation its capability
names, so another conversation's handle is refused like one that does not exist.
"""

from __future__ import annotations

import re
import secrets

from ..keys import RECALL_META
from ..store import SessionStore

TOKEN_HEX = 24
_TOKEN = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}")
_HANDLE = re.compile(r"m([0-9]{1,18})")
HANDLE_PREFIX = "m"


class ConversationError(ValueError):
    """A capability or handle that is malformed (one line naming it)."""


def new_token() -> str:
    return secrets.token_hex(TOKEN_HEX // 2)


def conversation_token(store: SessionStore, session_id: str) -> str:
    """The conversation's capability, made and stored on first need (one small meta write by the session's
    writer; every later call reads it back)."""
    held = store.session_meta(session_id).get(RECALL_META)
    if isinstance(held, str) and _TOKEN.fullmatch(held):
        return held
    token = new_token()
    store.update_meta(session_id, {RECALL_META: token})
    return token


def parse_token(text: str) -> str:
    """The capability ``text`` spells (case and surrounding quotes or spaces forgiven)."""
    token = _bare(text).lower()
    if not _TOKEN.fullmatch(token):
        raise ConversationError(f"conversation {_shown(text)} is not a capability: copy it from the summary's note")
    return token


def handle_of(row: int) -> str:
    return f"{HANDLE_PREFIX}{int(row)}"


def parse_handle(text: str) -> int:
    """The row id a handle names (``m1042``; a bare ``1042`` or ``#m1042`` is read the same)."""
    bare = _bare(text).lower().lstrip("#")
    if bare.isdigit():
        bare = HANDLE_PREFIX + bare
    found = _HANDLE.fullmatch(bare)
    if found is None:
        raise ConversationError(f"handle {_shown(text)} is not a handle: handles look like m1042")
    return int(found.group(1))


def _bare(text: str) -> str:
    return str(text).strip().strip("\"'`").strip()


def _shown(text: str, width: int = 40) -> str:
    """``text`` as an error quotes it: at most ``width`` characters, repr-quoted."""
    text = str(text)
    return repr(text if len(text) <= width else text[:width] + "…")
