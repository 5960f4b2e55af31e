"""What tools taught: per absorbed tool result, the values a later step is likely to reach for.

A :class:`Lesson` is one tool result's keepsakes, typed (:class:`ItemKind`): the symbols a read file
defines, the ``path:line`` hits of a search, a command's exit status, error lines, test names, ids and
versions, and the identifiers (:mod:`microcompact.identifiers`) the agent went on to mention (``used``).
They are written as the marker section ``### What tools showed``, one line per lesson::

    - read `/w/lib/registry.ex`: used end_session, pane_exists; defines Registry, start_link
    - ran `mix test` → exit 1: errors ** (KeyError) key :id not found; tests test/a_test.exs:12

and read back from it (``parse_lesson(render_lesson(x)) == x`` for lessons in canonical form).

**Budget by value, not by order** (:func:`compress_lessons`): every item is ranked, an item the agent
mentioned again first (with the ids of the same result: :func:`_tier`), then error lines, then symbols and
test names, then hits, ids and versions, then other names; within a rank the newer lesson first. Items are
kept in that order while they fit; a lesson left with nothing is dropped. A mention in a later span moves an
item into ``used`` and its lesson to the newest place (:func:`merge_lessons`): what the agent keeps using
stays, what nobody used goes first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from .facts_model import TIER, ItemKind, Lesson, ToolKind, common_root, relative

TAUGHT = "What tools showed"


_BY_LABEL = {k.value: k for k in ItemKind}
_ERROR_SEP = " | "  # error lines hold commas; every other value is one token
_LESSON = re.compile(
    r"^(?P<kind>read|searched|ran|edited|called) `(?P<subject>[^`]*)`"
    r"(?: → (?P<status>exit -?\d+|error|edited since|deleted since|moved since))?(?:: (?P<items>.*))?$"
)
_KINDS = {k.value: k for k in ToolKind}


def clean_value(kind: ItemKind, value: str) -> str:
    """``value`` as the section can hold it: one line, no backquote, no group or value separator."""
    line = " ".join(value.replace("`", "'").split()).replace("; ", ", ")
    return line.replace(_ERROR_SEP, " / ") if kind is ItemKind.ERROR else line.replace(", ", ",")


def render_lesson(lesson: Lesson, root: str = "") -> str:
    """The lesson's bullet; a read's path under ``root`` is written without it."""
    status = f" → {lesson.status}" if lesson.status else ""
    groups = [
        f"{kind.value} {(_ERROR_SEP if kind is ItemKind.ERROR else ', ').join(values)}"
        for kind, values in lesson.items.items()
        if values
    ]
    items = f": {'; '.join(groups)}" if groups else ""
    subject = relative(lesson.subject, root) if lesson.kind is ToolKind.READ else lesson.subject
    return f"- {lesson.kind.value} `{subject}`{status}{items}"


def taught_root(lessons: list[Lesson]) -> str:
    """The folder factored out of the reads' paths (as the files section does), or ""."""
    return common_root([x.subject for x in lessons if x.kind is ToolKind.READ])


def render_lessons(lessons: list[Lesson]) -> str:
    """The section, or "" when there is nothing to keep. When every read's path is absolute, the folder
    they share most is written once in the heading (``### What tools showed under /w/app/``)."""
    if not lessons:
        return ""
    root = taught_root(lessons)
    heading = f"### {TAUGHT} under {root}" if root else f"### {TAUGHT}"
    return "\n".join([heading, *(render_lesson(x, root) for x in lessons)])


def parse_lesson(item: str, root: str = "") -> Lesson | None:
    """A lesson from its bullet's text (without ``- ``) in a section whose heading names ``root``, or None
    when it does not read as one."""
    match = _LESSON.match(item)
    if match is None:
        return None
    tool = _KINDS[match["kind"]]
    subject = match["subject"]
    if root and tool is ToolKind.READ and not subject.startswith("/"):
        subject = root + subject
    items: dict[ItemKind, list[str]] = {}
    for group in (match["items"] or "").split("; "):
        label, _, rest = group.partition(" ")
        kind = _BY_LABEL.get(label)
        if kind is None or not rest:
            continue
        values = rest.split(_ERROR_SEP) if kind is ItemKind.ERROR else rest.split(", ")
        items.setdefault(kind, []).extend(v for v in values if v)
    return Lesson(tool, subject, match["status"] or "", items)


