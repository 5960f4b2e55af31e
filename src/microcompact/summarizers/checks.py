"""Checks on a model's summary against what it was given, before the summary is accepted.

Small local models fail in recognisable ways (measured on real sessions, issue 12): they hand the previous
summary back unchanged, copy the prompt's own rules or one input message, corrupt a path
(``lib/spotter_services/x`` for ``lib/spotter/services/x``), claim a file was created when it was only
opened, or leave out the sections they were asked to fill. Each check below looks for one of these and
returns a :class:`Rejection` (why, in one line) or ``None``; :func:`check_summary` runs them all.

"The input" is everything the model was shown plus the facts code keeps beside its prose: the exchange,
the previous summary and the trusted facts block. Nothing a check accepts can name a file, command or
result that appears nowhere in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .base import Rejection
from .sections import HEADING, parse_sections

# A summary adding fewer word 3-grams than this to the previous one is "(near-)unchanged": one new
# clause is enough to pass, a changed digit or a reordering is not.
UNCHANGED_MIN_NEW = 3
# Share of a summary's word 5-grams found in the prompt's instructions (or in one input message) above
# which it is a copy, not a summary. A summary quoting one error line stays far below these.
PROMPT_COPY_SHARE = 0.35
MESSAGE_COPY_SHARE = 0.6
_NGRAM = 5
_MIN_WORDS_FOR_COPY = 20  # shorter answers are too short to call a copy


@dataclass(frozen=True)
class CheckInput:
    """What the model was shown, as text, and what it was asked for."""

    previous: str  # the previous summary (prose the model saw, plus the facts kept beside it)
    messages: Sequence[str]  # each input message's text (content, tool calls, results)
    instructions: str  # the prompt's own wording: system prompt and request scaffolding, without the data
    required_sections: Sequence[str] = ()  # heading names (lowercase) the answer must keep
    trusted: str = ""  # facts kept by code beside the prose (file ledger, failing commands)
    previous_prose: str = ""  # the part of the previous summary the model was asked to rewrite

    @property
    def source(self) -> str:
        return "\n".join([self.previous, self.trusted, *self.messages])


# --------------------------------------------------------------------------- text helpers

_WORD = re.compile(r"[A-Za-z0-9_./-]+")


def words(text: str) -> list[str]:
    """Lowercased word-like tokens (paths and identifiers stay whole); markdown and punctuation dropped."""
    return [w.strip("./-").lower() for w in _WORD.findall(text) if w.strip("./-")]


def ngrams(tokens: Sequence[str], n: int = _NGRAM) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def body_text(summary: str) -> str:
    """A summary without its heading lines: what was written, not the frame every answer shares."""
    return "\n".join(line for line in summary.splitlines() if not HEADING.match(line))


def copied_share(text: str, source: str) -> float:
    """The share of ``text``'s word 5-grams that also occur in ``source`` (0 for text too short to tell)."""
    tokens = words(text)
    if len(tokens) < _MIN_WORDS_FOR_COPY:
        return 0.0
    mine = ngrams(tokens)
    return len(mine & ngrams(words(source))) / len(mine) if mine else 0.0


# A path: a name with a folder (two or more parts, or rooted at /, ./, ~/) or a file name with an
# alphabetic extension. URLs are not paths.
_PATH = re.compile(
    r"(?<![\w@:/.-])"
    r"(?:(?:~|\.{1,2})?/)?(?:[\w.-]+/)+[\w.-]*[\w]"  # folder/name, /abs/path, ./rel
    r"|(?<![\w@:/.-])[\w-]{2,}(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}\b(?!/)"  # name.ext
)
_NOT_PATHS = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m", "and/or", "n/a", "pass/fail", "input/output"})


def mentioned_paths(text: str) -> list[str]:
    """File paths ``text`` names, in order, without duplicates (URLs, numbers and abbreviations left out)."""
    found: dict[str, None] = {}
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".")
        start = match.start()
        if text[max(0, start - 3) : start].endswith("://") or path.lower() in _NOT_PATHS:
            continue
        if "/" not in path and not re.search(r"\.[A-Za-z]", path):
            continue
        if "/" in path and "." not in path.rsplit("/", 1)[-1] and path.count("/") < 2 and path[0] not in "/~.":
            continue  # one slash, no extension: "client/server", not a path worth checking
        found.setdefault(path.removeprefix("./"))
    return list(found)


# --------------------------------------------------------------------------- the checks


def unchanged(summary: str, given: CheckInput) -> Rejection | None:
    """The previous summary handed back (near-)unchanged although the exchange named something new."""
    previous = given.previous_prose or given.previous
    if not previous.strip():
        return None
    added = ngrams(words(summary), 3) - ngrams(words(previous), 3)
    if len(added) >= UNCHANGED_MIN_NEW:
        return None
    new = new_facts(given)
    if not new:
        return None
    shown = ", ".join(new[:3])
    return Rejection("unchanged", f"repeats the previous summary although the exchange adds {shown}")


