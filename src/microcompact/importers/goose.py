"""goose session files (JSONL, ``~/.local/share/goose/sessions/<id>.jsonl`` before goose moved to SQLite).

The first line is the session's metadata (working directory, description, token totals); every other
line is one goose ``Message``: ``{"id", "role", "created", "content": [...], "metadata"}``. Content items
are tagged by ``type``: ``text``, ``image``, ``toolRequest`` (on assistant messages: an id and a
``toolCall`` result, ``{"status": "success", "value": {"name", "arguments"}}`` or ``{"status": "error"}``),
``toolResponse`` (on user messages: the call id and a ``toolResult`` with the tool's content list),
``thinking`` / ``redactedThinking``, and notices (``contextLengthExceeded``, ``summarizationRequested``...).
Content carries MCP ``annotations``: goose leaves out of the model's view an item whose audience does not
include the assistant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..messages import META_KEY, Message, TranscriptError
from .common import (
    ImportFormat,
    ImportReport,
    finish,
    iter_jsonl,
    take_ts,
    text_or_parts,
)
from .sniffing import key_paths

_METADATA_KEYS = frozenset({"working_dir", "description", "message_count"})
_THINKING = frozenset({"thinking", "redactedThinking"})


def _for_model(item: dict[str, Any]) -> bool:
    """False for MCP content meant for the user only (``annotations.audience == ["user"]``)."""
    audience = (item.get("annotations") or {}).get("audience")
    return not (isinstance(audience, list) and audience and "assistant" not in audience)


def _content_part(item: Any, where: str) -> dict[str, Any]:
    """A goose/MCP text or image item as a chat content part."""
    if not isinstance(item, dict):
        raise TranscriptError(f"{where}: a content item must be an object, got {type(item).__name__}")
    kind = item.get("type")
    if kind == "text":
        return {"type": "text", "text": str(item.get("text", ""))}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:{item.get('mimeType')};base64,{item.get('data')}"}}
    if kind == "resource":  # an embedded resource: its text, or the whole item as JSON
        resource = item.get("resource") or {}
        text = resource.get("text") if isinstance(resource, dict) else None
        return {"type": "text", "text": text if isinstance(text, str) else json.dumps(item, ensure_ascii=False)}
    raise TranscriptError(f"{where}: unknown content item type {kind!r}")


def _tool_result(result: Any, where: str, report: ImportReport) -> tuple[str | list[Any], bool]:
    """A ``toolResult``: the content the model saw, and whether the call failed."""
    if not isinstance(result, dict) or result.get("status") not in ("success", "error"):
        raise TranscriptError(f"{where}: toolResult needs a status of 'success' or 'error'")
    if result["status"] == "error":
        return f"Error: {result.get('error', '')}", True
    value = result.get("value")
    is_error = False
    if isinstance(value, dict):  # newer goose: an MCP CallToolResult
        is_error = bool(value.get("isError"))
        value = value.get("content")
    if not isinstance(value, list):
        raise TranscriptError(f"{where}: toolResult value must be a list of content items")
    shown = [item for item in value if not isinstance(item, dict) or _for_model(item)]
    report.notes["user_only_tool_content_dropped"] += len(value) - len(shown)
    parts = [_content_part(item, f"{where}: toolResult item {j}") for j, item in enumerate(shown)]
    return text_or_parts(parts), is_error


def _tool_call(item: dict[str, Any], where: str, report: ImportReport) -> dict[str, Any] | None:
    """A ``toolRequest`` as a tool call; a request goose could not parse (status error) is counted, dropped."""
    call = item.get("toolCall")
    if not isinstance(call, dict) or call.get("status") not in ("success", "error"):
        raise TranscriptError(f"{where}: toolRequest needs a toolCall with a status of 'success' or 'error'")
    if call["status"] == "error":
        report.notes["invalid_tool_request_dropped"] += 1
        return None
    value = call.get("value")
    if not isinstance(value, dict) or not value.get("name") or not item.get("id"):
        raise TranscriptError(f"{where}: toolRequest needs an id and toolCall.value.name")
    arguments = value.get("arguments")
    return {
        "id": str(item["id"]),
        "type": "function",
        "function": {"name": str(value["name"]), "arguments": json.dumps(arguments or {}, ensure_ascii=False)},
    }


@dataclass
class _Pieces:
    """What one goose message's content items become, kept apart until they are put in order."""

    results: list[Message] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)


