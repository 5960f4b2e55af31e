"""The facts a summary must never lose, as values: the file ledger, failing commands, test runs.

A :class:`Facts` is what the absorbed work did to files and what its commands showed. Facts merge pass
by pass (:func:`merge_facts`) so that a file that was created, edited or deleted is never dropped, and an
error a later step resolved is marked resolved instead of staying open.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, replace

CHANGED = ("created", "edited", "deleted")  # states a ledger never drops
LOOKED = ("read", "searched")
STATES = CHANGED + LOOKED
COMMAND_CHARS = 120
GIST_CHARS = 90
REASON_CHARS = 160
_PIPE_TAIL = re.compile(r"\s*(?:\d?>&\d|\d?>\s*/dev/null)(?=\s|$)|\s*(?<!\|)\|(?!\|).*$")


@dataclass
class FileFact:
    """One file: its last state, how many edits it had, and a one-line gist of what changed or was seen."""

    path: str
    state: str  # one of STATES
    edits: int = 0  # edits after creation (created) or in all (edited); 0 otherwise
    gist: str = ""

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


@dataclass
class Facts:
    files: dict[str, FileFact] = field(default_factory=dict)  # path -> fact, least recently touched first
    folders: dict[str, FolderFact] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    tests: list[TestRun] = field(default_factory=list)
    # Keys of commands and tool targets that succeeded in the messages these facts came from: merge_facts
    # marks older failures of the same key resolved. Not rendered (the resolution is what is kept).
    succeeded: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.files or self.folders or self.failures or self.tests)

    def touch(self, fact: FileFact) -> None:
        """Record what happened to one file (after everything recorded before)."""
        previous = self.files.pop(fact.path, None)
        self.files[fact.path] = combine(previous, fact)
        folder = self.folders.get(folder_of(fact.path))
        if folder is not None and posixpath.basename(fact.path) in folder.names:
            names = tuple(n for n in folder.names if n != posixpath.basename(fact.path))
            self.folders[folder.path] = replace(folder, names=names, count=max(len(names), folder.count - 1))
            if not self.folders[folder.path].count:
                del self.folders[folder.path]

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
    if old is None:
        return new
    if new.state == "deleted" or new.state == "created":
        return new
    if new.state == "edited":
        if old.state == "created":
            return FileFact(new.path, "created", old.edits + new.edits, new.gist or old.gist)
        edits = old.edits if old.state == "edited" else 0
        return FileFact(new.path, "edited", edits + new.edits, new.gist or old.gist)
    if old.changed:  # a read or search after a change: the change is what matters
        return old
    state = "read" if "read" in (old.state, new.state) else "searched"
    return FileFact(new.path, state, 0, new.gist or old.gist)


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
    for fact in new.files.values():
        out.touch(fact)
    for failure in new.failures:
        out.fail(failure)
    for run in new.tests:
        out.tested(run)
    out.succeeded = old.succeeded | new.succeeded
    return out


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
