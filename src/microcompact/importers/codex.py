"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. The conversation is in the ``response_item`` lines,
which hold Responses API items: ``message`` (user, developer, assistant), ``reasoning``, ``function_call`` /
``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output`` (freeform tools such as
``apply_patch``), ``local_shell_call``, ``web_search_call``. ``event_msg`` lines repeat what the user saw
(and token counts), ``turn_context`` lines the settings of a turn; neither is model context. A
``compacted`` line is Codex's own summary at a compaction. Rollouts written before the wrapper existed
hold the items bare, one per line, after an ``{"id", "timestamp", "instructions"}`` first line.

The items of one model response (reasoning, text, calls) come one per line; consecutive ones are folded
into one assistant message, as the API returned them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..messages import META_KEY, Message, TranscriptError
from .common import (
    TS_KEY,
    ImportFormat,
    ImportReport,
    finish,
    iter_jsonl,
    text_or_parts,
    to_epoch,
)
from .sniffing import key_paths

# Response item types that belong to the assistant's side of a turn (folded into one assistant message).
_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


class _Rollout:
    """The messages built so far, with the assistant message that consecutive response items extend."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.messages: list[Message] = []
        self.assistant: Message | None = None  # open while the model's response items keep coming

    def add(self, m: Message) -> None:
        """Append a message that is not part of the model's response (closes the open assistant message)."""
        self.assistant = None
        self.messages.append(m)

    def open_assistant(self, ts: float | None) -> Message:
        """The assistant message of the response being read (started at its first item)."""
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": ""}
            if ts is not None:
                self.assistant[TS_KEY] = ts
            self.messages.append(self.assistant)
        return self.assistant


# --------------------------------------------------------------------------------------------- content


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    """Responses content parts (``input_text``, ``output_text``, ``input_image``) as chat content parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TranscriptError(f"{where}: content must be a list of parts, got {type(content).__name__}")
    parts: list[dict[str, Any]] = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text", "refusal"):
            parts.append({"type": "text", "text": str(p.get("text", p.get("refusal", "")))})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": str(p.get("image_url", ""))}})
        else:
            raise TranscriptError(f"{where}: content[{j}] has unknown part type {kind!r}")
    return parts


def _output_content(output: Any, where: str) -> str | list[dict[str, Any]]:
    """A call's output: a string, a list of content items (text and images), or ``{"content": ...}``."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return text_or_parts(_parts(output, where))
    if isinstance(output, dict) and "content" in output:  # {"content": ..., "success": false}
        return _output_content(output["content"], where)
    raise TranscriptError(f"{where}: output must be a string or a list of content items")


# --------------------------------------------------------------------------------------------- items


def _need(item: dict[str, Any], key: str, where: str) -> str:
    """A required string field of an item, or an error naming the line and the item type."""
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise TranscriptError(f"{where}: {item.get('type')} item needs a non-empty string {key!r}")
    return value


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``function_call``, ``custom_tool_call`` or ``local_shell_call`` as a chat-completions tool call."""
    kind = item["type"]
    if kind == "function_call":
        name, arguments = _need(item, "name", where), item.get("arguments")
        if not isinstance(arguments, str):
            raise TranscriptError(f"{where}: function_call arguments must be a string")
    elif kind == "custom_tool_call":  # freeform input (an apply_patch body), kept as it was sent
        name, arguments = _need(item, "name", where), item.get("input")
        if not isinstance(arguments, str):
            raise TranscriptError(f"{where}: custom_tool_call input must be a string")
    else:
        name, arguments = "local_shell", json.dumps(item.get("action") or {}, ensure_ascii=False)
    call_id = item.get("call_id") or item.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise TranscriptError(f"{where}: {kind} item needs a call_id")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _add_item(rollout: _Rollout, item: Any, ts: float | None, where: str) -> None:
    """One response item into the rollout: a message, part of the model's response, or an output."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        raise TranscriptError(f"{where}: a response item must be an object with a 'type'")
    report, kind = rollout.report, item["type"]
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "developer", "system"):
            raise TranscriptError(f"{where}: message item with unknown role {role!r}")
        content = text_or_parts(_parts(item.get("content"), where))
        if role == "assistant":
            am = rollout.open_assistant(ts)
            am["content"] = "\n\n".join(t for t in (am["content"], _assistant_text(content, report)) if t)
            return
        m: Message = {"role": role, "content": content}
        if ts is not None:
            m[TS_KEY] = ts
        rollout.add(m)
    elif kind in _CALL_TYPES:
        am = rollout.open_assistant(ts)
        am.setdefault("tool_calls", []).append(_call(item, where))
        if kind != "function_call":
            report.notes[f"{kind}_as_tool_call"] += 1
    elif kind in _OUTPUT_TYPES:
        tm: Message = {
            "role": "tool",
            "tool_call_id": _need(item, "call_id", where),
            "content": _output_content(item.get("output"), where),
        }
        if ts is not None:
            tm[TS_KEY] = ts
        rollout.add(tm)
    elif kind == "reasoning":  # summaries and encrypted content are not sent back as chat messages
        report.notes["reasoning_dropped"] += 1
    else:  # web_search_call (no call id, no output), ghost_snapshot, compaction, other
        report.notes[f"{kind}_dropped"] += 1


