"""Agent-data-protocol raw sample files: a JSON array of records, one conversation each.

Records come from several datasets with their own shapes (SWE-smith and SWE-Play ``messages`` lists, nebius
``trajectory`` lists of ``{role: system/user/ai, text}``); one record is imported, by default the largest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..messages import Message, TranscriptError
from .common import ImportFormat, ImportReport, chat_message, finish, load_json
from .sniffing import key_paths


def _record_chars(rec: Any) -> int:
    msgs = _adp_items(rec)
    total = 0
    for m in msgs or ():
        if isinstance(m, dict):
            for key in ("content", "text", "system_prompt"):
                v = m.get(key)
                if isinstance(v, str):
                    total += len(v)
                elif isinstance(v, list):
                    total += len(json.dumps(v))
    return total


def _adp_items(rec: Any) -> list[Any] | None:
    if not isinstance(rec, dict):
        return None
    for key in ("messages", "trajectory"):
        items = rec.get(key)
        if isinstance(items, list):
            return items
    return None


_ADP_ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "gpt": "assistant",
    "tool": "tool",
}


def import_adp(path: Path, record: int | None = None, **_: Any) -> ImportReport:
    """One record of an agent-data-protocol raw sample file (a JSON array of records).

    ``record`` picks it (0-based); by default the largest by content characters. Records with a
    ``messages`` list (SWE-smith: actions in assistant text, observations as user messages; SWE-Play:
    OpenHands text format, ``EXECUTION RESULT of [tool]`` as user) are chat messages already; nebius
    records (``trajectory`` of ``{role: system/user/ai, text}``, the system prompt in ``system_prompt``)
    map ``ai`` to assistant. Dataset keys (``mask``, ``cutoff_date``...) are dropped.
    """
    report = ImportReport("adp", str(path))
    data = _load_records(path)
    record = _pick_record(path, data, record)
    report.record, report.records = record, len(data)
    out = [
        _adp_message(item, f"{path}: record {record}: message {i}", report)
        for i, item in enumerate(_adp_items(data[record]) or ())
    ]
    return finish(report, out)


def _load_records(path: Path) -> list[Any]:
    """The file's records (one object counts as one record), each checked to hold a message list."""
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise TranscriptError(f"{path}: expected a JSON array of records")
    for r, rec in enumerate(data):
        if _adp_items(rec) is None:
            keys = ", ".join(sorted(rec)) if isinstance(rec, dict) else type(rec).__name__
            raise TranscriptError(f"{path}: record {r}: no 'messages' or 'trajectory' list (has: {keys})")
    return data


def _pick_record(path: Path, data: list[Any], record: int | None) -> int:
    """The record asked for, checked; by default the largest (the sample files hold five small-to-big)."""
    if record is None:
        return max(range(len(data)), key=lambda r: _record_chars(data[r]))
    if not 0 <= record < len(data):
        raise TranscriptError(
            f"{path}: record {record} out of range (the file holds {len(data)} records, 0 to {len(data) - 1})"
        )
    return record


def _adp_role(item: dict[str, Any], where: str, report: ImportReport) -> str:
    """The chat role of a dataset message (``ai``, ``gpt``, ``human``... mapped, and counted when renamed)."""
    raw_role = item.get("role", item.get("from"))
    if raw_role is None:
        raise TranscriptError(f"{where}: message has no 'role' (keys: {', '.join(sorted(item)) or 'none'})")
    role = _ADP_ROLES.get(str(raw_role))
    if role is None:
        raise TranscriptError(f"{where}: unknown role {raw_role!r} (expected one of {', '.join(sorted(_ADP_ROLES))})")
    if raw_role != role:
        report.notes[f"role_{raw_role}_as_{role}"] += 1
    return role


def _adp_content(item: dict[str, Any], role: str) -> Any:
    """The message text, from whichever key this dataset uses (``content``, ``text``, ``value``...)."""
    if "content" in item:
        return item["content"]
    if item.get("text") is not None:
        return item["text"]
    if item.get("value") is not None:
        return item["value"]
    return item.get("system_prompt") if role == "system" else None


def _adp_call_id(item: dict[str, Any], where: str, report: ImportReport) -> str:
    """The call a tool message answers: its ``tool_call_id`` (these datasets have no list of ids)."""
    if not item.get("tool_call_id"):
        raise TranscriptError(f"{where}: tool message without tool_call_id")
    return str(item["tool_call_id"])


def _adp_message(item: Any, where: str, report: ImportReport) -> Message:
    """One dataset message as a chat-completions message (dataset keys such as ``mask`` dropped)."""
    if not isinstance(item, dict):
        raise TranscriptError(f"{where}: expected a JSON object, got {type(item).__name__}")
    role = _adp_role(item, where, report)
    return chat_message(item, role, _adp_content(item, role), _adp_call_id, where, report)


def looks_like_adp(head: str) -> bool:
    """A JSON array of records with ``messages`` or ``trajectory`` lists (or one nebius-style record)."""
    keys = key_paths(head)
    return "[].messages" in keys or "[].trajectory" in keys or "trajectory[].role" in keys


FORMAT = ImportFormat(
    name="adp",
    description="an agent-data-protocol raw sample file (a JSON array of records; --record picks one)",
    importer=import_adp,
    sniff=looks_like_adp,
)