def used_cost(lessons: list[Lesson], count_text: Callable[[str], int]) -> int:
    """What the lessons' ``used`` items cost as :func:`compress_lessons` counts them (a little over their
    rendering): the room that keeps every value the agent mentioned."""
    used = [replace(x, items={ItemKind.USED: x.items[ItemKind.USED]}) for x in lessons if x.items.get(ItemKind.USED)]
    if not used:
        return 0
    root = taught_root(lessons)
    cost = count_text(f"### {TAUGHT} under {root}") + 1
    for lesson in used:
        cost += count_text(render_lesson(replace(lesson, items={}), root)) + 2
        cost += sum(count_text(v) + 1 for v in lesson.items[ItemKind.USED])
    return cost


def counting_once(count_text: Callable[[str], int]) -> Callable[[str], int]:
    """``count_text`` remembering what it counted for as long as the caller holds it: a ledger's compression
    counts the same values and renderings again at every step and every retry."""
    counts: dict[str, int] = {}

    def count(text: str) -> int:
        n = counts.get(text)
        if n is None:
            n = counts[text] = count_text(text)
        return n

    return count


def _tier(lesson: Lesson, kind: ItemKind) -> int:
    """``kind``'s rank; the ids of a result the agent quoted from rank with what it quoted: the output it used
    holds what it reaches for later (a step's key quoted at once, its id needed 8 steps on)."""
    if kind is ItemKind.ID and lesson.items.get(ItemKind.USED):
        return TIER[ItemKind.USED]
    return TIER[kind]


def compress_lessons(lessons: list[Lesson], budget_tokens: int, count_text: Callable[[str], int]) -> list[Lesson]:
    """The lessons' items kept by rank while the section fits ``budget_tokens`` (see the module doc)."""
    count_text = counting_once(count_text)
    if not lessons or count_text(render_lessons(lessons)) <= budget_tokens:
        return lessons
    ranked = sorted(
        (
            (_tier(lesson, kind), -n, i, n, kind, value)
            for n, lesson in enumerate(lessons)
            for kind, values in lesson.items.items()
            for i, value in enumerate(values)
        ),
        key=lambda r: r[:3],
    )
    root = taught_root(lessons)
    heading = count_text(f"### {TAUGHT} under {root}") + 1
    openers: dict[int, int] = {}
    while True:  # the ranking and the counts stay; only the budget shrinks
        out = _ranked_into(lessons, ranked, root, heading, openers, budget_tokens, count_text)
        over = count_text(render_lessons(out)) - budget_tokens
        if over <= 0:
            return out
        if budget_tokens <= over:
            return []
        budget_tokens -= over  # labels and separators the estimate left out: try again with that much less


def _ranked_into(
    lessons: list[Lesson],
    ranked: list[tuple[int, int, int, int, ItemKind, str]],
    root: str,
    heading: int,
    openers: dict[int, int],
    budget_tokens: int,
    count_text: Callable[[str], int],
) -> list[Lesson]:
    """The lessons with the ``ranked`` items kept in rank order while their estimated cost fits."""
    spent = heading
    chosen: set[tuple[int, str, str]] = set()  # by the kind's label: an enum member hashes in Python
    seen: set[str] = set()
    opened: set[int] = set()
    for _, _, _, n, kind, value in ranked:
        if value in seen:
            continue
        cost = count_text(value) + 1
        if n not in opened:
            if n not in openers:
                openers[n] = count_text(render_lesson(replace(lessons[n], items={}), root)) + 2
            cost += openers[n]
        if spent + cost > budget_tokens:
            continue
        spent += cost
        seen.add(value)
        opened.add(n)
        chosen.add((n, kind.value, value))
    out = []
    for n, lesson in enumerate(lessons):
        items = {k: [v for v in vs if (n, k.value, v) in chosen] for k, vs in lesson.items.items()}
        items = {k: vs for k, vs in items.items() if vs}
        if items:
            out.append(replace(lesson, items=items))
    return out
