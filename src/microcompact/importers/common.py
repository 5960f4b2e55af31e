"""Convert recorded sessions of common agents into the chat-completions JSONL ``replay`` reads.

``import_transcript(path, fmt)`` returns the messages; ``import_report(path, fmt)`` returns an
:class:`ImportReport` with the messages plus what the conversion skipped (``notes``) and what it had to
change to make the transcript valid (``repairs``). ``write_jsonl`` writes messages one per line.

Formats (``FORMATS``):

* ``claude-code``: a Claude Code session log (``~/.claude/projects/*/<session>.jsonl`` or a subagent's
  ``agent-*.jsonl``).
* ``swe-agent``: an SWE-agent ``.traj`` file (its ``history``, what the model saw).
* ``adp``: an agent-data-protocol raw sample file (a JSON array of records: SWE-smith, SWE-Play/OpenHands
  ``messages`` lists, nebius ``trajectory`` lists of ``{role: system/user/ai, text}``).
* ``openai``: chat-completions messages already (JSONL, a JSON array, or an object with ``messages``).

Every output passes :func:`microcompact.messages.role_sequence_errors` (which includes tool pairing):
tool results whose call is missing are dropped, calls without a result get a ``[no result recorded]``
placeholder, system messages after the conversation started become user messages; each repair is counted.
Timestamps, where the source has them, are kept as ``_ts`` (float seconds since the epoch).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from .. import jsoninput
from ..messages import (
    META_KEY,
    Message,
    TranscriptError,
    check_tool_pairing,
    content_text,
    message_shape_errors,
    role_sequence_errors,
    validate_message,
)

NO_RESULT = "[no result recorded]"
TS_KEY = "_ts"


# --------------------------------------------------------------------------------------------- report


@dataclass
class ImportReport:
    """Messages of one imported session and what the conversion did to get them."""

    fmt: str
    source: str
    messages: list[Message] = field(default_factory=list)
    # Changes made so the output is a valid transcript (reordered, dropped or invented messages).
    repairs: Counter[str] = field(default_factory=Counter)
    # What the source held that is not model context or not representable, skipped by design.
    notes: Counter[str] = field(default_factory=Counter)
    record: int | None = None  # adp: which record of the file was imported
    records: int | None = None  # adp: how many records the file holds
    compact_summary_indices: list[int] = field(default_factory=list)  # claude-code: the agent's own summaries
    # openai: recording defects found (where, problem, what the repair did); repaired in ``messages``.
    defects: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def repair_total(self) -> int:
        return sum(self.repairs.values())

    def roles(self) -> Counter[str]:
        return Counter(str(m.get("role")) for m in self.messages)

    def tool_call_count(self) -> int:
        return sum(len(m.get("tool_calls") or ()) for m in self.messages)

    def describe(self) -> list[str]:
        """Human-readable lines: counts, repairs, skipped material."""
        roles = self.roles()
        role_text = ", ".join(f"{r} {roles[r]}" for r in ("system", "user", "assistant", "tool") if roles[r])
        where = f" (record {self.record} of {self.records})" if self.record is not None else ""
        lines = [f"{self.source}{where}: {len(self.messages)} messages ({role_text}), "
                 f"{self.tool_call_count()} tool calls"]
        if self.repairs:
            lines.append(f"repairs ({self.repair_total}): " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.repairs.items())))
        else:
            lines.append("repairs: none")
        if self.notes:
            lines.append("skipped/converted: " + ", ".join(f"{k} {v}" for k, v in sorted(self.notes.items())))
        if self.compact_summary_indices:
            lines.append("agent's own compaction summary at message index "
                         + ", ".join(str(i) for i in self.compact_summary_indices))
        return lines


# --------------------------------------------------------------------------------------------- helpers


def to_epoch(value: Any) -> float | None:
    """Seconds since the epoch from a number (seconds or milliseconds) or an ISO-8601 string; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        if not math.isfinite(v):
            return None
        return v / 1000.0 if v > 1e11 else v  # milliseconds since the epoch
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        try:
            return to_epoch(float(s))
        except ValueError:
            pass
        try:
            dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _load_json(path: Path) -> Any:
    """The whole file as strict JSON (no NaN/Infinity, lone surrogates or deep nesting)."""
    return jsoninput.loads(_read_text(path), str(path))


