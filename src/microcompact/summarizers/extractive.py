"""Deterministic, offline summaries built from what an exchange plainly shows (no model)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message, content_text
from ..tokens import EstimateCounter
from .base import BATCH_SECTIONS, MICRO_SECTIONS, CountText
from .sections import LIST_MARKER, Section, clip, parse_sections, render_sections
from .validation import shorten_summary

_SHELL_KEYS = ("command", "cmd", "script")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "notebook_path", "target_file")
_PATTERN_KEYS = ("pattern", "query", "regex", "glob", "search")
_URL_KEYS = ("url", "uri")
_EDITOR_COMMANDS = {"view": "read", "create": "written", "str_replace": "edited", "insert": "edited"}
_FILE_VERBS = (
    (("read", "view", "open", "cat"), "read"),
    (("write", "create"), "written"),
    (("edit", "replace", "patch", "insert"), "edited"),
    (("delete", "remove"), "deleted"),
    (("grep", "glob", "search", "find", "list", "ls"), "searched"),
)

_EXIT_CODE = re.compile(
    r"(?i)\b(?:exit(?:ed)?(?: with)?(?: code| status)|return ?code|returncode|exit_code)\s*[:=]?\s*(-?\d+)"
)
_TRACEBACK_LAST = re.compile(r"Traceback \(most recent call last\):\n(?:(?:[ \t].*)?\n)*(?P<last>\S.*)")
_ERROR_LINE = re.compile(
    r"(?m)^[ \t]*(?:"
    r"(?:[A-Za-z_][\w.]*)?(?:Error|Exception)(?:\[\w+\])?:.*"  # ValueError: ..., error[E0308]: ...
    r"|(?:error|ERROR|fatal|FATAL|Fatal|panic)(?:\[\w+\])?[:!].*"  # error: ..., fatal: ...
    r"|E {2,}\S.*"  # pytest's failure detail lines
    r"|FAILED\b.*|FAIL\b.*|npm ERR!.*|\*\* \(\w+(?:\.\w+)*\).*"  # test failures, Elixir raises
    r"|\S+:\d+(?::\d+)?: (?:fatal )?error\b.*"  # compiler diagnostics
    r"|.*(?:command not found|No such file or directory|Permission denied).*"
    r")$"
)
_ERROR_RESULT = re.compile(r"^\s*(?:<tool_use_error>|Error\b|ERROR\b)")
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")
_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_REQUIREMENT = re.compile(r"(?i)\b(?:must|required?|requirements?|never|always|do not|don't|should not|shouldn't)\b")
# Users state preferences more softly than the assistant restates hard requirements.
_USER_CONSTRAINT = re.compile(r"(?i)\b(?:make sure|ensure|prefer|avoid|instead of|only)\b")
_DECISION = re.compile(
    r"(?i)\b(?:I'll|I will|let me|let's|going to|decided|decide to|instead|because|should|need to|plan)\b"
)
_REASON = re.compile(r"(?i)\b(?:because|since|so that|instead|rather than|decided|in order to|to avoid)\b")
_PATH_MENTION = re.compile(r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w-][\w.-]*\.[A-Za-z0-9]{1,8}\b")
_ITEM_CHARS = 240  # every bullet is clipped to this, which bounds a section's size
_COMMAND_CHARS = 120


@dataclass
class _Facts:
    """What an exchange says, before it is laid out in sections."""

    requests: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)  # path -> verbs, first use first
    commands: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def touch(self, path: str, verb: str) -> None:
        """Record ``verb`` on ``path``; a bare mention of a path also known by a longer name is dropped."""
        if verb == "mentioned" and any(known.endswith("/" + path.lstrip("./")) for known in self.files):
            return
        if verb != "mentioned":
            for known in [
                k for k, verbs in self.files.items() if verbs == ["mentioned"] and path.endswith("/" + k.lstrip("./"))
            ]:
                del self.files[known]
        verbs = self.files.setdefault(path, [])
        if verb not in verbs:
            verbs.append(verb)

    def file_items(self) -> list[str]:
        return [_file_item(path, verbs) for path, verbs in self.files.items()]


@dataclass
class _Call:
    name: str
    args: dict[str, Any]


class ExtractiveSummarizer:
    """Deterministic, offline summaries built from what an exchange plainly shows.

    Tool calls give files, commands and their outcomes (exit codes, errors); assistant prose gives
    decisions, requirements and questions. Merging appends new bullets to the previous summary's sections,
    drops duplicates and keeps only the newest ``max_items`` bullets per section, so the summary stays
    bounded however long the session runs. Same input, same output.
    """

    name = "extractive"

    def __init__(self, count_text: CountText | None = None, max_items: int = 10) -> None:
        self.count_text = count_text or EstimateCounter().count
        self.max_items = max_items

    def merge(self, summary: str, exchange: list[dict]) -> str:
        facts = _extract(exchange)
        new = {
            "Decisions": facts.decisions,
            "Requirements": [f"User asked: {r}" for r in facts.requests] + facts.requirements,
            "Files": facts.file_items(),
            "Commands and results": facts.commands,
            "Errors": facts.errors,
            "Open questions": facts.questions,
        }
        if not any(new.values()):
            # Nothing structured to extract (a plain answer): record that the turn was answered, so the
            # exchange can still be folded in instead of failing as "empty".
            new["Answers"] = [_answer_line(exchange)]
        return self._update(summary, new, MICRO_SECTIONS)

    def condense(self, summary: str, target_tokens: int) -> str:
        return shorten_summary(summary, target_tokens, self.count_text)

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        facts = _extract(messages)
        new = {
            "Goal": facts.requests,
            "Constraints and preferences": facts.requirements,
            "Completed actions": facts.completed,
            "Active state": _active_state(facts),
            "Blocked (exact errors)": facts.errors,
            "Key decisions (with reasons)": [d for d in facts.decisions if _REASON.search(d)],
            "Relevant files": facts.file_items(),
            "Open questions": facts.questions,
        }
        if not any(new.values()) and not summary.strip():
            # Nothing extractable (plain prose): still a usable summary, so batch compaction can go on.
            new["Completed actions"] = [_answer_line(messages)]
        return self._update(summary, new, BATCH_SECTIONS, replace=("Active state",), focus=focus)

    def _update(
        self,
        summary: str,
        new: dict[str, list[str]],
        order: tuple[str, ...],
        *,
        replace: tuple[str, ...] = (),
        focus: str | None = None,
    ) -> str:
        """``summary`` with ``new`` bullets merged into its sections (created as needed, in ``order``)."""
        sections = parse_sections(summary)
        by_name = {s.name: s for s in sections}
        terms = _focus_terms(focus)
        for title, items in new.items():
            if not items:
                continue
            section = by_name.get(title.lower())
            if section is None:
                section = by_name[title.lower()] = Section(f"### {title}")
                sections.append(section)
            items = [clip(item, _ITEM_CHARS) for item in items]
            if title not in replace:
                items = _merge_items(section.items, items, files=title in _FILE_SECTIONS)
            section.items = _keep_newest(items, self.max_items, terms)
        rank = {title.lower(): i for i, title in enumerate(order)}
        sections.sort(key=lambda s: rank.get(s.name, -1 if not s.heading else len(order)))
        return render_sections(sections)


_FILE_SECTIONS = ("Files", "Relevant files")


def _answer_line(exchange: list[dict]) -> str:
    """The gist of the last assistant text in ``exchange`` (or that it replied with no text)."""
    for message in reversed(exchange):
        if message.get("role") == "assistant":
            text = " ".join(content_text(message).split())
            if text:
                return f"Replied: {clip(text, _ITEM_CHARS)}"
    return "Replied without text"


def _merge_items(old: list[str], new: list[str], *, files: bool) -> list[str]:
    """Old bullets then new ones; a bullet seen again moves to the end (file bullets union their verbs)."""
    merged = {_item_key(item, files): item for item in old}
    for item in new:
        key = _item_key(item, files)
        previous = merged.pop(key, None)
        if files and previous is not None:
            item = _file_item(key, _file_verbs(previous) + _file_verbs(item))
        merged[key] = item
    return list(merged.values())


def _item_key(item: str, files: bool) -> str:
    return item.split(" — ", 1)[0] if files else " ".join(item.lower().split())


def _file_item(path: str, verbs: list[str]) -> str:
    unique = list(dict.fromkeys(verbs))
    if len(unique) > 1 and "mentioned" in unique:
        unique.remove("mentioned")
    return f"{path} — {', '.join(unique)}"


def _file_verbs(item: str) -> list[str]:
    _, _, verbs = item.partition(" — ")
    return [v.strip() for v in verbs.split(",") if v.strip()]


def _keep_newest(items: list[str], limit: int, terms: list[str]) -> list[str]:
    """The newest ``limit`` items in order; items mentioning a focus term are kept first."""
    if len(items) <= limit:
        return items
    favoured = set([i for i, item in enumerate(items) if _mentions(item, terms)][-limit:])
    others = [i for i in range(len(items)) if i not in favoured]
    room = limit - len(favoured)
    kept = favoured | set(others[len(others) - room :] if room else ())
    return [items[i] for i in sorted(kept)]


def _focus_terms(focus: str | None) -> list[str]:
    return re.findall(r"[\w./-]{3,}", focus.lower()) if focus else []


def _mentions(item: str, terms: list[str]) -> bool:
    lowered = item.lower()
    return any(term in lowered for term in terms)


def _active_state(facts: _Facts) -> list[str]:
    """Where the work stands at the end of the span: last plan, last command, last file touched."""
    state = []
    if facts.decisions:
        state.append(f"Last stated plan: {facts.decisions[-1]}")
    if facts.commands:
        state.append(f"Last command: {facts.commands[-1]}")
    if facts.files:
        path, verbs = list(facts.files.items())[-1]
        state.append(f"Last file touched: {_file_item(path, verbs)}")
    if facts.errors:
        state.append(f"Last error: {facts.errors[-1]}")
    return state


def _extract(messages: Iterable[Message]) -> _Facts:
    facts = _Facts()
    calls: dict[str, _Call] = {}
    for message in messages:
        role = message.get("role")
        text = content_text(message)
        if role == "user":
            _read_user(facts, text)
        elif role == "assistant":
            _read_prose(facts, text)
            for call in message.get("tool_calls") or ():
                parsed = _parse_call(call)
                calls[str(call.get("id"))] = parsed
                _read_call(facts, parsed)
        elif role == "tool":
            _read_result(facts, calls.get(str(message.get("tool_call_id"))), text)
    return facts


def _read_user(facts: _Facts, text: str) -> None:
    if text.strip():
        facts.requests.append(clip(text, _ITEM_CHARS))
    for sentence in _sentences(text):
        if _REQUIREMENT.search(sentence) or _USER_CONSTRAINT.search(sentence):
            facts.requirements.append(sentence)


def _read_prose(facts: _Facts, text: str) -> None:
    prose = _CODE_FENCE.sub(" ", text)
    for sentence in _sentences(prose):
        if sentence.endswith("?"):
            facts.questions.append(sentence)
        elif _REQUIREMENT.search(sentence):
            facts.requirements.append(sentence)
        elif _DECISION.search(sentence):
            facts.decisions.append(sentence)
    for path in _PATH_MENTION.findall(prose):
        facts.touch(path, "mentioned")


def _sentences(text: str) -> Iterator[str]:
    for raw in _SENTENCE_SPLIT.split(text):
        sentence = LIST_MARKER.sub("", raw).strip().strip("#").strip()
        if len(sentence) >= 12:
            yield clip(sentence, _ITEM_CHARS)


def _parse_call(call: dict[str, Any]) -> _Call:
    function = call.get("function") or {}
    raw = function.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        args = None
    return _Call(str(function.get("name") or "tool"), args if isinstance(args, dict) else {})


def _first_arg(args: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _editor_verb(call: _Call) -> str | None:
    """Editor tools that take ``command`` plus ``path`` (view/create/str_replace) are file operations."""
    command = call.args.get("command")
    if isinstance(command, str) and command in _EDITOR_COMMANDS and _first_arg(call.args, _PATH_KEYS):
        return _EDITOR_COMMANDS[command]
    return None


def _read_call(facts: _Facts, call: _Call) -> None:
    path = _first_arg(call.args, _PATH_KEYS)
    if path and (_editor_verb(call) or not _first_arg(call.args, _SHELL_KEYS)):
        facts.touch(path, _editor_verb(call) or _file_verb(call.name))


def _file_verb(tool_name: str) -> str:
    lowered = tool_name.lower()
    for words, verb in _FILE_VERBS:
        if any(word in lowered for word in words):
            return verb
    return lowered


def _read_result(facts: _Facts, call: _Call | None, result: str) -> None:
    """Outcome of one tool call: a command bullet, a completed action, error bullets."""
    if call is None:  # its call lies outside the exchange: only a failure is worth keeping
        if _ERROR_RESULT.match(result):
            facts.errors += [f"tool: {line}" for line in _error_lines(result, None, True)]
        return
    editor_verb = _editor_verb(call)
    command = None if editor_verb else _first_arg(call.args, _SHELL_KEYS)
    path = _first_arg(call.args, _PATH_KEYS)
    file_verb = editor_verb or _file_verb(call.name)
    exit_code = _exit_code(result) if command else None
    failed = bool(_ERROR_RESULT.match(result)) or (exit_code is not None and exit_code != 0)
    if command:
        source = f"`{clip(command.splitlines()[0], _COMMAND_CHARS)}`"
        facts.commands.append(f"{source} → {_outcome(result, exit_code, failed)}")
        if not failed:
            facts.completed.append(f"Ran {source}")
    elif path and file_verb != "searched":
        source = f"{call.name} {path}"
        if not failed and file_verb in ("written", "edited", "deleted"):
            facts.completed.append(f"{file_verb.capitalize()} {path}")
    else:
        target = _first_arg(call.args, _PATTERN_KEYS + _URL_KEYS) or _first_arg(call.args, ("description",))
        source = f"{call.name} `{clip(target, _COMMAND_CHARS)}`" if target else call.name
        if path:
            source += f" in {path}"
        facts.commands.append(f"{source} → {_line_count(result)}")
    if command or failed:
        facts.errors += [f"{source}: {line}" for line in _error_lines(result, exit_code, failed)]


def _exit_code(result: str) -> int | None:
    match = _EXIT_CODE.search(result)
    return int(match.group(1)) if match else None


def _outcome(result: str, exit_code: int | None, failed: bool) -> str:
    status = f"exit {exit_code}" if exit_code is not None else ("error" if failed else "")
    last = next((line for line in reversed(result.splitlines()) if line.strip() and not _EXIT_CODE.search(line)), "")
    last = clip(last, 100)
    if status and last:
        return f"{status}: {last}"
    return status or last or "no output"


def _line_count(result: str) -> str:
    lines = sum(1 for line in result.splitlines() if line.strip())
    return f"{lines} line{'s' if lines != 1 else ''} of output" if lines else "no output"


def _error_lines(result: str, exit_code: int | None, failed: bool, limit: int = 3) -> list[str]:
    """The telling error lines of a result: a traceback's last line, then lines that look like errors."""
    found: list[str] = []
    for match in _TRACEBACK_LAST.finditer(result):
        found.append(match["last"])
    found += [m.group().strip() for m in _ERROR_LINE.finditer(result)]
    lines = list(dict.fromkeys(clip(line, _ITEM_CHARS) for line in found))[:limit]
    if not lines and failed:
        plain = _TOOL_ERROR_TAG.sub("", result)
        first = next((line for line in plain.splitlines() if line.strip() and not _EXIT_CODE.search(line)), "")
        code = f"exit {exit_code}" if exit_code is not None else "failed"
        lines = [f"{code}: {clip(first, _ITEM_CHARS)}" if first else code]
    return lines


def describe_tool_result(call: dict[str, Any] | None, result: str) -> str:
    """A one-line stand-in for a tool output: tool, target, size and exit status.

    E.g. ``[read_file] src/app.py (412 lines)`` or ``[Bash] `pytest -x` (38 lines, exit 1)``. Batch
    compaction's cheap phase puts these where old outputs were; the originals stay in the store.
    """
    parsed = _parse_call(call) if call else _Call("tool", {})
    target = (
        _first_arg(parsed.args, _PATH_KEYS)
        or _first_arg(parsed.args, _SHELL_KEYS)
        or _first_arg(parsed.args, _PATTERN_KEYS + _URL_KEYS)
    )
    lines = len(result.splitlines())
    facts = [f"{lines} line{'s' if lines != 1 else ''}" if lines > 1 else f"{len(result)} chars"]
    code = _exit_code(result)
    if code is not None:
        facts.append(f"exit {code}")
    elif _ERROR_RESULT.match(result):
        facts.append("error")
    where = f" {clip(target.splitlines()[0], _COMMAND_CHARS)}" if target else ""
    return f"[{parsed.name}]{where} ({', '.join(facts)})"
