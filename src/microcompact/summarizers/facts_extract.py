"""Reading facts out of messages: which files a tool call touched, which commands failed and why, test counts.

Understands the common agent tools by their names and argument keys: Claude Code's Read, Edit, Write,
Bash, Grep and Glob, SWE-agent's ``str_replace_editor`` (``command`` plus ``path``) and its ``open``,
``create``, ``edit`` and ``insert`` (which act on the file opened last), and shell commands that plainly
read, edit or delete files (``cat``, ``sed -i``, ``rm``).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..messages import Message, content_text
from .facts_model import (
    COMMAND_CHARS,
    GIST_CHARS,
    REASON_CHARS,
    Facts,
    Failure,
    FileFact,
    TestRun,
    ToolKind,
    command_key,
    one_line,
)
from .provenance import EDIT_TEXT, FILE_TEXT, OUTPUT, attributed, flagged, tainted_from

SHELL_KEYS = ("command", "cmd", "script")
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "notebook_path", "target_file")
PATTERN_KEYS = ("pattern", "query", "regex", "glob", "search", "file_name")
URL_KEYS = ("url", "uri")
_EDITOR_COMMANDS = {"view": "read", "create": "created", "str_replace": "edited", "insert": "edited"}
_TOOL_STATES = (
    (("multiedit", "edit", "replace", "patch", "insert", "notebookedit"), "edited"),
    (("write", "create"), "created"),
    (("read", "view", "open", "cat"), "read"),
    (("delete", "remove"), "deleted"),
    (("grep", "glob", "search", "find", "list", "ls"), "searched"),
)
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_ACTS_ON_OPEN_FILE = ("edit", "insert", "append", "replace")  # SWE-agent tools without a path argument
_NEW_TEXT_KEYS = ("new_string", "new_str", "replace", "text", "content", "file_text", "new_source")
_OLD_TEXT_KEYS = ("old_string", "old_str", "search")

EXIT_CODE = re.compile(
    r"(?i)(?:\b(?:exit(?:ed)?(?: with)?(?: code| status)|return ?code|returncode|exit_code)\s*[:=]?\s*"
    r"|<exit_code>)(-?\d+)"
)
ERROR_RESULT = re.compile(r"^\s*(?:<tool_use_error>|Error\b|ERROR\b)")
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")
_TRACEBACK_LAST = re.compile(r"Traceback \(most recent call last\):\n(?:(?:[ \t].*)?\n)*(?P<last>\S.*)")
ERROR_LINE = re.compile(
    r"(?m)^[ \t]*(?:"
    r"(?:[A-Za-z_][\w.]*)?(?:Error|Exception)(?:\[\w+\])?:.*"  # ValueError: ..., error[E0308]: ...
    r"|(?:error|ERROR|fatal|FATAL|Fatal|panic)(?:\[\w+\])?[:!].*"  # error: ..., fatal: ...
    r"|E {2,}\S.*"  # pytest's failure detail lines
    r"|FAILED\b.*|FAIL\b.*|npm ERR!.*|\*\* \(\w+(?:\.\w+)*\).*"  # test failures, Elixir raises
    r"|\S+:\d+(?::\d+)?: (?:fatal )?error\b.*"  # compiler diagnostics
    r"|.*(?:command not found|No such file or directory|Permission denied|permission denied).*"
    r")$"
)
# A failure's output without error-looking lines: the first line saying what went wrong, else its first line.
_TELLING = re.compile(
    r"(?i)\b(?:fail(?:ed|ure|s)?|cannot|can't|could not|couldn't|not found|no such|denied|invalid|unknown|"
    r"missing|refused|unexpected|undefined|found \d+ \w+|not allowed|rejected)\b"
)
_JSON_PAIR = re.compile(r'"(?P<key>[A-Za-z_]\w*)"\s*:\s*"(?P<value>(?:[^"\\\n]|\\.)*)"')
_EXUNIT = re.compile(r"\b(\d+) tests?, (\d+) failures?\b")
_COUNTS = re.compile(r"\b(\d+) (passed|failed|errors?)\b")
_DEFINITION = re.compile(
    r"^\s*(?:export\s+|pub\s+|async\s+|public\s+|private\s+|static\s+)*"
    r"(?:def|defp|defmodule|defmacro|class|function|func|fn|interface|struct|enum|trait|module|type)\s+"
    r"(?P<name>[A-Za-z_][\w.:]*)"
)
_LINE_NUMBER = re.compile(r"^\s*\d+[→\t|:]\s?")
_TEST_COMMAND = re.compile(r"(?i)test|spec|jest|vitest|tox|nox|check")
_SHELL_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")
_HAS_SUFFIX = re.compile(r"[^/]\.[A-Za-z0-9]{1,8}$")
_SHELL_READS = {"cat", "head", "tail", "less", "more", "nl", "wc"}
_LOOKS_LIKE_FILE = re.compile(r"^[\w./~-]*[\w-]\.[A-Za-z0-9]{1,8}$|^[\w.~-]*/[\w./-]+$")


@dataclass
class Call:
    name: str
    args: dict[str, Any]


def parse_call(call: dict[str, Any]) -> Call:
    """A tool call's name and arguments. Arguments cut head-and-tail to bound a summarizer's input are no
    longer JSON: their complete ``"key": "string"`` pairs (the path usually comes first) are read instead."""
    function = call.get("function") or {}
    raw = function.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        args = _string_pairs(raw) if isinstance(raw, str) else None
    return Call(str(function.get("name") or "tool"), args if isinstance(args, dict) else {})


def _string_pairs(raw: str) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for match in _JSON_PAIR.finditer(raw):
        try:
            pairs.setdefault(match["key"], json.loads(f'"{match["value"]}"'))
        except json.JSONDecodeError:
            continue
    return pairs


def first_arg(args: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def editor_state(call: Call) -> str | None:
    """Editor tools that take ``command`` plus ``path`` (view/create/str_replace) are file operations."""
    command = call.args.get("command")
    if isinstance(command, str) and command in _EDITOR_COMMANDS and first_arg(call.args, PATH_KEYS):
        return _EDITOR_COMMANDS[command]
    return None


def shell_command(call: Call) -> str | None:
    """The shell command a call runs, or None for file tools (an editor's ``command`` is not a shell)."""
    return None if editor_state(call) else first_arg(call.args, SHELL_KEYS)


def tool_state(tool_name: str) -> str | None:
    """The file state a tool's name implies, matched by whole words (``MultiEdit``, ``read_file``,
    ``find_file``), so ``run_tools`` is no ``ls``."""
    words = {w.lower() for w in _NAME_WORDS.findall(tool_name)} | {tool_name.lower()}
    for names, state in _TOOL_STATES:
        if words & set(names):
            return state
    return None


def changed_paths(call: Call) -> list[str]:
    """The paths a call edits or writes (a file tool, an editor's create/str_replace, ``sed -i``): what a
    read of them before it no longer shows as current. Deletes and moves are the file ledger's."""
    command = shell_command(call)
    if command is not None:
        return [path for path, state, _ in _shell_files(command) if state == "edited"]
    state = editor_state(call) or tool_state(call.name)
    path = first_arg(call.args, PATH_KEYS)
    return [path] if path and state in ("edited", "created") else []


_KIND_OF_STATE = {
    "read": ToolKind.READ,
    "searched": ToolKind.SEARCH,
    "edited": ToolKind.EDIT,
    "created": ToolKind.EDIT,
    "deleted": ToolKind.EDIT,
}


def tool_kind(call: Call) -> ToolKind:
    """The kind of a call by its tool's name and arguments (Claude Code's ``Read``/``Grep``/``Bash``, Codex's
    ``shell``/``apply_patch``, SDK-style ``read_file``/``run_shell_command``, editor tools' ``command``).
    A shell command that only reads files (``cat``, ``head``) is a read."""
    command = shell_command(call)
    if command is not None:
        touched = _shell_files(command)
        if touched and all(state == "read" for _, state, _ in touched):
            return ToolKind.READ
        return ToolKind.COMMAND
    state = editor_state(call) or tool_state(call.name)
    return _KIND_OF_STATE.get(state or "", ToolKind.OTHER)


def exit_code(result: str) -> int | None:
    match = EXIT_CODE.search(result)
    return int(match.group(1)) if match else None


def error_lines(result: str, code: int | None, failed: bool, limit: int = 3) -> list[str]:
    """The telling error lines of a result: a traceback's last line, then lines that look like errors;
    for a failure with neither, its first line."""
    found = [m["last"] for m in _TRACEBACK_LAST.finditer(result)]
    found += [m.group().strip() for m in ERROR_LINE.finditer(result)]
    lines = list(dict.fromkeys(one_line(line, REASON_CHARS) for line in found if line.strip()))[:limit]
    if not lines and failed:
        plain = [line for line in _TOOL_ERROR_TAG.sub("", result).splitlines() if line.strip()]
        plain = [line for line in plain if not EXIT_CODE.search(line)]
        telling = next((line for line in plain if _TELLING.search(line)), plain[0] if plain else "")
        lines = [one_line(telling, REASON_CHARS)] if telling else []
    return lines


def telling_line(result: str, code: int | None) -> str:
    """The one line of a failed result that says why, as the ledger keeps it: quoted, with its source,
    when it could pass for an order or a role's turn, or comes after an imitation in the output (a forged
    prompt printed by the tool), so the ledger never states it in its own words."""
    reasons = error_lines(result, code, True)
    if not reasons:
        return ""
    if flagged(reasons[0]) or tainted_from(result) < len(result):
        return attributed(OUTPUT, reasons[0], REASON_CHARS)
    return reasons[0]


def test_counts(result: str) -> tuple[int, int] | None:
    """(passed, failed) from a test runner's summary line (ExUnit, pytest, jest, cargo), the last one."""
    exunit = list(_EXUNIT.finditer(result))
    if exunit:
        tests, failures = int(exunit[-1][1]), int(exunit[-1][2])
        return max(0, tests - failures), failures
    lines = [line for line in result.splitlines() if _COUNTS.search(line)]
    if not lines:
        return None
    counts = {"passed": 0, "failed": 0}
    for n, word in _COUNTS.findall(lines[-1]):
        counts["passed" if word == "passed" else "failed"] += int(n)
    return counts["passed"], counts["failed"]


def run_counts(command: str, result: str) -> tuple[int, int] | None:
    """(passed, failed) when ``command`` runs tests and its output says how many passed and failed."""
    return test_counts(result) if _TEST_COMMAND.search(command) else None


def extract_file_facts(messages: Iterable[Message]) -> Facts:
    """The files, failures and test runs ``messages`` show, in the order they happened."""
    reader = _Reader()
    calls: dict[str, Call] = {}
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            for raw in message.get("tool_calls") or ():
                calls[str(raw.get("id"))] = parse_call(raw)
        elif role == "tool":
            paired = calls.get(str(message.get("tool_call_id")))
            if paired is not None:
                reader.read(paired, content_text(message))
    return reader.facts


class _Reader:
    """Folds tool calls and their results into :class:`Facts`, remembering SWE-agent's open file."""

    def __init__(self) -> None:
        self.facts = Facts()
        self.open_file: str | None = None

    def read(self, call: Call, result: str) -> None:
        command = shell_command(call)
        if command is not None:
            self._shell(command, result)
        else:
            self._file_tool(call, result)

    def _shell(self, command: str, result: str) -> None:
        code = exit_code(result)
        failed = bool(ERROR_RESULT.match(result)) or (code is not None and code != 0)
        shown = one_line(command, COMMAND_CHARS)
        counts = run_counts(command, result)
        if counts is not None:
            self.facts.tested(TestRun(shown, *counts))
        if failed:
            reason = telling_line(result, code)
            self.facts.fail(Failure(shown, f"exit {code}" if code is not None else "error", reason))
        elif counts is None or counts[1] == 0:
            self.facts.succeed(command_key(shown))
        if not failed:
            for path, state, origin in _shell_files(command):
                if state == "renamed":
                    self.facts.rename(origin, path)
                else:
                    gist = f"by '{one_line(command, 60)}'"
                    self.facts.touch(FileFact(path, state, 1 if state == "edited" else 0, gist))

    def _file_tool(self, call: Call, result: str) -> None:
        path = first_arg(call.args, PATH_KEYS)
        state = editor_state(call) or tool_state(call.name)
        if path is None and call.name.lower() in _ACTS_ON_OPEN_FILE:
            path, state = self.open_file, "edited"
        if state == "searched" and path is None:
            path = first_arg(call.args, ("dir", "directory"))
        if path is None or state is None:
            return
        failed = bool(ERROR_RESULT.match(result))
        subject = f"{call.name} {one_line(path, COMMAND_CHARS)}"
        if failed:
            self.facts.fail(Failure(subject, "error", telling_line(result, None)))
            return
        self.facts.succeed(command_key(subject))
        if state == "created" and re.search(r"(?i)\b(?:updated|overwr|modified)", result[:300]):
            state = "edited"  # Write over an existing file
        edits = 1 if state == "edited" else 0
        self.facts.touch(FileFact(path, state, edits, _gist(call, state, result)))
        if state in ("read", "created") and call.name.lower() in ("open", "create", "str_replace_editor"):
            self.open_file = path


def _gist(call: Call, state: str, result: str) -> str:
    """One line on what changed (edits, new files) or what was seen (reads, searches)."""
    if state == "searched":
        pattern = first_arg(call.args, PATTERN_KEYS)
        return one_line(f"{call.name} '{pattern}'", GIST_CHARS) if pattern else ""
    if state == "read":
        return _definitions(result) or _size(result)
    new = first_arg(call.args, _NEW_TEXT_KEYS) or ""
    old = first_arg(call.args, _OLD_TEXT_KEYS) or ""
    if state == "created":
        return _definitions(new) or _quoted_if_flagged(FILE_TEXT, _first_line(new))
    old_lines = {line.strip() for line in old.splitlines()}
    changed = next((line for line in new.splitlines() if line.strip() and line.strip() not in old_lines), "")
    if changed and flagged(changed):
        return attributed(EDIT_TEXT, changed, GIST_CHARS)
    if changed:
        return one_line(f"+ {changed.strip()}", GIST_CHARS)
    return "lines removed" if old and not new.strip() else ""


def _definitions(text: str, shown: int = 4) -> str:
    names = []
    for line in text.splitlines():
        match = _DEFINITION.match(_LINE_NUMBER.sub("", line))
        if match and match["name"] not in names:
            names.append(match["name"])
    if not names:
        return ""
    more = f" (+{len(names) - shown})" if len(names) > shown else ""
    return one_line(f"defines {', '.join(names[:shown])}{more}", GIST_CHARS)


def _size(text: str) -> str:
    lines = sum(1 for line in text.splitlines() if line.strip())
    return f"{lines} lines" if lines else ""


def _quoted_if_flagged(source: str, gist: str) -> str:
    """A gist taken from written text, quoted with its source when it reads as an order or a role's turn."""
    return attributed(source, gist, GIST_CHARS) if gist and flagged(gist) else gist


def _first_line(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return one_line(line, GIST_CHARS)


def _shell_files(command: str) -> list[tuple[str, str, str]]:
    """(path, state, origin) for the files a shell command plainly reads (cat, head, ...), edits
    (sed -i), deletes (rm) or moves (mv, git mv: state "renamed", ``origin`` the old path)."""
    found: list[tuple[str, str, str]] = []
    for segment in _SHELL_SPLIT.split(command):
        try:
            words = shlex.split(segment)
        except ValueError:
            continue
        if words[:1] == ["git"] and words[1:2] in (["rm"], ["mv"]):
            words = words[1:]
        if not words:
            continue
        verb = posixpath.basename(words[0])
        args = [w for w in words[1:] if not w.startswith("-")]
        if verb == "mv":
            found += [(new, "renamed", old) for old, new in _moves(args)]
            continue
        state = {"rm": "deleted", "sed": "edited" if "-i" in words else None}.get(verb)
        if verb in _SHELL_READS:
            state = "read"
        if state is None:
            continue
        if verb == "sed" and args:
            args = args[1:]  # the script
        found += [(a, state, "") for a in args if _LOOKS_LIKE_FILE.match(a)]
    return found


def _moves(args: list[str]) -> list[tuple[str, str]]:
    """(old, new) for ``mv`` arguments: one file to a file name, or files into a folder."""
    if len(args) < 2 or not all(_LOOKS_LIKE_FILE.match(a) for a in args[:-1]):
        return []
    *sources, target = args
    into = target.endswith("/") or len(sources) > 1 or not _HAS_SUFFIX.search(target)
    if into:
        return [(a, posixpath.join(target, posixpath.basename(a.rstrip("/")))) for a in sources]
    return [(sources[0], target)]
