"""The proxy's side: when the client's request lists the recall tools, its markers say how to reach them.

The client lists the tools of every MCP server it runs in the request's ``tools`` (each wire spells them in
its own shape: ``{"name", "description"}`` at some depth). A tool of ``microcompact mcp`` is one whose
description carries :data:`TOOL_TAG` and whose name ends with ``recall`` or ``expand`` after a separator, or
is that word (Claude Code and Codex call them ``mcp__<server>__recall``; Gemini CLI ``recall`` or
``mcp_<server>_recall``): the note names them as the client does. Claude Code may instead *defer* them: their
names alone, one per line, in a system message, declared once the model loads them (``ToolSearch``); those
count when the server's name holds the tag (``mcp__microcompact__recall``). Without both tools no marker
changes.

The note is the same on every request of a conversation until its marker changes (capability and handle are
stable), so it stays in the cached prefix. The capability is made once per conversation and kept in its meta;
this process remembers it per session id (bounded), so a request pays no store read for it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..keys import ROW_KEY
from ..messages import Message, is_marker, with_recall_note
from ..store import SessionStore, StoreError
from .conversation import conversation_token, handle_of

log = logging.getLogger("microcompact")

TOOL_TAG = "microcompact"  # in both tools' descriptions (``stdio``): how a request's tools are recognised
# The tools' descriptions, which ``stdio`` serves: here, beside the tag, so the proxy's side and its tests
# never import the mcp SDK.
RECALL_DESCRIPTION = (
    f"[{TOOL_TAG}] Search the originals folded out of this conversation's context (tool outputs, earlier "
    "replies) for identifiers or words: paths, symbols, ids, error text. Returns the best matches, each with a "
    "handle and an excerpt. `conversation` is the value given in the compaction summary's note."
)
EXPAND_DESCRIPTION = (
    f"[{TOOL_TAG}] Read a folded original of this conversation whole (redacted, bounded): a handle from recall, "
    "or the summary's own handle for the list of what it folded. `conversation` is the value given in the "
    "compaction summary's note."
)
MAX_TOOL_DEPTH = 4
REMEMBERED_SESSIONS = 4096
_ENDS = {word: re.compile(rf"(?:^|[_.\-]){word}$") for word in ("recall", "expand")}
_DEFERRED = re.compile(rf"^(mcp__[\w-]*{TOOL_TAG}[\w-]*__)(recall|expand)$", re.MULTILINE)


@dataclass(frozen=True)
class RecallToolNames:
    """The two tools as the client calls them."""

    recall: str
    expand: str


def recall_tool_names(body: dict[str, Any]) -> RecallToolNames | None:
    """The recall tools the request lists (declared in ``tools``, or named in a deferred-tool list), or None
    unless it lists both."""
    found: dict[str, str] = {}
    for name, description in _declared(body.get("tools"), 0):
        if TOOL_TAG not in description:
            continue
        for word, pattern in _ENDS.items():
            if pattern.search(name):
                found.setdefault(word, name)
    if "recall" in found and "expand" in found:
        return RecallToolNames(found["recall"], found["expand"])
    return _deferred(body)


def _deferred(body: dict[str, Any]) -> RecallToolNames | None:
    """Both tools named, one per line, in the request's system text (Claude Code defers MCP tools: it lists
    their names in a system message and declares them only once the model loads them). Names carry no
    description there, so the server's name must hold :data:`TOOL_TAG` (``mcp__microcompact__recall``)."""
    texts = [_text(body.get("system"))]
    messages = body.get("messages")
    if isinstance(messages, list):
        texts += [_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    for text in texts:
        if TOOL_TAG not in text:
            continue
        prefixes: dict[str, set[str]] = {}
        for found in _DEFERRED.finditer(text):
            prefixes.setdefault(found.group(1), set()).add(found.group(2))
        for prefix, words in sorted(prefixes.items()):
            if words == {"recall", "expand"}:
                return RecallToolNames(prefix + "recall", prefix + "expand")
    return None


def _text(value: Any) -> str:
    """The text of a system prompt or message content: a string, or the ``text`` of its blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _declared(value: Any, depth: int) -> Iterator[tuple[str, str]]:
    """Every ``(name, description)`` pair of strings in the request's tools, at any wire's depth."""
    if depth > MAX_TOOL_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            yield from _declared(item, depth + 1)
    elif isinstance(value, dict):
        name, description = value.get("name"), value.get("description")
        if isinstance(name, str) and isinstance(description, str):
            yield name, description
        for item in value.values():
            if isinstance(item, (list, dict)):
                yield from _declared(item, depth + 1)


class RecallNotes:
    """Markers that name the recall tools, for the requests that list them (one per proxy process)."""

    def __init__(self, remembered: int = REMEMBERED_SESSIONS) -> None:
        self._tokens: OrderedDict[str, str] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def annotate(
        self, body: dict[str, Any], store: SessionStore | None, session_id: str, view: Sequence[Message]
    ) -> list[Message]:
        """``view`` with each stored marker naming the tools, when the request lists them; else ``view``."""
        tools = recall_tool_names(body)
        return list(view) if tools is None else self.named(tools, store, session_id, view)

    def named(
        self, tools: RecallToolNames, store: SessionStore | None, session_id: str, view: Sequence[Message]
    ) -> list[Message]:
        """``view`` with each stored marker naming ``tools`` (the library's switch: a caller that registered the
        tools under these names); ``view`` unchanged without a store or a stored marker."""
        if store is None or not any(is_marker(m) and ROW_KEY in m for m in view):
            return list(view)
        try:
            token = self._token(store, session_id)
        except StoreError as exc:  # the request goes out without the note; the next one tries again
            log.warning("recall tools: cannot keep conversation %r's capability: %s", session_id, exc)
            return list(view)
        return [
            with_recall_note(m, tools.recall, tools.expand, token, handle_of(m[ROW_KEY]))
            if is_marker(m) and ROW_KEY in m
            else m
            for m in view
        ]

    def _token(self, store: SessionStore, session_id: str) -> str:
        with self._lock:
            token = self._tokens.get(session_id)
            if token is not None:
                self._tokens.move_to_end(session_id)
                return token
        token = conversation_token(store, session_id)
        with self._lock:
            self._tokens[session_id] = token
            while len(self._tokens) > self._remembered:
                self._tokens.popitem(last=False)
        return token
