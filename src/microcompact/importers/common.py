"""What every importer shares: the report, reading helpers, timestamps, the repair pass, JSONL output.

Each format module (``claude_code``, ``codex``, ``openhands``, ``aider``...) turns its source into a list of
chat-completions messages and hands it to :func:`finish`, which repairs it (see :func:`repair`) and checks
that the result is a valid transcript. Keeping this in one place is what makes every format's output pass
:func:`microcompact.contract.role_sequence_errors` the same way.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from .. import jsoninput
from ..keys import META_KEY
from ..keys import TS_KEY as TS_KEY  # where the format modules have always found it
from ..messages import Message, TranscriptError, validate_message
from ..outfile import write_atomically
from ..properties import DROP_DUPLICATES, is_empty_assistant, repair_tool_pairing, role_sequence_errors
from ..properties import NO_RESULT as NO_RESULT  # the placeholder result, by its importers' name

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
        """How many changes were made in all (the report's headline figure)."""
        return sum(self.repairs.values())

    def roles(self) -> Counter[str]:
        """Messages per role, for the summary line."""
        return Counter(str(m.get("role")) for m in self.messages)

    def tool_call_count(self) -> int:
        """Tool calls over all assistant messages, for the summary line."""
        return sum(len(m.get("tool_calls") or ()) for m in self.messages)

    def describe(self) -> list[str]:
        """Human-readable lines: counts, repairs, skipped material."""
        roles = self.roles()
        role_text = ", ".join(f"{r} {roles[r]}" for r in ("system", "user", "assistant", "tool") if roles[r])
        where = f" (record {self.record} of {self.records})" if self.record is not None else ""
        lines = [
            f"{self.source}{where}: {len(self.messages)} messages ({role_text}), {self.tool_call_count()} tool calls"
        ]
        if self.repairs:
            lines.append(
                f"repairs ({self.repair_total}): " + ", ".join(f"{k} {v}" for k, v in sorted(self.repairs.items()))
            )
        else:
            lines.append("repairs: none")
        if self.notes:
            lines.append("skipped/converted: " + ", ".join(f"{k} {v}" for k, v in sorted(self.notes.items())))
        if self.compact_summary_indices:
            lines.append(
                "agent's own compaction summary at message index "
                + ", ".join(str(i) for i in self.compact_summary_indices)
            )
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
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    return None


def read_text(path: Path) -> str:
    """The file as UTF-8 text; unreadable or undecodable files become a one-line TranscriptError."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_json(path: Path) -> Any:
    """The whole file as strict JSON (no NaN/Infinity, lone surrogates or deep nesting)."""
    return jsoninput.loads(read_text(path), str(path))


def folder_files(path: Path) -> list[Path]:
    """The ``*.json`` files of a folder in natural name order (``2.json`` before ``10.json``)."""
    files = [f for f in path.glob("*.json") if f.is_file()]
    if not files:
        raise TranscriptError(f"{path}: a folder with no .json files")
    return sorted(files, key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)])


def iter_jsonl(path: Path, text: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; a bad line raises naming file and line."""
    text = read_text(path) if text is None else text
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield lineno, jsoninput.loads(line, f"{path}:{lineno}")


def args_string(arguments: Any) -> str:
    """Tool-call arguments as the JSON string chat-completions requires (objects are serialized)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


def clean_parts(parts: list[Any], where: str) -> list[Any]:
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


def chat_content(content: Any, where: str) -> str | list[Any]:
    """Chat-completions content as a dataset or log holds it: a string, null (read as "") or a list of
    parts (cleaned); anything else is an error."""
    if isinstance(content, list):
        return clean_parts(content, where)
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TranscriptError(f"{where}: content must be a string, null or a list of parts")
    return content


def text_only(parts: list[Any]) -> str | None:
    """The joined text of ``parts`` when every part is text, else None (keep the list)."""
    if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return "\n".join(str(p.get("text", "")) for p in parts)
    return None


def text_or_parts(parts: list[Any]) -> str | list[Any]:
    """Chat content from parts: one string when every part is text (joined by line breaks), else the parts."""
    text = text_only(parts)
    return text if text is not None else parts


def normalize_tool_calls(calls: Any, where: str, report: ImportReport) -> list[dict[str, Any]]:
    """Check ``calls`` and reduce each to ``id``/``type``/``function``, counting serialized arguments."""
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
        out.append(
            {
                "id": str(tc["id"]),
                "type": "function",
                "function": {"name": str(fn["name"]), "arguments": args_string(args)},
            }
        )
    return out


def take_ts(
    source: dict[str, Any], target: Message, keys: Iterable[str] = (TS_KEY, "timestamp", "created_at", "created")
) -> None:
    """Copy the first usable timestamp of ``source`` to ``target[TS_KEY]`` (numbers before 1973 are not times)."""
    for key in keys:
        if key in source:
            ts = to_epoch(source[key])
            if ts is not None and ts > 1e8:
                target[TS_KEY] = ts
                return


# How a format's tool message names the call it answers: (record, where, report) -> the call id.
CallId = Callable[[dict[str, Any], str, ImportReport], str]


def chat_message(
    record: dict[str, Any], role: str, content: Any, call_id: CallId, where: str, report: ImportReport
) -> Message:
    """A record that holds a chat-completions message among its own keys (a dataset's, an agent's), as that
    message: ``content`` checked, an assistant's ``tool_calls`` normalized, a tool message's call id read by
    ``call_id``, the timestamp taken; the record's other keys dropped."""
    m: Message = {"role": role, "content": chat_content(content, where)}
    if role == "assistant" and record.get("tool_calls"):
        m["tool_calls"] = normalize_tool_calls(record["tool_calls"], where, report)
    if role == "tool":
        m["tool_call_id"] = call_id(record, where, report)
    take_ts(record, m)
    return m


def compact_summary_indices(messages: list[Message]) -> list[int]:
    """Where the agent's own compaction summaries sit (messages marked ``compact_summary`` by an importer)."""
    return [
        i for i, m in enumerate(messages) if isinstance(m.get(META_KEY), dict) and m[META_KEY].get("compact_summary")
    ]


# --------------------------------------------------------------------------------------------- repair


def repair(messages: list[Message], report: ImportReport) -> list[Message]:
    """Make ``messages`` pass ``role_sequence_errors``, counting every change in ``report.repairs``.

    Tool pairing is repaired by :func:`microcompact.properties.repair_tool_pairing` under its
    ``DROP_DUPLICATES`` policy, each repair counted by its kind:

    * a tool result whose call is not open in the assistant message before it is dropped
      (``orphan_tool_result_dropped``; a second result for the same call: ``duplicate_tool_result_dropped``);
    * a call without a result gets a ``[no result recorded]`` tool message (``missing_tool_result_added``);
    * the same call id twice in one assistant message: the later call is dropped (``duplicate_tool_call_dropped``).

    Then the roles:

    * a system/developer message after the conversation started becomes a user message
      (``late_system_message_as_user``);
    * an assistant message with neither text nor tool calls is dropped (``empty_assistant_dropped``).
    """
    paired, repairs = repair_tool_pairing(messages, DROP_DUPLICATES)
    for r in repairs:
        report.repairs[r.kind] += 1
    return _roles_repaired(paired, report)


def _roles_repaired(messages: list[Message], report: ImportReport) -> list[Message]:
    """Late instructions made user messages, empty assistant messages dropped (pairing already holds: an empty
    assistant message has no calls, so no result follows it)."""
    out: list[Message] = []
    started = False
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            if started:
                m = {**m, "role": "user"}
                report.repairs["late_system_message_as_user"] += 1
        elif role != "tool":
            started = True
            if is_empty_assistant(m):
                report.repairs["empty_assistant_dropped"] += 1
                continue
        out.append(m)
    return out


def finish(report: ImportReport, messages: list[Message], *, own_summaries: bool = False) -> ImportReport:
    """Repair ``messages``, check the result and store it in ``report``: every importer ends here.
    ``own_summaries``: the format records the agent's own compaction summaries (the importer marked them),
    and the report says where they sit."""
    messages = repair(messages, report)
    for i, m in enumerate(messages):
        validate_message(m, f"{report.source}: output message {i}")
    errors = role_sequence_errors(messages)
    if errors:  # repair() should make this impossible
        raise TranscriptError(f"{report.source}: conversion produced an invalid transcript: {errors[0]}")
    report.messages = messages
    if own_summaries:
        report.compact_summary_indices = compact_summary_indices(messages)
    return report


# --------------------------------------------------------------------------------------------- output


def write_jsonl(messages: Iterable[Message], out: str | Path | IO[str]) -> int:
    """Write one JSON message per line to a path or a text stream; returns the number written. A path is
    written whole or not at all, and only as a file (:func:`microcompact.outfile.write_atomically`: a symlink
    is written through, a device, FIFO or folder there is a NotAFile, a ValueError); its folder is created."""
    if isinstance(out, (str, Path)):
        p = Path(out)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        kept = list(messages)
        write_atomically(p, (json.dumps(m, ensure_ascii=False) + "\n" for m in kept))
        return len(kept)
    n = 0
    for m in messages:
        out.write(json.dumps(m, ensure_ascii=False) + "\n")
        n += 1
    return n


# --------------------------------------------------------------------------------------------- registry entry

Importer = Callable[..., ImportReport]


@dataclass(frozen=True)
class ImportFormat:
    """One importable format as the registry knows it: what ``--from NAME`` runs and how ``auto`` spots it.

    ``sniff`` gets the start of the file (see :mod:`.sniffing`) and must be cheap and side-effect free;
    it answers "this looks like my format", not "this will import cleanly" (the importer still checks).
    """

    name: str
    description: str
    importer: Importer
    sniff: Callable[[str], bool]
    # True when a recording may also be a folder of JSON files, one record each (read in name order).
    folders: bool = False
