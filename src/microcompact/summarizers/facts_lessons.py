"""Reading lessons out of messages: per tool result, by the kind of its call, what a later step may need.

* a **read** (``Read``, ``read_file``, ``cat``): the symbols the file defines (``def``/``class``/
  ``function``/``defmodule``/``const`` ... in common languages, by regex) and a few of its most frequent
  other identifiers;
* a **search** (``Grep``, ``Glob``, ``rg``): the ``path:line`` hits and matched paths;
* a **command**: its exit status, error lines, failing or passing test names, ids (hex, UUIDs), versions,
  the ``path:line`` hits it printed and its most frequent identifiers;
* any **other** tool (a subagent, a fetch): its ids, hits and most frequent identifiers;
* an **edit** keeps nothing here: what it did to the file is the file ledger's; but a read of the file
  before it says ``edited since`` (what it kept is as of before the edit), in this span and in the
  lessons of earlier ones (:func:`.facts_model.merge_facts`).

For every kind, the identifiers of the result that the agent mentioned *afterwards* in the same span go
under ``used``: those rank first (:mod:`.facts_taught`).

**Bounded per result.** A result is read line by line at most :data:`SCAN_LINES` lines, once; a line with
no letter (a sequence, a column of numbers) is skipped by the per-line readers, a read's line-number
prefixes are not names, and a plain number is a name only beside text and only a few per result
(:data:`NUMBER_NAMES`): an output of 3,000 numbered lines teaches nothing by itself, and costs a few
milliseconds. A number the agent then mentions still goes under ``used``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from ..identifiers import identifiers, message_identifiers
from ..messages import Message, content_text
from .facts_extract import (
    ERROR_RESULT,
    PATH_KEYS,
    PATTERN_KEYS,
    Call,
    changed_paths,
    error_lines,
    exit_code,
    first_arg,
    parse_call,
    shell_command,
    tool_kind,
)
from .facts_model import (
    REASON_CHARS,
    SUBJECT_CHARS,
    ItemKind,
    Lesson,
    ToolKind,
    edited_since,
    merge_lessons,
    one_line,
)
from .facts_taught import clean_value
from .provenance import OUTPUT, attributed, flagged, tainted_from

_SYMBOL = re.compile(
    r"^\s*(?:export\s+|pub(?:\(\w+\))?\s+|async\s+|public\s+|private\s+|protected\s+|static\s+|abstract\s+)*"
    r"(?:def|defp|defmodule|defmacro|defmacrop|defstruct|defprotocol|defimpl|class|function|func|fn|interface|"
    r"struct|enum|trait|module|type|impl|const|let|var|val|object|record|macro_rules!)\s+"
    r"(?P<name>[A-Za-z_$][\w.:$]*[?!]?)"
)
_ASSIGNED = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]{3,})(?:\s*:\s*[\w\[\], ]+)?\s*:?=(?!=)")  # CONSTANT = ...
_NUMBERED = re.compile(r"^\s*\d+[→\t|:]\s?")  # Read's "   12→" and cat -n's prefixes
_HIT_PREFIX = re.compile(r"^(?P<path>[\w./~@+-]*[\w-]\.\w{1,8}|[\w./~@+-]+/[\w.@+-]+)[:-](?P<line>\d+)[:-]")
_INLINE_HIT = re.compile(r"(?<![\w/.~-])(?P<path>(?:[\w.~@+-]+/)*[\w@+-]+\.\w{1,8}):(?P<line>\d+)\b")
_PATH_LINE = re.compile(r"^\s*(?P<path>/?[\w.~@+-]+(?:/[\w.@+-]+)+/?)\s*$")
_TEST_NAME = re.compile(
    r"[\w./-]+\.py::[\w:\[\].,-]+"  # pytest node ids
    r"|[\w./-]*(?:_test|_spec|\.test|\.spec)\.\w{1,5}(?::\d+)?"  # test files (ExUnit, jest, go) with a line
    r"|[\w./-]*/test_\w+\.py(?::\d+)?"
)
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])")
_LETTER = re.compile(r"[A-Za-z]")
_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?:[-+][\w.]+)?(?![\w.])|(?<![\w.])v\d+\.\d+(?![\w.])")

# How many of each kind one result may keep (the budget ranks them further).
_CAPS = {
    ItemKind.USED: 24,
    ItemKind.ERROR: 3,
    ItemKind.TEST: 10,
    ItemKind.SYMBOL: 16,
    ItemKind.HIT: 12,
    ItemKind.ID: 6,
    ItemKind.VERSION: 4,
    ItemKind.NAME: 32,
}
SCAN_LINES = 5000  # lines of one result the per-line readers look at
CANDIDATES = 512  # distinct names one result may count (later new ones are not)
NUMBER_NAMES = 4  # plain numbers one result may keep as names
_OCCURRENCES = 8  # lines looked at per identifier when checking that a result showed it
_SUBJECT_CHARS = 80
_PATH_CHARS = 240


def extract_lessons(messages: Iterable[Message]) -> tuple[list[Lesson], frozenset[str]]:
    """The lessons of ``messages``' tool results in order, and every identifier the agent wrote in them
    (what a merge uses to move earlier lessons' items into ``used``)."""
    calls: dict[str, Call] = {}
    found: list[tuple[int, Lesson, str]] = []
    wrote: list[tuple[int, set[str]]] = []
    changes: list[tuple[int, str]] = []  # (message index of an edit's result, the path it changed)
    for n, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            wrote.append((n, message_identifiers(message)))
            for raw in message.get("tool_calls") or ():
                calls[str(raw.get("id"))] = parse_call(raw)
        elif role == "tool":
            call = calls.get(str(message.get("tool_call_id")))
            text = content_text(message)
            if call is not None and not ERROR_RESULT.match(text):
                changes += [(n, path) for path in changed_paths(call)]
            lesson = lesson_of(call, text) if call is not None else None
            if lesson is not None:
                found.append((n, lesson, text))
    lessons = []
    for n, lesson, text in found:
        shown = identifiers_held(text, set().union(*(ids for at, ids in wrote if at > n)))  # all `used` reads
        before = frozenset().union(*(ids for at, ids in wrote if at < n))  # the agent's own, not taught
        lesson = edited_since([lesson], [path for at, path in changes if at > n])[0]
        lessons.append(_with_used(lesson, shown - before, [ids for at, ids in wrote if at > n]))
    newest: list[Lesson] = []  # one lesson per subject: a later read of the file replaces an earlier one
    for lesson in lessons:
        if lesson.items:
            newest = merge_lessons(newest, [lesson], frozenset())
    mentioned = frozenset().union(*(ids for _, ids in wrote))
    return newest, mentioned


def lesson_of(call: Call, result: str) -> Lesson | None:
    """What one tool result teaches, by the kind of its call (None for an edit or an empty result)."""
    kind = tool_kind(call)
    if kind is ToolKind.EDIT or not result.strip():
        return None
    items: dict[ItemKind, list[str]] = {}
    status = ""
    scanned = result.splitlines()[:SCAN_LINES]
    lines = [line for line in scanned if _LETTER.search(line)]
    if kind is ToolKind.COMMAND:
        code = exit_code(result)
        failed = bool(ERROR_RESULT.match(result)) or (code is not None and code != 0)
        status = f"exit {code}" if code else ("error" if failed else "")
        # A failure's first error line is the failing commands' section's already: the rest are kept here.
        items[ItemKind.ERROR] = _quoted(error_lines(result, code, failed)[1 if failed else 0 :], result)
        tested = "test" in result or "spec" in result or ".py::" in result  # what every match holds
        items[ItemKind.TEST] = _unique(m.group() for m in _TEST_NAME.finditer(result)) if tested else []
    elif ERROR_RESULT.match(result):
        status = "error"
        items[ItemKind.ERROR] = _quoted(error_lines(result, None, True)[1:], result)
    items[ItemKind.SYMBOL] = symbols(lines)
    items[ItemKind.HIT] = hits(lines) if kind is not ToolKind.READ else []
    # Each pattern on the lines that can hold a match only (none spans lines): a column of numbers costs nothing.
    ids = [*_UUID.findall(_holding(scanned, "-")), *_HEX.findall("\n".join(lines))]
    items[ItemKind.ID] = _unique(ids)
    items[ItemKind.VERSION] = _unique(_VERSION.findall(_holding(scanned, ".")))
    items[ItemKind.NAME] = frequent_identifiers(lines)
    return Lesson(kind, _subject(call, kind), status, _canonical(items))


def symbols(lines: list[str]) -> list[str]:
    """Names the lines define (functions, classes, modules, types, constants), in order."""
    names = []
    for line in lines:
        bare = _NUMBERED.sub("", line)
        hit = _HIT_PREFIX.match(bare)
        bare = bare[hit.end() :] if hit else bare
        match = _SYMBOL.match(bare) or _ASSIGNED.match(bare)
        if match:
            names.append(match["name"].rstrip(".:"))
    return _unique(n for n in names if len(n) > 1)


def hits(lines: list[str]) -> list[str]:
    """``path:line`` of each line a search or compiler printed as ``path:line:...``, bare paths on a line of
    their own, and ``path:line`` cited inside a line."""
    found = []
    for line in lines:
        if "." not in line and "/" not in line:  # every form below holds one
            continue
        hit = _HIT_PREFIX.match(line.strip())
        if hit:
            found.append(f"{hit['path']}:{hit['line']}")
        elif path := _PATH_LINE.match(line):
            found.append(path["path"])
        else:
            found += [f"{m['path']}:{m['line']}" for m in _INLINE_HIT.finditer(line)]
    return _unique(found)


def frequent_identifiers(lines: list[str]) -> list[str]:
    """The lines' identifiers, the ones on most lines first (then by first appearance): the first
    :data:`CANDIDATES` found, line-number prefixes left out, at most :data:`NUMBER_NAMES` plain numbers."""
    counts: Counter[str] = Counter()
    order: dict[str, int] = {}
    for line in lines:
        line = _NUMBERED.sub("", line, count=1)
        for ident in sorted(identifiers(line), key=lambda x: (line.find(x), x)):  # as written, not set order
            if ident in order or len(order) < CANDIDATES:
                counts[ident] += 1
                order.setdefault(ident, len(order))
    ranked = sorted(counts, key=lambda x: (-counts[x], order[x]))
    numbers = set([x for x in ranked if x.isdigit()][:NUMBER_NAMES])
    return [x for x in ranked if x in numbers or not x.isdigit()][: _CAPS[ItemKind.NAME] * 4]


def identifiers_held(text: str, wanted: set[str]) -> set[str]:
    """Those of ``wanted`` that ``text`` holds as identifiers (not inside a longer token). Only lines
    holding one are read, at most :data:`_OCCURRENCES` per identifier: a long output costs a substring
    search per identifier the agent went on to write, not a pass over every line."""
    found = set()
    for x in wanted:
        at = text.find(x)
        for _ in range(_OCCURRENCES):
            if at < 0:
                break
            start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
            end = len(text) if end < 0 else end
            if x in identifiers(text[start:end]):
                found.add(x)
                break
            at = text.find(x, end)
    return found


def _quoted(lines: list[str], result: str) -> list[str]:
    """Error lines as the ledger keeps them: quoted with their source when one could pass for an order or
    a role's turn, or the output imitates one anywhere (never stated in the ledger's own words)."""
    if not lines:
        return []
    tainted = tainted_from(result) < len(result)
    return [attributed(OUTPUT, line, REASON_CHARS) if tainted or flagged(line) else line for line in lines]


def _with_used(lesson: Lesson, shown: set[str], later: list[set[str]]) -> Lesson:
    """``lesson`` with the identifiers of its result that later assistant messages mention under ``used``,
    the most mentioned first; they leave the other groups."""
    counts: Counter[str] = Counter()
    for ids in later:
        counts.update(ids & shown)
    subject_ids = identifiers(lesson.subject) | {lesson.subject}
    # Ties in name order: a set's order changes with the process's hash seed, and a replay's marker must not.
    by_use = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ranked = [x for x, _ in by_use if x not in subject_ids]
    covered = set().union(*(identifiers(x) - {x} for x in ranked))  # a path's parts come with the path
    used = [x for x in ranked if x not in covered][: _CAPS[ItemKind.USED]]
    taken = set(used)
    items = {ItemKind.USED: used} if used else {}
    for kind, values in lesson.items.items():
        rest = values if kind is ItemKind.ERROR else [v for v in values if v not in taken]
        if kind is ItemKind.NAME:
            rest = rest[: _CAPS[kind]]
        if rest:
            items[kind] = rest
    lesson.items = items
    return lesson


def _canonical(items: dict[ItemKind, list[str]]) -> dict[ItemKind, list[str]]:
    """Values cleaned for the marker, capped, each kept under its first (strongest) kind only."""
    seen: set[str] = set()
    out: dict[ItemKind, list[str]] = {}
    for kind, values in items.items():
        cap = _CAPS[kind] * 4 if kind is ItemKind.NAME else _CAPS[kind]  # names are cut after `used` takes some
        kept = []
        for value in values:
            value = clean_value(kind, value)
            if value and value not in seen:
                seen.add(value)
                kept.append(value)
        if kept[:cap]:
            out[kind] = kept[:cap]
    return out


def _subject(call: Call, kind: ToolKind) -> str:
    command = shell_command(call)
    if command is not None:
        subject = command
    elif kind is ToolKind.READ:
        return one_line(first_arg(call.args, PATH_KEYS) or call.name, _PATH_CHARS)  # whole: the agent reuses it
    elif kind is ToolKind.SEARCH:
        pattern = first_arg(call.args, PATTERN_KEYS) or ""
        where = first_arg(call.args, (*PATH_KEYS, "dir", "directory")) or ""
        subject = f"{pattern} in {where}" if pattern and where else pattern or where or call.name
    else:
        detail = next((v for v in call.args.values() if isinstance(v, str) and v.strip()), "")
        subject = f"{call.name} {detail}" if detail else call.name
    return one_line(subject, _SUBJECT_CHARS if kind is ToolKind.OTHER else SUBJECT_CHARS)


def _holding(lines: list[str], char: str) -> str:
    return "\n".join(line for line in lines if char in line)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))