def new_facts(given: CheckInput) -> list[str]:
    """Paths the exchange names that the previous summary does not: evidence it brought something new."""
    known = given.previous + "\n" + given.trusted
    out: list[str] = []
    for text in given.messages:
        out += [p for p in mentioned_paths(text) if p not in known and p not in out]
    if not out and sum(len(t) for t in given.messages) > 400:
        out.append("new messages")  # a real exchange with no paths in it still adds something
    return out


_PLACEHOLDER = re.compile(r"<(?:one|up to|\d)[^<>\n]{3,}>")


def prompt_echo(summary: str, given: CheckInput) -> Rejection | None:
    """The prompt's own instructions (or the template's unfilled placeholders) copied back."""
    placeholder = _PLACEHOLDER.search(summary)
    if placeholder:
        return Rejection("prompt_echo", f"the template's placeholder {placeholder.group(0)[:60]!r} left in")
    share = copied_share(body_text(summary), given.instructions)
    if share >= PROMPT_COPY_SHARE:
        return Rejection("prompt_echo", f"{share:.0%} of it is the prompt's own instructions")
    return None


def message_copy(summary: str, given: CheckInput) -> Rejection | None:
    """Mostly a verbatim copy of one input message (or of the previous summary's task text)."""
    body = body_text(summary)
    for i, text in enumerate(given.messages):
        share = copied_share(body, text)
        if share >= MESSAGE_COPY_SHARE:
            return Rejection("message_copy", f"{share:.0%} of it is copied from input message {i + 1}")
    return None


def unknown_paths(summary: str, given: CheckInput) -> Rejection | None:
    """A path that appears nowhere in the input: made up, or a corrupted copy of a real one."""
    source = given.source
    missing = [p for p in mentioned_paths(summary) if p not in source]
    if not missing:
        return None
    return Rejection("unknown_path", f"names {', '.join(missing[:3])}, which the input does not show")


_CODE_SPAN = re.compile(r"`([^`\n]{2,200})`")


def unknown_commands(summary: str, given: CheckInput) -> Rejection | None:
    """A command in backticks whose program the input never mentions (``npm test`` in a Python session)."""
    source = given.source
    lowered = source.lower()
    for span in _CODE_SPAN.findall(summary):
        span = span.strip()
        if " " not in span or span in source:
            continue
        program = span.split()[0]
        if re.fullmatch(r"[A-Za-z][\w.-]*", program) and program.lower() not in lowered:
            return Rejection("unknown_command", f"names the command `{span[:60]}`, which the input does not run")
    return None


_CREATED = re.compile(r"(?i)\b(?:created?|creating|wrote|written|added (?:a |the )?(?:new )?file|new file)\b")
_WRITE_EVIDENCE = re.compile(r"(?i)\b(?:create|created|write|wrote|written|new file|touch|save|saved)\b")
_COUNT_CLAIM = re.compile(r"(?i)\b(\d+)\s+(?:tests?\s+)?(pass(?:ed|es|ing)?|fail(?:ed|s|ing|ures?)?|errors?)\b")


def unsupported_claims(summary: str, given: CheckInput) -> Rejection | None:
    """An outcome the input does not show: a file "created" that was only opened, a test count never seen."""
    for sentence in re.split(r"(?<=[.!?])\s+|\n", summary):
        if not _CREATED.search(sentence):
            continue
        for path in mentioned_paths(sentence):
            if not _creation_shown(path, given):
                why = f"says {path} was created or written; the input shows no write to it"
                return Rejection("unsupported_claim", why)
    source = given.source
    for number, what in _COUNT_CLAIM.findall(summary):
        near = rf"\b{number}\b[^\n]{{0,30}}(?:pass|fail|test|error)|(?:pass|fail|test|error)[^\n]{{0,30}}\b{number}\b"
        if not re.search(near, source, re.IGNORECASE):
            return Rejection("unsupported_claim", f"reports {number} {what}, a count the input does not show")
    return None


def _creation_shown(path: str, given: CheckInput) -> bool:
    """Some text naming ``path`` also shows a write (a create/write call, a redirect, a summary saying so)."""
    texts: Iterable[str] = [*given.messages, given.previous, given.trusted]
    for text in texts:
        if path not in text:
            continue
        for line in text.splitlines():
            if path in line and (_WRITE_EVIDENCE.search(line) or re.search(rf">>?\s*\S*{re.escape(path)}", line)):
                return True
    return False


def missing_sections(summary: str, given: CheckInput) -> Rejection | None:
    """A section the request requires was left out."""
    if not given.required_sections:
        return None
    present = {section.name for section in parse_sections(summary) if section.heading}
    missing = [name for name in given.required_sections if name not in present]
    if not missing:
        return None
    return Rejection("missing_sections", f"leaves out the required section(s) {', '.join(missing)}")


CHECKS = (missing_sections, prompt_echo, unchanged, message_copy, unknown_paths, unknown_commands, unsupported_claims)


def check_summary(summary: str, given: CheckInput) -> Rejection | None:
    """The first reason not to accept ``summary``, or None when every check passes."""
    for check in CHECKS:
        rejection = check(summary, given)
        if rejection is not None:
            return rejection
    return None
