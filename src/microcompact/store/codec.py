"""Messages as column values and back, and the text full-text search sees of them.

A stored message is ``role`` + ``content`` (JSON, NULL when the message had no content key) + ``extra``
(JSON: every other key except the store's own bookkeeping) + ``body`` (plain search text). Text that
cannot be stored (lone surrogates; NUL in PostgreSQL text) is replaced, never rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from ..keys import ABSORBED_BY_KEY as ABSORBED_BY_KEY  # the store's keys, where its modules import them
from ..keys import META_KEY, TOKENS_KEY
from ..keys import POS_KEY as POS_KEY
from ..keys import ROW_KEY as ROW_KEY
from ..keys import STATE_KEY as STATE_KEY
from ..messages import Message, marker_kind
from ..render import message_text

# Keys never written to ``extra``: stored in their own columns, or the store's own bookkeeping.
_NOT_EXTRA = frozenset({"role", "content", TOKENS_KEY, POS_KEY, ROW_KEY, STATE_KEY, ABSORBED_BY_KEY})
# Search text kept per message: head and tail of very large outputs (PostgreSQL caps a tsvector at 1 MB).
BODY_HEAD_CHARS = 60_000
BODY_TAIL_CHARS = 40_000


def _json(value: Any, what: str) -> str:
    """Compact JSON; text that is not valid Unicode (lone surrogates) is stored with '?' in their place."""
    try:
        out = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serializable: {exc}") from None
    return _valid_utf8(out)


def stored_form(message: Message) -> Message:
    """``message`` as the store hands it back once written (lone surrogates as ``?``, tuples as lists),
    without the store's own bookkeeping: what a check of stored rows against their source compares."""
    loaded: Message = _loads(_json(message, "message"))
    return loaded


def _valid_utf8(text: str) -> str:
    """``text`` with lone surrogates (not encodable, so not storable) replaced by ``?``."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _clean_text(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", " ")  # PostgreSQL text cannot hold NUL
    return _valid_utf8(text)


def search_text(message: Message) -> str:
    """What full-text search sees of a message: content text, tool call names and arguments, ``name``."""
    text = message_text(message, tool_calls=True, name=True)
    if len(text) > BODY_HEAD_CHARS + BODY_TAIL_CHARS:
        text = text[:BODY_HEAD_CHARS] + "\n…\n" + text[-BODY_TAIL_CHARS:]
    return _clean_text(text)


class _Encoded:
    """One message as column values."""

    __slots__ = ("body", "content", "extra", "is_marker", "kind", "role")

    def __init__(self, message: Message, where: str) -> None:
        if not isinstance(message, dict):
            raise ValueError(f"{where}: expected a message dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where}: a message needs a role")
        self.role = role
        self.content = _json(message["content"], f"{where}: content") if "content" in message else None
        extra = {k: v for k, v in message.items() if k not in _NOT_EXTRA}
        self.extra = _json(extra, f"{where}: metadata") if extra else "{}"
        self.body = search_text(message)
        self.kind = marker_kind(message)
        self.is_marker = self.kind is not None


def _loads(text: str) -> Any:
    """Stored JSON back to values: orjson (a process continuing a session reloads all of it), the standard
    library for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _decode(
    row_id: int, position: int, role: str, content: str | None, extra: str | None, is_marker: Any, kind: str | None
) -> Message:
    msg: Message = {"role": role}
    if content is not None:
        msg["content"] = _loads(content)
    if extra and extra != "{}":
        msg.update(_loads(extra))
    if is_marker:
        meta = msg.get(META_KEY)
        msg[META_KEY] = {**meta, "marker": kind} if isinstance(meta, dict) else {"marker": kind}
    msg[POS_KEY] = int(position)
    msg[ROW_KEY] = int(row_id)
    return msg


def _row_of(message: Any, where: str) -> int:
    row = message.get(ROW_KEY) if isinstance(message, dict) else None
    if not isinstance(row, int) or isinstance(row, bool):
        raise ValueError(f"{where} was never stored (it has no {ROW_KEY}): flush it with append() first")
    return row


def _timestamp(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    text = str(value)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORD = re.compile(r"\w", re.UNICODE)


def _query_terms(query: str) -> list[str]:
    """Search terms: "quoted phrases" and bare words; terms without a letter or digit are dropped."""
    out = []
    for phrase, word in _TERM.findall(query or ""):
        term = (phrase or word).strip()
        if term and _WORD.search(term):
            out.append(term)
    return out


def _snippet(body: str, terms: Sequence[str], width: int = 80) -> str:
    """A window of ``body`` around the first term found, the term in brackets (LIKE fallback)."""
    low = body.lower()
    for t in terms:
        i = low.find(t.lower())
        if i >= 0:
            start, end = max(0, i - width // 2), min(len(body), i + len(t) + width // 2)
            text = body[start:i] + "[" + body[i : i + len(t)] + "]" + body[i + len(t) : end]
            return ("…" if start else "") + " ".join(text.split()) + ("…" if end < len(body) else "")
    return " ".join(body[:width].split())