def _messages_of(rec: dict[str, Any], where: str, report: ImportReport) -> list[Message]:
    """One goose message as chat messages: tool results first (each its own), then the text, then calls."""
    role = rec.get("role")
    if role not in ("user", "assistant"):
        raise TranscriptError(f"{where}: unknown role {role!r} (expected user or assistant)")
    content = rec.get("content")
    if not isinstance(content, list):
        raise TranscriptError(f"{where}: content must be a list of items")
    pieces = _Pieces()
    for j, item in enumerate(content):
        _sort_item(item, f"{where}: content[{j}]", role, pieces, report)
    out = pieces.results
    if pieces.parts or pieces.calls:
        out = [*pieces.results, _spoken(rec, role, pieces, report)]
    for m in out:
        take_ts(rec, m, keys=("created",))
    return out


def _sort_item(item: Any, at: str, role: str, pieces: _Pieces, report: ImportReport) -> None:
    """Put one content item where it belongs (or count it as dropped); an item the role cannot hold fails."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind in ("text", "image") and not _for_model(item):  # goose shows it to the user only
        report.notes["user_only_content_dropped"] += 1
    elif kind in ("text", "image"):
        pieces.parts.append(_content_part(item, at))
    elif kind == "toolRequest" and role == "assistant":
        call = _tool_call(item, at, report)
        if call is not None:
            pieces.calls.append(call)
    elif kind == "toolResponse" and role == "user":
        pieces.results.append(_tool_message(item, at, report))
    elif kind in _THINKING:
        report.notes["thinking_dropped"] += 1
    elif isinstance(kind, str) and kind not in ("toolRequest", "toolResponse"):
        report.notes[f"{kind}_skipped"] += 1  # notices goose shows the user (context limit, compaction)
    else:
        raise TranscriptError(f"{at}: {kind!r} item is not valid in a {role} message")


def _tool_message(item: dict[str, Any], at: str, report: ImportReport) -> Message:
    """A ``toolResponse`` item as a tool message, a failed call marked as an error."""
    result, failed = _tool_result(item.get("toolResult"), at, report)
    tm: Message = {"role": "tool", "tool_call_id": str(item.get("id")), "content": result}
    if failed:
        tm[META_KEY] = {"is_error": True}
        report.notes["tool_result_is_error"] += 1
    return tm


def _spoken(rec: dict[str, Any], role: str, pieces: _Pieces, report: ImportReport) -> Message:
    """The message's text and calls as one message; goose's hidden compaction summary is marked as such."""
    m: Message = {"role": role, "content": text_or_parts(pieces.parts)}
    if pieces.calls:
        m["tool_calls"] = pieces.calls
    meta = rec.get("metadata") or {}
    if meta.get("userVisible") is False and meta.get("agentVisible", True):  # goose's compaction summary
        m[META_KEY] = {"compact_summary": True}
        report.notes["compact_summary_message"] += 1
    return m


def import_goose(path: Path, **_: Any) -> ImportReport:
    """A goose session file (JSONL: a metadata line, then one message per line).

    Text stays verbatim (several text items of one message joined by line breaks), images become image
    parts; ``toolRequest`` items become tool calls and ``toolResponse`` items tool results (a failed call
    is marked, content meant for the user only is dropped and counted). A user message holding tool
    results and text becomes the results, then a user message with the text. Thinking items are dropped
    and counted; notices are counted as skipped. A message goose hid from the user but showed the agent
    (its compaction summary) is marked as the agent's own summary. ``created`` becomes ``_ts``.
    """
    report = ImportReport("goose", str(path))
    messages: list[Message] = []
    for lineno, rec in iter_jsonl(path):
        where = f"{path}:{lineno}"
        if not isinstance(rec, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if lineno == 1 and "role" not in rec:
            report.notes["session_metadata_line"] += 1
            continue
        messages.extend(_messages_of(rec, where, report))
    return finish(report, messages, own_summaries=True)


def looks_like_goose(head: str) -> bool:
    """goose's session metadata first, or a goose message (``created`` and typed content items)."""
    keys = key_paths(head)
    metadata = len(keys & _METADATA_KEYS) >= 2 and "role" not in keys
    message = {"role", "created", "content[].type"} <= keys
    return metadata or message


FORMAT = ImportFormat(
    name="goose",
    description="a goose session file (JSONL: a metadata line, then one message per line)",
    importer=import_goose,
    sniff=looks_like_goose,
)
