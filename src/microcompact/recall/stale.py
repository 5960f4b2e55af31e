"""Stale claims: a summary that states a file in a state the agent has since changed.

A lost fact costs a re-read; a stale one costs a wrong edit, because the model trusts it. Verbatim history
cannot be stale in this sense: it stands in time order, and every policy measured keeps the newest messages,
so a later edit or deletion is in view whenever the older read is. Only text a compactor *wrote* (a marker,
a compaction summary) can state an old state as current, once the call that changed the file has been
folded away.

**File events** are read from the session's tool calls by their arguments, whatever the tool's name: a
path (``file_path``/``path``) with ``old_string``/``new_string`` (or ``edits`` of them) is an *edit*; a
path with ``content`` is a *write* (a rewrite when an earlier write of the same path is known); a shell
``command``/``cmd`` running ``rm``/``git rm`` *deletes* its paths and ``mv``/``git mv`` *renames* its
first path to its last.

**A stale claim**, at a request, is a line of summary text that, for an event before the request whose
call is no longer in the prompt verbatim (folded):

- *deleted*: names the path and does not say it is gone (no word of :data:`GONE_WORDS`), unless a later
  write before the request created it again;
- *renamed*: names the old path, not the new one, and does not say it moved;
- *edited or rewritten*: holds a line the change removed (stripped, at least :data:`MIN_LINE` characters
  and two words, in no line of the new text, not even as a part, and not added back by a later event
  before the request), holds none of the lines it added, and has no word of :data:`CHANGE_WORDS`.

A line *names* a path when one of its path identifiers has at least two components and is a whole-component
suffix of the path (``lib/x.ex`` names ``/home/u/p/lib/x.ex``): summaries shorten paths; a bare file name
is too weak to tell a rename's two ends apart.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any

from ..identifiers import identifiers

MIN_LINE = 20
GONE_WORDS = ("delet", "remov", "renam", "moved", "gone", "no longer", "rm ", "mv ", "->", "→")
CHANGE_WORDS = ("edit", "chang", "replac", "was ", "now ", "instead", "remov", "updat", "added", "adding", "->", "→")
_PATH_KEYS = ("file_path", "path", "filename")
_SHELL_SPLIT = re.compile(r"&&|\|\||[;|\n]")


class Change(StrEnum):
    DELETED = "deleted"
    RENAMED = "renamed"
    EDITED = "edited"
    WRITTEN = "written"


@dataclass(frozen=True)
class FileEvent:
    """One change the agent made to a file, at the index of the message whose tool call made it."""

    index: int
    change: Change
    path: str
    new_path: str | None = None  # RENAMED: where it went
    removed: tuple[str, ...] = ()  # EDITED/WRITTEN: stripped lines the change took out
    added: tuple[str, ...] = ()  # EDITED/WRITTEN: stripped lines it put in (all of a write's)


@dataclass(frozen=True)
class StaleClaim:
    event: FileEvent
    line: str


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _lines(text: Any) -> list[str]:
    """The lines that say something: stripped, at least MIN_LINE characters and two words (a lone name
    left over from a list, ``TranscriptRenderer,``, says nothing about the file's state)."""
    return [s for line in str(text or "").splitlines() if len(s := line.strip()) >= MIN_LINE and " " in s]


def _diff(old: Iterable[str], new: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Lines taken out (in no new line, not even as a part: ``config :app,`` lives on in
    ``config :app, key: 1``) and lines put in."""
    old_set, new_set = list(dict.fromkeys(old)), list(dict.fromkeys(new))
    removed = tuple(x for x in old_set if not any(x in n for n in new_set))
    return removed, tuple(x for x in new_set if x not in old_set)


def _shell_events(index: int, command: str) -> Iterator[FileEvent]:
    for part in _SHELL_SPLIT.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if words[:1] == ["git"]:
            words = words[1:]
        if not words or words[0] not in ("rm", "mv"):
            continue
        paths = [w for w in words[1:] if not w.startswith("-") and not w.startswith("2>")]
        if words[0] == "rm":
            yield from (FileEvent(index, Change.DELETED, p) for p in paths)
        elif len(paths) >= 2:
            yield FileEvent(index, Change.RENAMED, paths[0], new_path=paths[-1])


def _call_events(index: int, args: dict[str, Any], written: dict[str, list[str]]) -> Iterator[FileEvent]:
    path = next((str(args[k]) for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
    command = args.get("command") if isinstance(args.get("command"), str) else args.get("cmd")
    if path is None:
        if isinstance(command, str):
            yield from _shell_events(index, command)
        return
    raw_edits = args.get("edits")
    edits: list[Any] = raw_edits if isinstance(raw_edits, list) else [args]
    if any(isinstance(e, Mapping) and "old_string" in e for e in edits):
        old = [line for e in edits if isinstance(e, Mapping) for line in _lines(e.get("old_string"))]
        new = [line for e in edits if isinstance(e, Mapping) for line in _lines(e.get("new_string"))]
        removed, added = _diff(old, new)
        yield FileEvent(index, Change.EDITED, path, removed=removed, added=added)
    elif "content" in args:
        new = _lines(args.get("content"))
        removed, _ = _diff(written.get(path, []), new)
        written[path] = new
        yield FileEvent(index, Change.WRITTEN, path, removed=removed, added=tuple(dict.fromkeys(new)))


def file_events(messages: Sequence[Mapping[str, Any]]) -> list[FileEvent]:
    """Every file change the session's tool calls made, in order."""
    events: list[FileEvent] = []
    written: dict[str, list[str]] = {}  # path -> the lines of its last known write
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                events.extend(_call_events(index, _arguments(function.get("arguments")), written))
    return events


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


@lru_cache(maxsize=65_536)
def _line_paths(line: str) -> tuple[tuple[str, ...], ...]:
    """The path identifiers of a line with two components or more (a summary repeats its lines request
    after request: read once)."""
    return tuple(parts for token in identifiers(line) if len(parts := tuple(_parts(token))) >= 2)


def names(line: str, path: str) -> bool:
    """Whether ``line`` names ``path`` (see the module docstring)."""
    whole = tuple(_parts(path))
    return any(whole[-len(parts) :] == parts for parts in _line_paths(line))


def _has(line: str, words: Sequence[str]) -> bool:
    lower = line.lower()
    return any(w in lower for w in words)


@dataclass
class _Later:
    """What events after one event (and before the request) did: paths written again, lines added back."""

    rewritten: set[str] = field(default_factory=set)
    added: dict[str, set[str]] = field(default_factory=dict)


def _later(events: Sequence[FileEvent], start: int, upto: int) -> _Later:
    seen = _Later()
    for e in events[start:]:
        if e.index >= upto:
            break
        if e.change is Change.WRITTEN:
            seen.rewritten.add(e.path)
        seen.added.setdefault(e.path, set()).update(e.added)
    return seen


def _claim(event: FileEvent, line: str, later: _Later) -> bool:
    if event.change is Change.DELETED:
        return event.path not in later.rewritten and names(line, event.path) and not _has(line, GONE_WORDS)
    if event.change is Change.RENAMED:
        assert event.new_path is not None
        return names(line, event.path) and not names(line, event.new_path) and not _has(line, GONE_WORDS)
    if any(a in line for a in event.added) or _has(line, CHANGE_WORDS):
        return False
    back = later.added.get(event.path, set())
    return any(r in line and r not in back for r in event.removed)


def stale_claims(events: Sequence[FileEvent], upto: int, summary: str, folded: Iterable[int]) -> list[StaleClaim]:
    """The stale claims ``summary`` (the compactor's text in the prompt of the request at index ``upto``)
    makes about the events before ``upto`` whose call messages (their indexes in ``folded``) the prompt no
    longer holds verbatim."""
    gone = set(folded)
    lines = [line.strip() for line in summary.splitlines() if line.strip()]
    found: list[StaleClaim] = []
    for position, event in enumerate(events):
        if event.index >= upto:
            break
        if event.index not in gone:
            continue
        later = _later(events, position + 1, upto)
        found.extend(StaleClaim(event, line) for line in lines if _claim(event, line, later))
    return found


__all__ = [
    "CHANGE_WORDS",
    "GONE_WORDS",
    "MIN_LINE",
    "Change",
    "FileEvent",
    "StaleClaim",
    "file_events",
    "names",
    "stale_claims",
]
