"""The facts a summary must never lose, as values: the file ledger, failing commands, test runs, and
what absorbed tool results taught (:class:`Lesson`: typed items per result, by the :class:`ToolKind` of
its call).

A :class:`Facts` is what the absorbed work did to files and what its commands showed. Facts merge pass
by pass (:func:`merge_facts`) so that a file that was created, edited or deleted is never dropped, and an
error a later step resolved is marked resolved instead of staying open.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

from ..identifiers import identifiers

CHANGED = ("created", "edited", "deleted", "renamed")  # states a ledger never drops
LOOKED = ("read", "searched")
STATES = CHANGED + LOOKED
COMMAND_CHARS = 120
# A command, search or edit as the marker's notes and lessons name it. Past 60 characters a command is mostly
# arguments (numbers, flags), which the marker pays for at every fold (written again) and every request
# (read): at 120, the reactive agent's 150 x 8 KB task cost 0.61x of direct; at 60, 0.60x, with the same
# recall on the shared sessions (bench/recall.py: 97.9%). A failure keeps its whole command (COMMAND_CHARS).
SUBJECT_CHARS = 60
GIST_CHARS = 90
REASON_CHARS = 160
_MIN_ROOT_PARTS = 3  # "/home/user/" is worth factoring out; "/" is not
_PIPE_TAIL = re.compile(r"\s*(?:\d?>&\d|\d?>\s*/dev/null)(?=\s|$)|\s*(?<!\|)\|(?!\|).*$")


@dataclass
class FileFact:
    """One file: its last state, how many edits it had, a one-line gist of what changed or was seen, and
    the path it was renamed from (a renamed file is listed under its new name only)."""

    path: str
    state: str  # one of STATES
    edits: int = 0  # edits after creation (created) or in all (edited, renamed); 0 otherwise
    gist: str = ""
    origin: str = ""  # the path it was moved from, when a rename is among what happened to it

    @property
    def changed(self) -> bool:
        return self.state in CHANGED


@dataclass
class FolderFact:
    """Files only read or searched, folded under their folder when the ledger is over its budget."""

    path: str  # the folder, ending with "/"
    count: int
    names: tuple[str, ...] = ()  # the files' names, at most ``count`` of them (none once compressed further)


@dataclass
class Failure:
    """A command or tool call that failed: its exit status and the one line that says why."""

    command: str
    status: str  # "exit N" or "error"
    reason: str = ""
    resolved: bool = False

    @property
    def key(self) -> str:
        return command_key(self.command)


@dataclass
class TestRun:
    """A test run's outcome as counts (the newest run of each command is kept)."""

    __test__ = False  # not a pytest test class, whatever its name

    command: str
    passed: int
    failed: int

    @property
    def key(self) -> str:
        return command_key(self.command)


class ToolKind(Enum):
    """What a tool call does, as far as what its result can teach a later step."""

    READ = "read"  # a file's content: the symbols it defines
    SEARCH = "searched"  # matched paths and lines
    COMMAND = "ran"  # a shell command: exit code, errors, tests, ids, versions
    EDIT = "edited"  # a file written: its state is the file ledger's
    OTHER = "called"  # any other tool (a subagent, a web fetch): what its answer names


class ItemKind(Enum):
    """A kept value's type; its value is the label it is written under."""

    USED = "used"  # mentioned by the agent after the result showed it
    ERROR = "errors"
    TEST = "tests"
    SYMBOL = "defines"
    HIT = "hits"
    ID = "ids"
    VERSION = "versions"
    NAME = "names"


TIER = {
    ItemKind.USED: 0,
    ItemKind.ERROR: 1,
    ItemKind.TEST: 2,
    ItemKind.SYMBOL: 2,
    ItemKind.HIT: 3,
    ItemKind.ID: 3,
    ItemKind.VERSION: 3,
    ItemKind.NAME: 4,
}


