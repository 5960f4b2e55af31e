"""Claude Code session logs (``~/.claude/projects/*/<session>.jsonl`` or a subagent's ``agent-*.jsonl``).

The log is not the conversation the model saw: one API assistant message is written as one line per
content block sharing ``message.id``, with parallel tool calls a later block can land after some of the
results, and most lines are bookkeeping. The import therefore runs in steps: read the records, keep the
lines that are model context, fold each line into a :class:`_Merge` (assistant blocks merged by id, tool
results held by call id, user texts in order), then lay the merge out as chat-completions messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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

# Keys every Claude Code log line carries (one of them), whatever its type.
_LINE_KEYS = frozenset({"sessionId", "uuid", "parentUuid", "messageId"})


@dataclass
class _CCAssistant:
    """One API assistant message, rebuilt from the log lines sharing its ``message.id``."""

    key: str
    ts: float | None
    texts: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    last_line: int = 0  # the log line of its last block


@dataclass
class _Merge:
    """Everything the line-by-line pass learns, kept until the messages can be laid out in order."""

    report: ImportReport
    has_main: bool  # a main session log: its sidechain (subagent) lines are not this conversation
    # slots: assistant messages (by message.id) and user texts, in order of first appearance
    slots: list[tuple[str, Any]] = field(default_factory=list)
    assistants: dict[str, _CCAssistant] = field(default_factory=dict)
    call_owner: dict[str, str] = field(default_factory=dict)  # tool_use id -> assistant key
    results: dict[str, Message] = field(default_factory=dict)  # tool_use id -> tool message
    last_assistant: _CCAssistant | None = None
    # assistant keys that already had a result or user line after them
    seen_result_since: set[str] = field(default_factory=set)
    order: list[Message] = field(default_factory=list)  # every result, in log order
    line_of: dict[int, int] = field(default_factory=dict)  # id(message) -> log line (to count reordered users)


# --------------------------------------------------------------------------------------------- content


def _cc_result_text(content: Any, report: ImportReport) -> str | list[Any]:
    """A ``tool_result`` block's content as chat content: text when it is all text, else parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_or_parts(_cc_user_parts(content, report))
    return json.dumps(content, ensure_ascii=False)


def _cc_user_parts(blocks: list[Any], report: ImportReport) -> list[Any]:
    """Anthropic text/image blocks as OpenAI content parts."""
    parts: list[Any] = []
    for b in blocks:
        if isinstance(b, str):
            parts.append({"type": "text", "text": b})
            continue
        if not isinstance(b, dict):
            continue
        t = b.get("type")
        if t == "text":
            parts.append({"type": "text", "text": str(b.get("text", ""))})
        elif t == "image":
            src = b.get("source") or {}
            if src.get("type") == "base64":
                url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
            else:
                url = str(src.get("url", ""))
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            report.notes[f"{t}_block_as_text"] += 1
            parts.append({"type": "text", "text": json.dumps(b, ensure_ascii=False)})
    return parts


# --------------------------------------------------------------------------------------------- reading lines


