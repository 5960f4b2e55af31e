"""Reversible folds: the model itself brings back what a marker no longer holds (``microcompact mcp``).

A conversation's folded originals stay in the store (state ``absorbed``). Two tools read them back, served
over MCP's stdio transport by ``microcompact mcp``: ``recall(conversation, query)`` searches them and
``expand(conversation, handle)`` shows one. The marker names both (``messages.with_recall_note``) when the
client's request lists the tools, with the conversation's capability and its own handle.

What one call may read is one conversation, named by its *capability*: a random token kept in the session's
meta (``keys.RECALL_META``), printed only in that conversation's marker. It is never a credential nor
derived from one or from the session id, so nothing one client sees lets it name another's conversation; a
*handle* (``m`` and a row id) is read only inside the conversation the capability names. What the tools
return is redacted as every summary is, with the conversation's own secret memory.

One module per job::

    conversation  capabilities and handles: making, finding, parsing
    originals     the store reads the tools need (a Protocol both SQL stores meet)
    reader        recall and expand: ranking, excerpts, bounds, refusals, redaction
    note          the proxy's side: which tools the request lists, the note in its markers
    stdio         the MCP server (imports the ``mcp`` SDK; nothing else here does)
"""

from __future__ import annotations

from .conversation import ConversationError, conversation_token, handle_of, parse_handle
from .note import RecallNotes, RecallToolNames, recall_tool_names
from .reader import MAX_EXPAND_CHARS, MAX_QUERY_CHARS, Originals, RecallRefused

__all__ = [
    "MAX_EXPAND_CHARS",
    "MAX_QUERY_CHARS",
    "ConversationError",
    "Originals",
    "RecallNotes",
    "RecallRefused",
    "RecallToolNames",
    "conversation_token",
    "handle_of",
    "parse_handle",
    "recall_tool_names",
]