@dataclass
class Lesson:
    """One absorbed tool result: what kind of call it was, on what, and the values kept from it."""

    kind: ToolKind
    subject: str  # the path read, the pattern searched, the command run, the tool called
    # "exit N" (N != 0) or "error"; for a read, "edited since" once a later step changed its file (what it
    # kept is as of before), "deleted since" or "moved since" once its file is gone
    status: str = ""
    items: dict[ItemKind, list[str]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[ToolKind, str]:
        return (self.kind, self.subject)

    def values(self) -> Iterable[str]:
        for group in self.items.values():
            yield from group


@dataclass
class Facts:
    files: dict[str, FileFact] = field(default_factory=dict)  # path -> fact, least recently touched first
    folders: dict[str, FolderFact] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    tests: list[TestRun] = field(default_factory=list)
    # Keys of commands and tool targets that succeeded in the messages these facts came from: merge_facts
    # marks older failures of the same key resolved. Not rendered (the resolution is what is kept).
    succeeded: frozenset[str] = frozenset()
    taught: list[Lesson] = field(default_factory=list)  # what absorbed tool results showed, oldest first
    # Identifiers the agent wrote in the messages these facts came from: merge_facts moves what older
    # lessons showed of them into ``used``. Not rendered.
    mentioned: frozenset[str] = frozenset()
    # Paths whose earlier history these messages ended (created, deleted, moved away or onto): merge_facts
    # drops what older facts said of them, so no earlier state or origin is stated as current. Not rendered.
    cleared: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.files or self.folders or self.failures or self.tests or self.taught)

    def touch(self, fact: FileFact) -> None:
        """Record what happened to one file (after everything recorded before)."""
        if fact.state in ("created", "deleted", "renamed"):
            self.cleared = self.cleared | {fact.path}
        previous = self.files.pop(fact.path, None)
        self.files[fact.path] = combine(previous, fact)
        folder = self.folders.get(folder_of(fact.path))
        if folder is not None and posixpath.basename(fact.path) in folder.names:
            names = tuple(n for n in folder.names if n != posixpath.basename(fact.path))
            self.folders[folder.path] = replace(folder, names=names, count=max(len(names), folder.count - 1))
            if not self.folders[folder.path].count:
                del self.folders[folder.path]

    def rename(self, old: str, new: str) -> None:
        """Record that ``old`` was moved to ``new`` (``mv``, ``git mv``): ``new`` carries what ``old`` had."""
        before = self.files.get(old)
        edits = before.edits if before is not None and before.state in ("edited", "renamed") else 0
        gist = before.gist if before is not None and before.changed else ""
        self.touch(FileFact(new, "renamed", edits, gist, origin=old))
        self.files.pop(old, None)  # never stated as current again (until something touches it anew)
        self.cleared = self.cleared | {old}

    def fail(self, failure: Failure) -> None:
        """Record a failure; an older failure of the same command gives way to it."""
        self.failures = [f for f in self.failures if f.key != failure.key] + [failure]

    def succeed(self, key: str) -> None:
        """Record that ``key`` (a command or tool target) worked: its open failures are resolved, and so
        are those of each ``&&``-chained part, and of a shorter form it retried with more arguments
        (``git push`` by ``git push --set-upstream origin main``)."""
        self.succeeded = self.succeeded | {key}
        parts = [" ".join(p.split()) for p in key.split("&&")]
        self.failures = [replace(f, resolved=True) if _resolves(parts, f.key) else f for f in self.failures]

    def tested(self, run: TestRun) -> None:
        self.tests = [t for t in self.tests if t.key != run.key] + [run]


def combine(old: FileFact | None, new: FileFact) -> FileFact:
    """The file's fact after ``old`` and then ``new``: a change outranks a look, edits add up."""
    if old is None or new.state in ("deleted", "created", "renamed"):
        return new
    if new.state == "edited":
        gist = new.gist or _carried(old)
        if old.state == "created":
            return FileFact(new.path, "created", old.edits + new.edits, gist, old.origin)
        edits = old.edits if old.state in ("edited", "renamed") else 0
        return FileFact(new.path, "edited", edits + new.edits, gist, new.origin or old.origin)
    if old.changed:  # a read or search after a change: the change is what matters
        return old
    state = "read" if "read" in (old.state, new.state) else "searched"
    return FileFact(new.path, state, 0, new.gist or old.gist)


