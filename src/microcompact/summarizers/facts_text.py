"""Facts as marker text and back: ``### Files``, ``### Failing commands``, ``### Test runs`` and
``### What tools showed`` (written and ranked by :mod:`.facts_taught`) sections.

The transcript is the source of truth: after a restart the rolling summary is only its marker's text, so
:func:`parse_facts` reads back exactly what :func:`render_facts` wrote (``parse(render(f)) == f`` for
facts in canonical form). :func:`compress_facts` fits the ledger into a token budget: resolved failures,
old open failures (beyond the newest ten) and old test runs go first, then the gists of files only read,
then those files are folded under their folder (names kept), then edited files lose their gists, then
folders their names. A created, edited, renamed or deleted file is never dropped, so the ledger can stay
over budget only by naming changed files. What tools showed takes what the rest leaves, and at least
``TAUGHT_SHARE`` of the budget; what the agent itself mentioned of it (``used``) up to ``TAUGHT_USED_SHARE``,
and only as far as needed: read files' size-only gists go, gist-less read files fold under their folder
(names kept), then folders keep only their newest names, at least ``_NEWEST_NAMES[-1]`` (``ls`` gives the
rest back; a value the agent reached for is what a later step needs, and file names and definitions are
what it reaches for next, so they stay).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import replace

from .facts_model import (
    LOOKED,
    STATES,
    Facts,
    Failure,
    FileFact,
    FolderFact,
    TestRun,
    common_root,
    folder_of,
    one_line,
    relative,
)
from .facts_taught import TAUGHT, compress_lessons, counting_once, parse_lesson, render_lessons, used_cost

FILES = "Files"
FAILURES = "Failing commands"
TESTS = "Test runs"
LEDGER_HEADINGS = (FILES, FAILURES, TESTS, TAUGHT)
RESOLVED = "(resolved) "
_SEP = " — "
_FILES_HEADING = re.compile(r"^### Files(?: under (?P<root>/\S*/))?\s*$")
_TAUGHT_HEADING = re.compile(rf"^### {TAUGHT}(?: under (?P<root>/\S*/))?\s*$")
_HEADING = re.compile(r"^\s*#{1,6}\s+(?P<name>.*?)\s*$")
_STATE = re.compile(
    r"^(?P<state>created|edited|read|searched|deleted|renamed)(?: from (?P<moved>.+?))?"
    r"(?:,? (?:edited )?(?P<edits>\d+)x)?(?:, renamed from (?P<origin>.+))?$"
)
_SIZE_GIST = re.compile(r"^\d+ lines$")  # what a read file's gist says when it defines nothing
_FOLDER_STATE = re.compile(r"^(?P<count>\d+) read or searched$")
_FAILURE = re.compile(
    r"^(?P<resolved>\(resolved\) )?`(?P<command>[^`]*)` → (?P<status>exit -?\d+|error)(?:: (?P<reason>.*))?$"
)
_TEST = re.compile(r"^`(?P<command>[^`]*)` → (?P<passed>\d+) passed, (?P<failed>\d+) failed$")
# Verbs of the file bullets written before the ledger, strongest first, and the state each stands for.
_LEGACY_VERBS = {"deleted": "deleted", "written": "created", "edited": "edited", "read": "read", "searched": "searched"}
_OPEN_FAILURES = 10  # failures a ledger lists at the most (the newest), and open ones once over budget
SHORT_COMMAND_CHARS, SHORT_REASON_CHARS = 48, 64  # a failure's line once the commands must give way
TAUGHT_FLOOR = 0.2  # of the ledger's budget that what tools showed keeps even from failures and tests
TAUGHT_SHARE = 0.4  # of the ledger's budget that what tools showed may take from the files and commands
TAUGHT_USED_SHARE = 0.6  # ... and that what the agent mentioned of it may take from folders' name lists
_NEWEST_NAMES = (32, 16, 8)  # names a folder keeps, step by step, for that room (a few cost little)


def render_facts(facts: Facts) -> str:
    """The ledger sections (empty ones left out), or "" when there are no facts."""
    blocks = []
    if facts.files or facts.folders:
        root = common_root([*facts.files, *facts.folders, *(f.origin for f in facts.files.values() if f.origin)])
        heading = f"### {FILES} under {root}" if root else f"### {FILES}"
        lines = [_file_line(f, root) for f in facts.files.values()]
        lines += [_folder_line(f, root) for f in facts.folders.values()]
        blocks.append("\n".join([heading, *lines]))
    if facts.failures:
        blocks.append("\n".join([f"### {FAILURES}", *(_failure_line(f) for f in facts.failures)]))
    if facts.tests:
        lines = [f"- `{t.command}` → {t.passed} passed, {t.failed} failed" for t in facts.tests]
        blocks.append("\n".join([f"### {TESTS}", *lines]))
    if facts.taught:
        blocks.append(render_lessons(facts.taught))
    return "\n\n".join(blocks)


def parse_facts(text: str) -> Facts:
    """The facts in a summary's ledger sections; lines that do not read as facts are ignored."""
    facts = Facts()
    section, root = "", ""
    for raw in text.splitlines():
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            rooted = _FILES_HEADING.match(line) or _TAUGHT_HEADING.match(line)
            section = (FILES if line.startswith(f"### {FILES}") else TAUGHT) if rooted else heading["name"]
            root = (rooted["root"] or "") if rooted else ""
            continue
        if not line.startswith("- "):
            continue
        item = line[2:]
        if section == FILES:
            _parse_file_line(facts, item, root)
        elif section == FAILURES and (m := _FAILURE.match(item)):
            facts.failures.append(Failure(m["command"], m["status"], m["reason"] or "", bool(m["resolved"])))
        elif section == TESTS and (m := _TEST.match(item)):
            facts.tests.append(TestRun(m["command"], int(m["passed"]), int(m["failed"])))
        elif section == TAUGHT and (lesson := parse_lesson(item, root)) is not None:
            facts.taught.append(lesson)
    return facts