def _iter_jsonl(path: Path, text: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; a bad line raises naming file and line."""
    text = _read_text(path) if text is None else text
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield lineno, jsoninput.loads(line, f"{path}:{lineno}")


def _args_string(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


def _clean_parts(parts: list[Any], where: str) -> list[Any]:
    """Content parts without provider extras (``cache_control``); non-dict parts are an error."""
    out = []
    for j, p in enumerate(parts):
        if isinstance(p, str):
            out.append({"type": "text", "text": p})
        elif isinstance(p, dict):
            out.append({k: v for k, v in p.items() if k != "cache_control"})
        else:
            raise TranscriptError(f"{where}: content[{j}] must be an object or a string, got {type(p).__name__}")
    return out


def _text_only(parts: list[Any]) -> str | None:
    """The joined text of ``parts`` when every part is text, else None (keep the list)."""
    if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return "\n".join(str(p.get("text", "")) for p in parts)
    return None


def _normalize_tool_calls(calls: Any, where: str, report: ImportReport) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise TranscriptError(f"{where}: tool_calls must be a list, got {type(calls).__name__}")
    out = []
    for j, tc in enumerate(calls):
        if not isinstance(tc, dict):
            raise TranscriptError(f"{where}: tool_calls[{j}] must be an object")
        fn = tc.get("function")
        if not isinstance(fn, dict) or not fn.get("name"):
            raise TranscriptError(f"{where}: tool_calls[{j}] needs function.name")
        if not tc.get("id"):
            raise TranscriptError(f"{where}: tool_calls[{j}] needs an id")
        args = fn.get("arguments")
        if not isinstance(args, str):
            report.repairs["tool_call_arguments_serialized"] += 1
        out.append({"id": str(tc["id"]), "type": "function",
                    "function": {"name": str(fn["name"]), "arguments": _args_string(args)}})
    return out


def _take_ts(source: dict[str, Any], target: Message,
             keys: Iterable[str] = ("_ts", "timestamp", "created_at", "created")) -> None:
    """Copy the first usable timestamp of ``source`` to ``target['_ts']`` (numbers before 1973 are not times)."""
    for key in keys:
        if key in source:
            ts = to_epoch(source[key])
            if ts is not None and ts > 1e8:
                target[TS_KEY] = ts
                return


# --------------------------------------------------------------------------------------------- repair


def repair(messages: list[Message], report: ImportReport) -> list[Message]:
    """Make ``messages`` pass ``role_sequence_errors``, counting every change in ``report.repairs``.

    * a tool result whose call is not open in the assistant message before it is dropped
      (``orphan_tool_result_dropped``; a second result for the same call: ``duplicate_tool_result_dropped``);
    * a call without a result gets a ``[no result recorded]`` tool message (``missing_tool_result_added``);
    * a system/developer message after the conversation started becomes a user message
      (``late_system_message_as_user``);
    * an assistant message with neither text nor tool calls is dropped (``empty_assistant_dropped``).
    """
    out: list[Message] = []
    open_calls: list[str] = []
    answered: set[str] = set()
    started = False

    def close() -> None:
        for tcid in open_calls:
            out.append({"role": "tool", "tool_call_id": tcid, "content": NO_RESULT,
                        META_KEY: {"placeholder": True}})
            report.repairs["missing_tool_result_added"] += 1
        open_calls.clear()

    for m in messages:
        role = m.get("role")
        if role == "tool":
            tcid = str(m.get("tool_call_id"))
            if tcid in open_calls:
                open_calls.remove(tcid)
                answered.add(tcid)
                out.append(m)
            elif tcid in answered:
                report.repairs["duplicate_tool_result_dropped"] += 1
            else:
                report.repairs["orphan_tool_result_dropped"] += 1
            continue
        close()
        if role in ("system", "developer"):
            if started:
                m = {**m, "role": "user"}
                report.repairs["late_system_message_as_user"] += 1
            out.append(m)
            continue
        started = True
        if role == "assistant":
            ids = [str(tc["id"]) for tc in m.get("tool_calls") or ()]
            if not ids and not content_text(m).strip() and not isinstance(m.get("content"), list):
                report.repairs["empty_assistant_dropped"] += 1
                continue
            seen: set[str] = set()
            if len(set(ids)) != len(ids):  # the same id twice in one message: keep the first
                calls = []
                for tc in m["tool_calls"]:
                    if tc["id"] in seen:
                        report.repairs["duplicate_tool_call_dropped"] += 1
                        continue
                    seen.add(tc["id"])
                    calls.append(tc)
                m = {**m, "tool_calls": calls}
                ids = [tc["id"] for tc in calls]
            open_calls.extend(ids)
            answered = set()
        out.append(m)
    close()
    return out


def _finish(report: ImportReport, messages: list[Message]) -> ImportReport:
    messages = repair(messages, report)
    for i, m in enumerate(messages):
        validate_message(m, f"{report.source}: output message {i}")
    errors = role_sequence_errors(messages)
    if errors:  # repair() should make this impossible
        raise TranscriptError(f"{report.source}: conversion produced an invalid transcript: {errors[0]}")
    report.messages = messages
    if report.fmt == "claude-code":
        report.compact_summary_indices = [i for i, m in enumerate(messages)
                                          if isinstance(m.get(META_KEY), dict)
                                          and m[META_KEY].get("compact_summary")]
    return report


# --------------------------------------------------------------------------------------------- claude-code

@dataclass
class _CCAssistant:
    key: str
    ts: float | None
    texts: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    last_line: int = 0  # the log line of its last block


def _cc_result_text(content: Any, report: ImportReport) -> str | list[Any]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = _cc_user_parts(content, report)
        text = _text_only(parts)
        return text if text is not None else parts
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
    records: list[tuple[int, dict[str, Any]]] = []
    for lineno, rec in _iter_jsonl(path):
        if not isinstance(rec, dict):
            raise TranscriptError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        records.append((lineno, rec))
    has_main = any(r.get("type") in ("user", "assistant") and not r.get("isSidechain") for _, r in records)

    # slots: assistant messages (by message.id) and user texts, in order of first appearance
    slots: list[tuple[str, Any]] = []
    assistants: dict[str, _CCAssistant] = {}
    call_owner: dict[str, str] = {}  # tool_use id -> assistant key
    results: dict[str, Message] = {}  # tool_use id -> tool message
    last_assistant: _CCAssistant | None = None
    seen_result_since: set[str] = set()  # assistant keys that already had a result or user line after them
    order: list[Message] = []  # every result, in log order
    line_of: dict[int, int] = {}  # id(message) -> log line (to count reordered user messages)

    for lineno, rec in records:
        rtype = rec.get("type")
        if not isinstance(rtype, str) or not rtype:
            raise TranscriptError(f"{path}:{lineno}: record has no 'type' (is this a Claude Code session log?)")
        if rtype not in ("user", "assistant"):
            label = rtype if rtype != "system" else f"system:{rec.get('subtype') or '?'}"
            report.notes[f"line_skipped:{label}"] += 1
            continue
        if has_main and rec.get("isSidechain"):
            report.notes["line_skipped:sidechain"] += 1
            continue
        msg = rec.get("message")
        where = f"{path}:{lineno}"
        if not isinstance(msg, dict):
            raise TranscriptError(f"{where}: {rtype} line without a 'message' object")
        if msg.get("role") not in (None, rtype):
            raise TranscriptError(f"{where}: {rtype} line carries a message with role {msg.get('role')!r}")
        if "content" not in msg:
            raise TranscriptError(f"{where}: message has no 'content'")
        ts = to_epoch(rec.get("timestamp"))
        content = msg["content"]

        if rtype == "assistant":
            if msg.get("model") == "<synthetic>" or rec.get("isApiErrorMessage"):
                report.notes["synthetic_assistant_line_skipped"] += 1
                continue
            key = str(msg.get("id") or rec.get("uuid") or f"line{lineno}")
            a = assistants.get(key)
            if a is None:
                a = assistants[key] = _CCAssistant(key, ts)
                slots.append(("assistant", key))
            else:
                report.notes["assistant_lines_merged"] += 1
                if key in seen_result_since:
                    report.repairs["assistant_block_after_tool_result_merged"] += 1
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise TranscriptError(f"{where}: assistant content must be a string or a list of blocks")
            for j, b in enumerate(blocks):
                if not isinstance(b, dict):
                    raise TranscriptError(f"{where}: content[{j}] must be an object")
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
                        raise TranscriptError(f"{where}: content[{j}]: tool_use block needs id and name")
                    tcid = str(tcid)
                    if tcid in call_owner:
                        report.repairs["duplicate_tool_call_dropped"] += 1
                        continue
                    call_owner[tcid] = key
                    a.calls.append({"id": tcid, "type": "function",
                                    "function": {"name": str(b["name"]),
                                                 "arguments": json.dumps(b.get("input") or {},
                                                                         ensure_ascii=False)}})
                else:
                    report.notes[f"assistant_{t}_block_dropped"] += 1
            a.last_line = lineno
            last_assistant = a
            continue

        # user line: tool results and/or user text
        blocks = content if isinstance(content, list) else None
        if blocks is None and not isinstance(content, str):
            raise TranscriptError(f"{where}: user content must be a string or a list of blocks")
        text_blocks: list[Any] = []
        for j, b in enumerate(blocks or []):
            if isinstance(b, dict) and b.get("type") == "tool_result":
                tcid = b.get("tool_use_id")
                if not tcid:
                    raise TranscriptError(f"{where}: content[{j}]: tool_result block needs tool_use_id")
                tcid = str(tcid)
                tm: Message = {"role": "tool", "tool_call_id": tcid,
                               "content": _cc_result_text(b.get("content"), report)}
                if b.get("is_error"):
                    tm[META_KEY] = {"is_error": True}
                    report.notes["tool_result_is_error"] += 1
                if ts is not None:
                    tm[TS_KEY] = ts
                if tcid in results:
                    report.repairs["duplicate_tool_result_dropped"] += 1
                    continue
                results[tcid] = tm
                line_of[id(tm)] = lineno
                order.append(tm)
                owner = call_owner.get(tcid)
                if owner is not None:
                    seen_result_since.add(owner)
            else:
                text_blocks.append(b)
        if blocks is None or text_blocks:
            if blocks is None:
                user_content: Any = content
            else:
                parts = _cc_user_parts(text_blocks, report)
                joined = _text_only(parts)
                user_content = joined if joined is not None else parts
            um: Message = {"role": "user", "content": user_content}
            if rec.get("isCompactSummary"):
                um[META_KEY] = {"compact_summary": True}
                report.notes["compact_summary_message"] += 1
            if rec.get("isMeta"):
                report.notes["meta_user_line_kept"] += 1
            if ts is not None:
                um[TS_KEY] = ts
            if last_assistant is not None:
                seen_result_since.add(last_assistant.key)
            line_of[id(um)] = lineno
            slots.append(("user", um))

    out: list[Message] = []
    latest_line = 0
    for kind, value in slots:
        if kind == "user":
            if line_of[id(value)] < latest_line:  # log wrote it before results now placed ahead of it
                report.repairs["user_msg_moved_after_tool_results"] += 1
            latest_line = max(latest_line, line_of[id(value)])
            out.append(value)
            continue
        a = assistants[value]
        am: Message = {"role": "assistant", "content": "\n\n".join(a.texts)}
        if a.calls:
            am["tool_calls"] = a.calls
        if a.ts is not None:
            am[TS_KEY] = a.ts
        out.append(am)
        latest_line = max(latest_line, a.last_line)
        for c in a.calls:
            if c["id"] in results:
                tm = results.pop(c["id"])
                latest_line = max(latest_line, line_of[id(tm)])
                out.append(tm)
    orphans = [tm for tm in order if tm["tool_call_id"] in results]  # their call never appeared
    if orphans:
        report.repairs["orphan_tool_result_dropped"] += len(orphans)
    return _finish(report, out)


# --------------------------------------------------------------------------------------------- swe-agent


def import_swe_agent(path: Path, **_: Any) -> ImportReport:
    """An SWE-agent ``.traj`` file: its ``history`` (what the model saw), as it is.

    Function-calling runs: ``tool_calls`` kept, a tool message's ``tool_call_ids`` list becomes
    ``tool_call_id`` (its first id; more ids get placeholder results). Text-action runs keep the action
    in the assistant text and observations as user messages. ``is_demo`` messages keep their role and
    content. SWE-agent's own keys (``agent``, ``message_type``, ``thought``, ``action``, ``is_demo``...)
    are dropped; a timestamp, if a message has one, is kept as ``_ts``.
    """
    report = ImportReport("swe-agent", str(path))
    data = _load_json(path)
    if not isinstance(data, dict):
        raise TranscriptError(f"{path}: expected a JSON object with 'history' (an SWE-agent .traj file)")
    history = data.get("history")
    if history is None:
        raise TranscriptError(f"{path}: no 'history' key (keys: {', '.join(sorted(data)) or 'none'})")
    if not isinstance(history, list):
        raise TranscriptError(f"{path}: 'history' must be a list")
    out: list[Message] = []
    for i, h in enumerate(history):
        where = f"{path}: history[{i}]"
        if not isinstance(h, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(h).__name__}")
        if "role" not in h:
            raise TranscriptError(f"{where}: message has no 'role' (keys: {', '.join(sorted(h)) or 'none'})")
        role = h.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise TranscriptError(f"{where}: unknown role {role!r} (expected system, user, assistant or tool)")
        content = h.get("content")
        if isinstance(content, list):
            content = _clean_parts(content, where)
        elif content is not None and not isinstance(content, str):
            raise TranscriptError(f"{where}: content must be a string, null or a list of parts")
        m: Message = {"role": role, "content": content if content is not None else ""}
        if h.get("is_demo"):
            report.notes["demo_message"] += 1
        if role == "assistant" and h.get("tool_calls"):
            m["tool_calls"] = _normalize_tool_calls(h["tool_calls"], where, report)
        if role == "tool":
            ids = h.get("tool_call_ids")
            tcid = h.get("tool_call_id")
            if not tcid and isinstance(ids, list) and ids:
                tcid = ids[0]
                if len(ids) > 1:
                    report.notes["observation_shared_by_calls"] += 1
            if not tcid:
                raise TranscriptError(f"{where}: tool message without tool_call_id(s)")
            m["tool_call_id"] = str(tcid)
        _take_ts(h, m)
        out.append(m)
    return _finish(report, out)


# --------------------------------------------------------------------------------------------- adp


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
        if isinstance(rec.get(key), list):
            return rec[key]
    return None


_ADP_ROLES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
              "gpt": "assistant", "tool": "tool"}


def import_adp(path: Path, record: int | None = None, **_: Any) -> ImportReport:
    """One record of an agent-data-protocol raw sample file (a JSON array of records).

    ``record`` picks it (0-based); by default the largest by content characters. Records with a
    ``messages`` list (SWE-smith: actions in assistant text, observations as user messages; SWE-Play:
    OpenHands text format, ``EXECUTION RESULT of [tool]`` as user) are chat messages already; nebius
    records (``trajectory`` of ``{role: system/user/ai, text}``, the system prompt in ``system_prompt``)
    map ``ai`` to assistant. Dataset keys (``mask``, ``cutoff_date``...) are dropped.
    """
    report = ImportReport("adp", str(path))
    data = _load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise TranscriptError(f"{path}: expected a JSON array of records")
    for r, rec in enumerate(data):
        if _adp_items(rec) is None:
            keys = ", ".join(sorted(rec)) if isinstance(rec, dict) else type(rec).__name__
            raise TranscriptError(f"{path}: record {r}: no 'messages' or 'trajectory' list (has: {keys})")
    if record is None:
        record = max(range(len(data)), key=lambda r: _record_chars(data[r]))
    elif not 0 <= record < len(data):
        raise TranscriptError(f"{path}: record {record} out of range (the file holds {len(data)} records, "
                              f"0 to {len(data) - 1})")
    report.record, report.records = record, len(data)
    out: list[Message] = []
    for i, item in enumerate(_adp_items(data[record]) or ()):
        where = f"{path}: record {record}: message {i}"
        if not isinstance(item, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(item).__name__}")
        raw_role = item.get("role", item.get("from"))
        if raw_role is None:
            raise TranscriptError(f"{where}: message has no 'role' (keys: {', '.join(sorted(item)) or 'none'})")
        role = _ADP_ROLES.get(str(raw_role))
        if role is None:
            raise TranscriptError(f"{where}: unknown role {raw_role!r} (expected one of "
                                  f"{', '.join(sorted(_ADP_ROLES))})")
        if raw_role != role:
            report.notes[f"role_{raw_role}_as_{role}"] += 1
        if "content" in item:
            content = item["content"]
        elif item.get("text") is not None:
            content = item["text"]
        elif item.get("value") is not None:
            content = item["value"]
        else:
            content = item.get("system_prompt") if role == "system" else None
        if isinstance(content, list):
            content = _clean_parts(content, where)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise TranscriptError(f"{where}: content must be a string, null or a list of parts")
        m: Message = {"role": role, "content": content}
        if role == "assistant" and item.get("tool_calls"):
            m["tool_calls"] = _normalize_tool_calls(item["tool_calls"], where, report)
        if role == "tool":
            if not item.get("tool_call_id"):
                raise TranscriptError(f"{where}: tool message without tool_call_id")
            m["tool_call_id"] = str(item["tool_call_id"])
        _take_ts(item, m)
        out.append(m)
    return _finish(report, out)


# --------------------------------------------------------------------------------------------- openai


_OPENAI_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "refusal", "audio", "function_call")


def import_openai(path: Path, **_: Any) -> ImportReport:
    """Chat-completions messages already: JSONL, a JSON array, or an object with a ``messages`` list.

    Messages are validated and passed through; ``_``-prefixed metadata is kept (an ISO ``_ts`` becomes
    epoch seconds), a top-level ``timestamp``/``created_at`` becomes ``_ts``, null fields are dropped.
    """
    report = ImportReport("openai", str(path))
    text = _read_text(path)
    stripped = text.lstrip()
    items: list[tuple[str, Any]]
    if stripped.startswith(("[", "{")) and not _looks_like_jsonl(stripped):
        data = jsoninput.loads(text, str(path))
        if isinstance(data, dict):
            if not isinstance(data.get("messages"), list):
                raise TranscriptError(f"{path}: a JSON object needs a 'messages' list")
            data = data["messages"]
        items = [(f"{path}: element {i}", m) for i, m in enumerate(data)]
    else:
        items = [(f"{path}:{lineno}", m) for lineno, m in _iter_jsonl(path, text)]
    out: list[Message] = []
    for where, m in items:
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
            msg["tool_calls"] = [{**tc, **_normalize_tool_calls([tc], where, report)[0]} for tc in msg["tool_calls"]]
        problems = message_shape_errors(msg)
        if problems:
            raise TranscriptError(f"{where}: {problems[0]}")
        out.append(msg)
    # Chat-completions input is checked like replay input: defects are named by line (run_import refuses
    # them unless asked to repair) and repaired the way ``replay --repair`` does.
    out, defects = check_tool_pairing(out)
    report.defects = [(items[i][0], problem, action) for i, problem, action in defects]
    if defects:
        report.repairs["recording_defect_repaired"] += len(defects)
    return _finish(report, out)


def _looks_like_jsonl(text: str) -> bool:
    """True when the first line is a complete JSON object on its own (JSONL), not the start of a document."""
    first = text.split("\n", 1)[0].strip()
    if not first.startswith("{"):
        return False
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "role" in value


# --------------------------------------------------------------------------------------------- API

Importer = Callable[..., ImportReport]

FORMATS: dict[str, Importer] = {
    "claude-code": import_claude_code,
    "swe-agent": import_swe_agent,
    "adp": import_adp,
    "openai": import_openai,
}


def resolve_format(fmt: str) -> str:
    """The canonical format name (``claude_code`` and ``Claude-Code`` name ``claude-code``)."""
    name = str(fmt).strip().lower().replace("_", "-")
    if name not in FORMATS:
        raise TranscriptError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return name


def import_report(path: str | Path, fmt: str, record: int | None = None) -> ImportReport:
    """Convert ``path`` from ``fmt``; the messages plus what was skipped and repaired."""
    name = resolve_format(fmt)
    p = Path(path)
    if record is not None and name != "adp":
        raise TranscriptError(f"--record applies to the adp format only, not {name}")
    if not p.is_file():
        raise TranscriptError(f"cannot read {p}: no such file" if not p.exists() else f"{p}: not a file")
    return FORMATS[name](p, record=record)


def import_transcript(path: str | Path, fmt: str, record: int | None = None) -> list[Message]:
    """The chat-completions messages of the session in ``path`` (format ``fmt``, see ``FORMATS``)."""
    return import_report(path, fmt, record).messages


def write_jsonl(messages: Iterable[Message], out: str | Path | IO[str]) -> int:
    """Write one JSON message per line to a path or a text stream; returns the number written."""
    if isinstance(out, (str, Path)):
        p = Path(out)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", encoding="utf-8") as fh:
            return write_jsonl(messages, fh)
    n = 0
    for m in messages:
        out.write(json.dumps(m, ensure_ascii=False) + "\n")
        n += 1
    return n


def run_import(fmt: str, path: str | Path, out: str | Path | None, console: Any, record: int | None = None,
               repair: bool = False) -> int:
    """The ``microcompact import`` command: convert, write, report; returns the exit code.

    Messages go to ``out``, or to stdout when ``out`` is None or ``-`` (then the report goes to stderr
    even if ``console`` prints to stdout). The report (counts, repairs, skipped material) goes to
    ``console`` (a rich Console, or None for plain stderr). 0 on success, 2 on bad input or options.
    A chat-completions (``openai``) file with recording defects (orphan tool results, calls with no result,
    duplicate call ids) is refused naming the first one's line, unless ``repair``: then each repair is
    reported with its line. (The other formats are conversions: their repairs are counted in the report.)
    """
    import sys

    to_stdout = out is None or str(out) == "-"
    if to_stdout and console is not None and getattr(console, "file", None) is sys.stdout:
        console = None  # keep stdout clean for the JSONL
    try:
        report = import_report(path, fmt, record)
    except TranscriptError as exc:
        _say(console, str(exc), prefix="error")
        return 2
    if not report.messages:
        _say(console, f"{path}: no messages to import (an empty session)", prefix="error")
        return 2
    if report.defects and not repair:
        where, problem, _ = report.defects[0]
        more = f" (and {len(report.defects) - 1} more defect(s))" if len(report.defects) > 1 else ""
        _say(console, f"{where}: {problem}{more}; import --repair drops orphan tool results, adds a result for "
                      "interrupted calls and renames duplicate tool-call ids, reporting each", prefix="error")
        return 2
    for where, problem, action in report.defects:
        _say(console, f"repaired {where}: {problem}: {action}")
    if to_stdout:
        write_jsonl(report.messages, sys.stdout)
        sys.stdout.flush()
        dest = "stdout"
    else:
        try:
            write_jsonl(report.messages, out)  # type: ignore[arg-type]
        except OSError as exc:
            _say(console, f"cannot write {out}: {exc.strerror or exc}", prefix="error")
            return 2
        dest = str(out)
    for line in report.describe():
        _say(console, line)
    _say(console, f"wrote {len(report.messages)} messages to {dest}")
    return 0


def _say(console: Any, text: str, prefix: str | None = None) -> None:
    if console is None:
        import sys

        print(f"{prefix}: {text}" if prefix else text, file=sys.stderr)
        return
    from rich.markup import escape

    head = f"[red]{prefix}:[/red] " if prefix else ""
    console.print(head + escape(text), highlight=False, soft_wrap=True)