def _carried(old: FileFact) -> str:
    """The gist an edit without one of its own keeps: what a changed file defines, never a line quoted
    from it (the edit may have removed that line) nor what a read saw."""
    return old.gist if old.changed and old.gist.startswith("defines ") else ""


def merge_facts(old: Facts, new: Facts) -> Facts:
    """``old`` updated with ``new`` (the facts of later messages). Never drops a created, edited or
    deleted file; older failures of a command that later worked are marked resolved."""
    out = Facts(
        files=dict(old.files),
        folders=dict(old.folders),
        failures=list(old.failures),
        tests=list(old.tests),
    )
    for folder in new.folders.values():
        mine = out.folders.get(folder.path)
        if mine is None:
            out.folders[folder.path] = folder
        else:
            names = tuple(dict.fromkeys(mine.names + folder.names))
            out.folders[folder.path] = FolderFact(folder.path, max(mine.count, folder.count, len(names)), names)
    for key in sorted(new.succeeded):
        out.succeed(key)
    for path in new.cleared:
        out.files.pop(path, None)
    for fact in new.files.values():
        out.touch(fact)
    for failure in new.failures:
        out.fail(failure)
    for run in new.tests:
        out.tested(run)
    out.succeeded = old.succeeded | new.succeeded
    changed = [p for p, fact in new.files.items() if fact.state in ("edited", "created")]
    older = edited_since(old.taught, changed)  # new lessons say so themselves (extract_lessons)
    out.taught = without_gone_paths(merge_lessons(older, new.taught, new.mentioned), out.files)
    return out


EDITED_SINCE = "edited since"
DELETED_SINCE = "deleted since"
MOVED_SINCE = "moved since"


def reads_path(lesson: Lesson, path: str) -> bool:
    """Whether ``lesson`` is a read of ``path`` (a file tool's, or a shell read such as ``cat lib/x.ex``)."""
    if lesson.kind is not ToolKind.READ:
        return False
    tokens = identifiers(lesson.subject) | {lesson.subject}
    return any(_names(token, path) or _names(path, token) for token in tokens)  # either may be shortened


def edited_since(lessons: list[Lesson], paths: Iterable[str]) -> list[Lesson]:
    """``lessons`` whose reads of one of ``paths`` (edited or written after them) say ``edited since``: what
    they kept (the symbols a file defined, the values the agent used) is as of before that change."""
    paths = list(paths)
    if not paths:
        return lessons
    return [
        replace(x, status=EDITED_SINCE) if not x.status and any(reads_path(x, p) for p in paths) else x for x in lessons
    ]


def without_gone_paths(lessons: list[Lesson], files: dict[str, FileFact]) -> list[Lesson]:
    """``lessons`` that never state a deleted or moved-away path as current: a read of one says so in its
    status (``read `x.py` → deleted since``), and values naming one (a hit, a listed path) are dropped."""
    gone = {path: DELETED_SINCE for path, fact in files.items() if fact.state == "deleted"}
    gone |= {f.origin: MOVED_SINCE for f in files.values() if f.origin and f.origin not in files}
    if not gone:
        return lessons
    out = []
    for lesson in lessons:
        status = gone.get(lesson.subject, lesson.status) if lesson.kind is ToolKind.READ else lesson.status
        items = {k: [v for v in vs if not any(_names(v, path) for path in gone)] for k, vs in lesson.items.items()}
        items = {k: vs for k, vs in items.items() if vs}
        if items:
            out.append(replace(lesson, status=status, items=items))
    return out


def _names(value: str, path: str) -> bool:
    """Whether ``value`` (a path, or ``path:line``) names ``path``: the same path, or a suffix of it of at
    least two components (``lib/x.ex`` of ``/w/lib/x.ex``)."""
    base = value.split(":", 1)[0].rstrip("/")
    return base == path or ("/" in base and path.endswith("/" + base.lstrip("/")))