def _read_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every non-blank line as (line number, object); the whole log is needed before merging starts."""
    records: list[tuple[int, dict[str, Any]]] = []
    for lineno, rec in iter_jsonl(path):
        if not isinstance(rec, dict):
            raise TranscriptError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        records.append((lineno, rec))
    return records


def _is_context_line(merge: _Merge, rec: dict[str, Any], where: str) -> bool:
    """True for user/assistant lines of this conversation; bookkeeping and sidechain lines are counted."""
    rtype = rec.get("type")
    if not isinstance(rtype, str) or not rtype:
        raise TranscriptError(f"{where}: record has no 'type' (is this a Claude Code session log?)")
    if rtype not in ("user", "assistant"):
        label = rtype if rtype != "system" else f"system:{rec.get('subtype') or '?'}"
        merge.report.notes[f"line_skipped:{label}"] += 1
        return False
    if merge.has_main and rec.get("isSidechain"):
        merge.report.notes["line_skipped:sidechain"] += 1
        return False
    return True


def _line_message(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """The API message a user/assistant line carries, checked before anything is taken from it."""
    rtype = rec["type"]
    msg = rec.get("message")
    if not isinstance(msg, dict):
        raise TranscriptError(f"{where}: {rtype} line without a 'message' object")
    if msg.get("role") not in (None, rtype):
        raise TranscriptError(f"{where}: {rtype} line carries a message with role {msg.get('role')!r}")
    if "content" not in msg:
        raise TranscriptError(f"{where}: message has no 'content'")
    return msg


# --------------------------------------------------------------------------------------------- assistant lines


def _add_assistant_line(merge: _Merge, rec: dict[str, Any], msg: dict[str, Any], lineno: int, where: str) -> None:
    """Merge one assistant line's blocks into the message its ``message.id`` names."""
    if msg.get("model") == "<synthetic>" or rec.get("isApiErrorMessage"):
        merge.report.notes["synthetic_assistant_line_skipped"] += 1
        return
    key = str(msg.get("id") or rec.get("uuid") or f"line{lineno}")
    a = merge.assistants.get(key)
    if a is None:
        a = merge.assistants[key] = _CCAssistant(key, to_epoch(rec.get("timestamp")))
        merge.slots.append(("assistant", key))
    else:
        merge.report.notes["assistant_lines_merged"] += 1
        if key in merge.seen_result_since:
            merge.report.repairs["assistant_block_after_tool_result_merged"] += 1
    content = msg["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise TranscriptError(f"{where}: assistant content must be a string or a list of blocks")
    for j, b in enumerate(blocks):
        if not isinstance(b, dict):
            raise TranscriptError(f"{where}: content[{j}] must be an object")
        _add_assistant_block(merge, a, b, f"{where}: content[{j}]")
    a.last_line = lineno
    merge.last_assistant = a


def _add_assistant_block(merge: _Merge, a: _CCAssistant, b: dict[str, Any], where: str) -> None:
    """Keep a block's text or tool call; thinking, blank text and unknown blocks are not context."""
    report = merge.report
    t = b.get("type")
    if t == "text":
        text = str(b.get("text") or "")
        if text.strip():
            a.texts.append(text)
        else:
            report.notes["blank_text_block_dropped"] += 1
    elif t in ("thinking", "redacted_thinking"):
        report.notes["thinking_block_dropped"] += 1
    elif t == "tool_use":
        tcid = b.get("id")
        if not tcid or not b.get("name"):
            raise TranscriptError(f"{where}: tool_use block needs id and name")
        tcid = str(tcid)
        if tcid in merge.call_owner:
            report.repairs["duplicate_tool_call_dropped"] += 1
            return
        merge.call_owner[tcid] = a.key
        a.calls.append(
            {
                "id": tcid,
                "type": "function",
                "function": {"name": str(b["name"]), "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)},
            }
        )
    else:
        report.notes[f"assistant_{t}_block_dropped"] += 1


# --------------------------------------------------------------------------------------------- user lines


def _add_user_line(merge: _Merge, rec: dict[str, Any], content: Any, lineno: int, where: str) -> None:
    """Hold a user line's tool results by call id and queue its text (if any) as a user message."""
    blocks = content if isinstance(content, list) else None
    if blocks is None and not isinstance(content, str):
        raise TranscriptError(f"{where}: user content must be a string or a list of blocks")
    ts = to_epoch(rec.get("timestamp"))
    text_blocks: list[Any] = []
    for j, b in enumerate(blocks or []):
        if isinstance(b, dict) and b.get("type") == "tool_result":
            _add_tool_result(merge, b, ts, lineno, f"{where}: content[{j}]")
        else:
            text_blocks.append(b)
    if blocks is not None and not text_blocks:
        return
    if blocks is None:
        user_content: Any = content
    else:
        user_content = text_or_parts(_cc_user_parts(text_blocks, merge.report))
    um: Message = {"role": "user", "content": user_content}
    if rec.get("isCompactSummary"):
        um[META_KEY] = {"compact_summary": True}
        merge.report.notes["compact_summary_message"] += 1
    if rec.get("isMeta"):
        merge.report.notes["meta_user_line_kept"] += 1
    if ts is not None:
        um[TS_KEY] = ts
    if merge.last_assistant is not None:
        merge.seen_result_since.add(merge.last_assistant.key)
    merge.line_of[id(um)] = lineno
    merge.slots.append(("user", um))


def _add_tool_result(merge: _Merge, b: dict[str, Any], ts: float | None, lineno: int, where: str) -> None:
    """A ``tool_result`` block as a tool message, held until its call's assistant message is laid out."""
    tcid = b.get("tool_use_id")
    if not tcid:
        raise TranscriptError(f"{where}: tool_result block needs tool_use_id")
    tcid = str(tcid)
    tm: Message = {"role": "tool", "tool_call_id": tcid, "content": _cc_result_text(b.get("content"), merge.report)}
    if b.get("is_error"):
        tm[META_KEY] = {"is_error": True}
        merge.report.notes["tool_result_is_error"] += 1
    if ts is not None:
        tm[TS_KEY] = ts
    if tcid in merge.results:
        merge.report.repairs["duplicate_tool_result_dropped"] += 1
        return
    merge.results[tcid] = tm
    merge.line_of[id(tm)] = lineno
    merge.order.append(tm)
    owner = merge.call_owner.get(tcid)
    if owner is not None:
        merge.seen_result_since.add(owner)


# --------------------------------------------------------------------------------------------- layout


def _lay_out(merge: _Merge) -> list[Message]:
    """The messages in conversation order: each assistant message followed by its results, in call order."""
    out: list[Message] = []
    latest_line = 0
    for kind, value in merge.slots:
        if kind == "user":
            if merge.line_of[id(value)] < latest_line:  # log wrote it before results now placed ahead of it
                merge.report.repairs["user_msg_moved_after_tool_results"] += 1
            latest_line = max(latest_line, merge.line_of[id(value)])
            out.append(value)
            continue
        a = merge.assistants[value]
        am: Message = {"role": "assistant", "content": "\n\n".join(a.texts)}
        if a.calls:
            am["tool_calls"] = a.calls
        if a.ts is not None:
            am[TS_KEY] = a.ts
        out.append(am)
        latest_line = max(latest_line, a.last_line)
        for c in a.calls:
            if c["id"] in merge.results:
                tm = merge.results.pop(c["id"])
                latest_line = max(latest_line, merge.line_of[id(tm)])
                out.append(tm)
    orphans = [tm for tm in merge.order if tm["tool_call_id"] in merge.results]  # their call never appeared
    if orphans:
        merge.report.repairs["orphan_tool_result_dropped"] += len(orphans)
    return out


def import_claude_code(path: Path, **_: Any) -> ImportReport:
    """A Claude Code session log (JSONL, one record per line).

    One API assistant message is logged as one line per content block sharing ``message.id``; the
    blocks are merged back into one assistant message (text blocks joined by a blank line,
    whitespace-only text blocks and thinking blocks dropped, ``tool_use`` → ``tool_calls``). Tool results
    (``tool_result`` blocks of user lines) become ``tool`` messages placed right after the assistant
    message that made the call, in call order, even when the log wrote a later block of that message
    after some results. User text written while calls were still open is moved after their results.
    Records that are not model context (``progress``, ``file-history-snapshot``, ``queue-operation``,
    ``system`` records including the compact boundary) are skipped; ``isMeta`` user lines (skill
    bodies, local-command caveats) are kept because Claude Code sends them to the model. In a main
    session log, sidechain (subagent) lines are skipped; a subagent log (all sidechain) is kept whole.
    """
    report = ImportReport("claude-code", str(path))
    records = _read_records(path)
    has_main = any(r.get("type") in ("user", "assistant") and not r.get("isSidechain") for _, r in records)
    merge = _Merge(report, has_main)
    for lineno, rec in records:
        where = f"{path}:{lineno}"
        if not _is_context_line(merge, rec, where):
            continue
        msg = _line_message(rec, where)
        if rec["type"] == "assistant":
            _add_assistant_line(merge, rec, msg, lineno, where)
        else:
            _add_user_line(merge, rec, msg["content"], lineno, where)
    return finish(report, _lay_out(merge), own_summaries=True)


def looks_like_claude_code(head: str) -> bool:
    """A JSON object first line with a record ``type`` and Claude Code's line ids, and no chat ``role``."""
    keys = key_paths(head)
    return "type" in keys and "role" not in keys and bool(keys & _LINE_KEYS)


FORMAT = ImportFormat(
    name="claude-code",
    description="a Claude Code session log (~/.claude/projects/*/SESSION.jsonl or a subagent's agent-*.jsonl)",
    importer=import_claude_code,
    sniff=looks_like_claude_code,
)