def strip_facts(text: str) -> str:
    """``text`` without its ledger sections (what is left is prose: findings, requirements, ...)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            rooted = _FILES_HEADING.match(line.strip()) or _TAUGHT_HEADING.match(line.strip())
            skipping = bool(rooted) or heading["name"] in LEDGER_HEADINGS
        if not skipping:
            kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def compress_facts(facts: Facts, budget_tokens: int, count_text: Callable[[str], int]) -> Facts:
    """``facts`` within ``budget_tokens``: what tools showed takes what the files and commands leave, and
    up to ``TAUGHT_SHARE`` of it more, made by shortening what files were only read (gists, then folders);
    what commands failed with and the test runs are never shortened to make room for it (they are dropped,
    oldest resolved first, only when the files and commands alone are over the budget). What the agent
    mentioned (``used``) may take up to ``TAUGHT_USED_SHARE``, made by ``_FOR_USED`` (see the module doc).
    What tools showed is ranked into its room by value (:func:`compress_lessons`)."""
    count_text = counting_once(count_text)  # the steps below count the same renderings again
    facts = replace(facts, failures=facts.failures[-_OPEN_FAILURES:])  # the newest, whatever the budget
    if not facts.taught:
        return _compress_core(facts, budget_tokens, count_text, _SHORTER_READS + _FEWER_COMMANDS)
    core = replace(facts, taught=[])
    lessons = count_text(render_lessons(facts.taught))
    used = min(used_cost(facts.taught, count_text), int(TAUGHT_USED_SHARE * budget_tokens))
    room = max(budget_tokens - count_text(render_facts(core)) - 2, int(TAUGHT_SHARE * budget_tokens))
    core = _compress_core(core, budget_tokens - min(lessons, room) - 2, count_text, _SHORTER_READS)
    if used:
        core = _compress_core(core, budget_tokens - used - 2, count_text, _FOR_USED)
    floor = min(lessons, int(TAUGHT_FLOOR * budget_tokens))  # what the commands give way to, at the most
    core = _compress_core(core, budget_tokens - floor, count_text, _FEWER_COMMANDS)
    room = budget_tokens - (count_text(render_facts(core)) + 2 if core else 0)
    return replace(core, taught=compress_lessons(facts.taught, max(room, 0), count_text))


Step = Callable[[Facts], Facts]
# Shortening what files were only read: the agent can read them again at no risk.
_SHORTER_READS: tuple[Step, ...] = (
    lambda f: replace(f, files={p: _without_gist(x) if x.state in LOOKED else x for p, x in f.files.items()}),
    lambda f: _fold_looked(f, min_files=2),
    lambda f: _fold_looked(f, min_files=1),
)
# ... and, for the values the agent mentioned, read files' sizes (no name in them) and the oldest names of
# folders (``ls`` gives them back); gists naming definitions stay.
_FOR_USED: tuple[Step, ...] = (
    lambda f: replace(f, files={p: _without_size(x) if x.state in LOOKED else x for p, x in f.files.items()}),
    lambda f: _fold_looked(f, min_files=2, bare=True),
    *(
        (lambda f, n=n: replace(f, folders={p: replace(x, names=x.names[-n:]) for p, x in f.folders.items()}))
        for n in _NEWEST_NAMES
    ),
)
# Then, only when the files and commands alone are over the budget: fewer failures, tests and names.
_FEWER_COMMANDS: tuple[Step, ...] = (
    lambda f: replace(f, failures=[_shorter(x) for x in f.failures]),
    lambda f: replace(f, failures=[x for x in f.failures if not x.resolved][-_OPEN_FAILURES:], tests=f.tests[-3:]),
    lambda f: replace(f, files={p: _without_gist(x) for p, x in f.files.items()}),
    lambda f: replace(f, folders={p: replace(x, names=()) for p, x in f.folders.items()}),
    lambda f: replace(f, failures=f.failures[-3:], tests=f.tests[-1:]),
    lambda f: replace(f, folders=_top_folders(f.folders)),
)


def _shorter(failure: Failure) -> Failure:
    """A failure named by the start of its command and of its reason: enough to recognise the dead end."""
    return replace(
        failure,
        command=one_line(failure.command, SHORT_COMMAND_CHARS),
        reason=one_line(failure.reason, SHORT_REASON_CHARS),
    )


def _compress_core(
    facts: Facts, budget_tokens: int, count_text: Callable[[str], int], steps: tuple[Step, ...]
) -> Facts:
    """The files and commands shortened by ``steps``, one at a time, until their rendering fits ``budget_tokens``."""
    for step in steps:
        if count_text(render_facts(facts)) <= budget_tokens:
            break
        facts = step(facts)
    return facts


def _file_line(fact: FileFact, root: str) -> str:
    """``path — state``: ``edited 2x``, ``created, edited 1x``, ``renamed from old.py, edited 1x``,
    ``edited 1x, renamed from old.py``; then ``: gist``."""
    state = fact.state
    origin = relative(fact.origin, root) if fact.origin else ""
    if origin and fact.state == "renamed":
        state += f" from {origin}"
    if fact.edits:
        state += f", edited {fact.edits}x" if fact.state in ("created", "renamed") else f" {fact.edits}x"
    if origin and fact.state != "renamed":
        state += f", renamed from {origin}"
    gist = f": {fact.gist}" if fact.gist else ""
    return f"- {relative(fact.path, root)}{_SEP}{state}{gist}"


def _folder_line(folder: FolderFact, root: str) -> str:
    names = f": {', '.join(folder.names)}" if folder.names else ""
    return f"- {relative(folder.path, root)}{_SEP}{folder.count} read or searched{names}"


def _failure_line(failure: Failure) -> str:
    reason = f": {failure.reason}" if failure.reason else ""
    return f"- {RESOLVED if failure.resolved else ''}`{failure.command}` → {failure.status}{reason}"


def _parse_file_line(facts: Facts, item: str, root: str) -> None:
    path, sep, rest = item.partition(_SEP)
    if not sep or not path:
        return
    state_text, _, gist = rest.partition(": ")
    full = root + path if root and not path.startswith("/") else path
    folder = _FOLDER_STATE.match(state_text)
    if path.endswith("/") and folder:
        names = tuple(n for n in gist.split(", ") if n) if gist else ()
        facts.folders[full] = FolderFact(full, int(folder["count"]), names)
        return
    state = _STATE.match(state_text)
    if state and state["state"] in STATES:
        origin = state["moved"] or state["origin"] or ""
        if origin and root and not origin.startswith("/"):
            origin = root + origin
        facts.files[full] = FileFact(full, state["state"], int(state["edits"] or 0), gist, origin)
        return
    legacy = _legacy_state(state_text)
    if legacy:
        facts.files[full] = FileFact(full, legacy, 1 if legacy == "edited" else 0, "")


def _legacy_state(verbs_text: str) -> str | None:
    """The state a summary written before the ledger gave a file (``src/a.py — read, edited``), so a
    session stored then keeps its files."""
    verbs = {v.strip() for v in verbs_text.split(",")}
    if not verbs or not verbs <= set(_LEGACY_VERBS):
        return None
    return next((state for verb, state in _LEGACY_VERBS.items() if verb in verbs), None)


def _without_gist(fact: FileFact) -> FileFact:
    return replace(fact, gist="")


def _without_size(fact: FileFact) -> FileFact:
    return replace(fact, gist="") if _SIZE_GIST.match(fact.gist) else fact


def _fold_looked(facts: Facts, *, min_files: int, bare: bool = False) -> Facts:
    """Files only read or searched (``bare``: and without a gist), folded under their folder where it holds
    at least ``min_files``."""
    groups: dict[str, list[str]] = {}
    for path, fact in facts.files.items():
        if fact.state in LOOKED and not (bare and fact.gist):
            groups.setdefault(folder_of(path), []).append(path)
    folded = {p for paths in groups.values() if len(paths) >= min_files for p in paths}
    if not folded:
        return facts
    folders = dict(facts.folders)
    for folder, paths in groups.items():
        paths = [p for p in paths if p in folded]
        if not paths:
            continue
        mine = folders.pop(folder, FolderFact(folder, 0))
        names = tuple(dict.fromkeys(mine.names + tuple(posixpath.basename(p.rstrip("/")) for p in paths)))
        folders[folder] = FolderFact(folder, mine.count + len(paths), names)
    files = {p: f for p, f in facts.files.items() if p not in folded}
    return replace(facts, files=files, folders=folders)


def _top_folders(folders: dict[str, FolderFact]) -> dict[str, FolderFact]:
    """Folders merged into their top two levels (counts only): the last step before giving up."""
    out: dict[str, FolderFact] = {}
    for path, folder in folders.items():
        parts = [p for p in path.split("/") if p]
        top = ("/" if path.startswith("/") else "") + "/".join(parts[:2]) + "/" if parts else path
        mine = out.get(top)
        out[top] = FolderFact(top, folder.count + (mine.count if mine else 0))
    return out