def merge_lessons(old: list[Lesson], new: list[Lesson], mentioned: frozenset[str]) -> list[Lesson]:
    """``old`` followed by ``new`` (the lessons of later messages), the agent's later ``mentioned``
    identifiers moving what they name into ``used``: a lesson used again moves up to just before the
    new ones. A new lesson on the same subject replaces the old one, keeping what the old one had used;
    when the old one's file changed since, only what the new one still shows (the rest is of before)."""
    by_key = {x.key: x for x in new}
    kept: list[Lesson] = []
    renewed: list[Lesson] = []
    for lesson in old:
        fresh = by_key.get(lesson.key)
        if fresh is not None:
            carried = lesson.items.get(ItemKind.USED, [])
            if lesson.status in (EDITED_SINCE, DELETED_SINCE, MOVED_SINCE):
                shown = set(fresh.values())
                carried = [v for v in carried if v in shown]
                fresh.items = {k: [v for v in vs if v not in carried] for k, vs in fresh.items.items()}
            used = fresh.items.setdefault(ItemKind.USED, [])
            used += [v for v in carried if v not in used]
            fresh.items = {k: vs for k, vs in fresh.items.items() if vs}
            continue
        moved = mark_used(lesson, mentioned)
        (renewed if moved is not lesson else kept).append(moved)
    return kept + renewed + list(new)


def mark_used(lesson: Lesson, mentioned: frozenset[str]) -> Lesson:
    """``lesson`` with the values that share an identifier with ``mentioned`` moved into ``used`` (the
    same object when none does). Error lines stay errors (they rank near the top anyway)."""
    if not mentioned:
        return lesson
    used = list(lesson.items.get(ItemKind.USED, []))
    items: dict[ItemKind, list[str]] = {}
    for kind, values in lesson.items.items():
        if kind in (ItemKind.USED, ItemKind.ERROR):
            items[kind] = list(values)
            continue
        hit = [v for v in values if v in mentioned or identifiers(v) & mentioned]
        used += [v for v in hit if v not in used]
        items[kind] = [v for v in values if v not in hit]
    if len(used) == len(lesson.items.get(ItemKind.USED, [])):
        return lesson
    items[ItemKind.USED] = used
    order = [ItemKind.USED, *(k for k in items if k is not ItemKind.USED)]
    return replace(lesson, items={k: items[k] for k in order if items.get(k)})


def _resolves(succeeded_parts: list[str], failed_key: str) -> bool:
    return any(part == failed_key or part.startswith(failed_key + " ") for part in succeeded_parts if failed_key)


def command_key(command: str) -> str:
    """What makes two runs "the same command": the command without redirections and output pipes."""
    return " ".join(_PIPE_TAIL.sub(" ", " ".join(command.split())).split())


def one_line(text: str, limit: int) -> str:
    """``text`` as one canonical line of at most ``limit`` characters (what the ledger stores and renders)."""
    line = " ".join(text.replace("`", "'").replace(" — ", " - ").split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def folder_of(path: str) -> str:
    """The folder holding ``path``, ending with "/" ("./" for a bare name)."""
    folder = posixpath.dirname(path.rstrip("/"))
    return f"{folder}/" if folder else "./"


def common_root(paths: list[str]) -> str:
    """The absolute folder whose factoring out saves the most characters (held by at least two paths and
    at least ``_MIN_ROOT_PARTS`` deep), or "". Only when every path is absolute; those outside it stay so."""
    if not all(p.startswith("/") for p in paths):
        return ""  # a relative path would read back as under the root
    saved: dict[str, int] = {}
    for path in paths:
        parts = path.rstrip("/").split("/")
        for depth in range(_MIN_ROOT_PARTS, len(parts)):
            prefix = "/".join(parts[:depth]) + "/"
            saved[prefix] = saved.get(prefix, 0) + len(prefix)
    best = max(saved.items(), key=lambda kv: (kv[1], len(kv[0])), default=("", 0))
    return best[0] if best[1] >= 2 * len(best[0]) else ""


def relative(path: str, root: str) -> str:
    """``path`` under ``root`` without it (``root`` itself, and paths outside it, stay as they are)."""
    inside = root and path.startswith(root) and len(path) > len(root)
    return path[len(root) :] if inside else path  # the root folder itself stays absolute