def _assistant_text(content: str | list[dict[str, Any]], report: ImportReport) -> str:
    """Assistant content as text (an assistant image part cannot be sent back; counted)."""
    if isinstance(content, str):
        return content
    report.notes["assistant_non_text_part_dropped"] += sum(1 for p in content if p.get("type") != "text")
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def _add_compacted(rollout: _Rollout, payload: Any, ts: float | None, where: str) -> None:
    """Codex's own compaction summary, kept as a marked user message (the history before it stays)."""
    message = payload.get("message") if isinstance(payload, dict) else None
    if not isinstance(message, str):
        raise TranscriptError(f"{where}: compacted line needs a string 'message'")
    if payload.get("replacement_history"):
        rollout.report.notes["compacted_replacement_history_ignored"] += 1
    m: Message = {"role": "user", "content": message, META_KEY: {"compact_summary": True}}
    if ts is not None:
        m[TS_KEY] = ts
    rollout.report.notes["compact_summary_message"] += 1
    rollout.add(m)


def _add_line(rollout: _Rollout, lineno: int, rec: Any, where: str) -> None:
    """One rollout line: a wrapped item, a bare item (older rollouts), or bookkeeping (counted)."""
    if not isinstance(rec, dict):
        raise TranscriptError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    ts = to_epoch(rec.get("timestamp"))
    kind = rec.get("type")
    if "payload" in rec:
        if kind == "response_item":
            _add_item(rollout, rec["payload"], ts, where)
        elif kind == "compacted":
            _add_compacted(rollout, rec["payload"], ts, where)
        else:
            sub = rec["payload"].get("type") if kind == "event_msg" and isinstance(rec["payload"], dict) else None
            rollout.report.notes[f"line_skipped:{kind}:{sub}" if sub else f"line_skipped:{kind}"] += 1
    elif "record_type" in rec or (lineno == 1 and kind is None and "id" in rec):  # older rollout bookkeeping
        rollout.report.notes["line_skipped:state" if "record_type" in rec else "line_skipped:session_meta"] += 1
    elif isinstance(kind, str):
        _add_item(rollout, rec, ts, where)
    else:
        raise TranscriptError(f"{where}: line has neither 'type' nor 'payload' (is this a Codex rollout?)")


def import_codex(path: Path, **_: Any) -> ImportReport:
    """A Codex CLI rollout file (JSONL).

    ``message`` items keep their role (the first developer message stays a system-level message, later
    ones become user messages as for every format) and their text verbatim; consecutive assistant items
    (text, ``function_call``, ``custom_tool_call``, ``local_shell_call``) make one assistant message whose
    tool calls are answered by the ``*_output`` items. ``custom_tool_call`` input (an ``apply_patch``
    body) is kept as the call's arguments as sent. ``reasoning`` items (summaries, encrypted content) and
    ``web_search_call`` items (no id, no output) are dropped and counted; ``event_msg``, ``turn_context``
    and ``session_meta`` lines are counted as skipped. A ``compacted`` line becomes a user message marked
    as the agent's own summary (the history it summarized stays before it). Line timestamps become ``_ts``.
    """
    report = ImportReport("codex", str(path))
    rollout = _Rollout(report)
    for lineno, rec in iter_jsonl(path):
        _add_line(rollout, lineno, rec, f"{path}:{lineno}")
    return finish(report, rollout.messages, own_summaries=True)


def looks_like_codex(head: str) -> bool:
    """A rollout line first: ``type`` and ``payload`` at the top (or an older rollout's meta line)."""
    keys = key_paths(head)
    wrapped = {"type", "payload"} <= keys and "role" not in keys
    legacy = {"id", "timestamp", "instructions"} <= keys and "type" not in keys
    return wrapped or legacy


FORMAT = ImportFormat(
    name="codex",
    description="a Codex CLI rollout (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)",
    importer=import_codex,
    sniff=looks_like_codex,
)
