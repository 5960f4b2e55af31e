"""Chat-completions messages already (JSONL, a JSON array, or an object with ``messages``): checked, kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import jsoninput
from ..messages import (
    Message,
    TranscriptError,
    message_shape_errors,
    validate_message,
)
from ..properties import check_tool_pairing
from .common import (
    TS_KEY,
    ImportFormat,
    ImportReport,
    finish,
    normalize_tool_calls,
    read_text,
    to_epoch,
)
from .sniffing import key_paths

# A message's own role, an array of messages, or a request body's ``messages``.
_MESSAGE_KEYS = frozenset({"role", "[].role", "messages"})


def import_openai(path: Path, **_: Any) -> ImportReport:
    """Chat-completions messages already: JSONL, a JSON array, or an object with a ``messages`` list.

    Messages are validated and passed through; ``_``-prefixed metadata is kept (an ISO ``_ts`` becomes
    epoch seconds), a top-level ``timestamp``/``created_at`` becomes ``_ts``, null fields are dropped.
    """
    report = ImportReport("openai", str(path))
    items = _located_items(path)
    out = [_openai_message(m, where, report) for where, m in items]
    # Chat-completions input is checked like replay input: defects are named by line (run_import refuses
    # them unless asked to repair) and repaired the way ``replay --repair`` does.
    out, defects = check_tool_pairing(out)
    report.defects = [(items[i][0], problem, action) for i, problem, action in defects]
    if defects:
        report.repairs["recording_defect_repaired"] += len(defects)
    return finish(report, out)


def _located_items(path: Path) -> list[tuple[str, Any]]:
    """(where, value) for every message, ``where`` naming its line (JSONL) or element (a JSON document)."""
    return jsoninput.message_values(read_text(path), str(path))


def _openai_message(m: Any, where: str, report: ImportReport) -> Message:
    """One message checked and kept: null fields dropped, timestamps made ``_ts`` epoch seconds."""
    if isinstance(m, dict) and "role" not in m:
        raise TranscriptError(f"{where}: message has no 'role' (keys: {', '.join(sorted(m)) or 'none'})")
    validate_message(m, where)
    msg: Message = {}
    for k, v in m.items():
        if v is None and k != "content":
            continue
        if k in ("timestamp", "created_at") and TS_KEY not in m:
            ts = to_epoch(v)
            if ts is not None:
                msg[TS_KEY] = ts
                report.notes[f"{k}_as__ts"] += 1
                continue
        msg[k] = v
    if TS_KEY in msg and not isinstance(msg[TS_KEY], (int, float)):
        ts = to_epoch(msg[TS_KEY])
        if ts is None:
            raise TranscriptError(f"{where}: _ts {msg[TS_KEY]!r} is not a time")
        msg[TS_KEY] = ts
    if "content" not in msg:
        msg["content"] = None if msg.get("tool_calls") else ""
    if msg.get("tool_calls"):
        msg["tool_calls"] = [{**tc, **normalize_tool_calls([tc], where, report)[0]} for tc in msg["tool_calls"]]
    problems = message_shape_errors(msg)
    if problems:
        raise TranscriptError(f"{where}: {problems[0]}")
    jsoninput.field_types(msg, where)
    jsoninput.library_keys(msg, where)  # the same keys replay takes (see microcompact.jsoninput)
    return msg


def looks_like_openai(head: str) -> bool:
    """Chat-completions messages: a message object first (JSONL), an array of them, or ``{"messages": ...}``."""
    return bool(key_paths(head) & _MESSAGE_KEYS)


FORMAT = ImportFormat(
    name="openai",
    description="chat-completions messages already (JSONL, a JSON array, or an object with messages)",
    importer=import_openai,
    sniff=looks_like_openai,
)
