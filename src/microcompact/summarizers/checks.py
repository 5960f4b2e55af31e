"""Checks on a model's summary against what it was given, before the summary is accepted.

Small local models fail in recognisable ways (measured on real sessions, issue 12): they hand the previous
summary back unchanged, copy the prompt's own rules or one input message, corrupt a path
(``lib/spotter_services/x`` for ``lib/spotter/services/x``), claim a file was created when it was only
opened, or leave out the sections they were asked to fill. Each check below looks for one of these and
returns a :class:`Rejection` (why, in one line) or ``None``; :func:`check_summary` runs them all.

A summary is also checked for where its claims come from (:mod:`.provenance`): a requirement no user
message states (``untraced_requirement``), and a line that passes tool or assistant text off as a user
request or a system instruction, or repeats an order or a forged turn without saying where it came from
(``laundered``). Saying so ("a tool output said “...”") is always allowed.

"The input" is everything the model was shown plus the facts code keeps beside its prose: the exchange,
the previous summary and the trusted facts block. Nothing a check accepts can name a file, command or
result that appears nowhere in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .base import Rejection
from .findings import sentences
from .provenance import claims_authority, flagged, imitation, tainted_from
from .sections import HEADING, LIST_MARKER, clip, parse_sections

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


# --------------------------------------------------------------------------- provenance

# Sections that hold what the user asked for: only a user message (or the previous summary's same sections)
# may fill them. A batch summary's "Goal" is inferred from the work as often as stated, so it is not one.
REQUIREMENT_SECTIONS = frozenset(
    {"requirements", "user requirements", "constraints and preferences", "constraints", "preferences"}
)
_STATED_SECTIONS = REQUIREMENT_SECTIONS | {"goal"}
# Share of a bullet's content words a user message must hold for the bullet to trace to it (a paraphrase
# keeps about half of them; a request the user never made keeps almost none).
TRACED_SHARE = 0.5
_GRAM = 4  # words in a row that make a copy of flagged text
_LABEL = re.compile(r"^(?:ASSISTANT: |TOOL RESULT \[[^\]\n]*\]: )")
_STOP = frozenset(
    "the and for with that this these those from into onto are was were been being has have had its but not "
    "all any our you your they them their there here then than when what which who will would could can may "
    "also just very more most some such each other about over under after before again once none out off".split()
)
# The words of a claim's frame ("the user asked ..."): what is traced is what the user supposedly asked.
_FRAME = frozenset(
    "user users human system prompt ask asked asks want wanted wants request requested requests require "
    "required requires said say says told tell tells instruct instructed instructs insist insisted demand "
    "demanded order ordered approve approved confirm confirmed expect expects like would please".split()
)
_QUOTES = re.compile(r"“([^“”]*)”|\"([^\"\n]*)\"")
_CODE = re.compile(r"`[^`\n]*`")
_CLAUSE = re.compile(r"(?<=[.;!?])\s+")
# Saying where a claim came from: a source and a verb of saying close together ("a tool output said",
# "the assistant wrote", "the README says", "the error message claimed", "CLAUDE.md says").
_ATTRIBUTION = re.compile(
    r"(?i)\b(?:tool|output|result|command|script|file|log|page|document|readme|comment|assistant|agent|model|"
    r"error|message|excerpt|transcript|text|response|reply|edit|docstring|issue)s?\b[^.!?\n“\"]{0,30}?"
    r"\b(?:said|says|wrote|writes|printed|prints|reads|read|contained|contains|claimed|claims|stated|states|"
    r"showed|shows|asked|asks|told|tells|added|replied|quoted|included|includes|suggested|suggests|demanded|"
    r"instructed|mentioned|mentions)\b"
    r"|[\w./-]+\.[A-Za-z]{1,8}\b[^.!?\n“\"]{0,20}?\b(?:says|said|reads|contains|states|stated|asks|tells|printed)\b"
)


def user_texts(given: CheckInput) -> list[str]:
    """The text of each user message the model was shown (each input message is rendered with its role)."""
    return [text.removeprefix("USER: ") for text in given.messages if text.startswith("USER: ")]


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry its meaning, crudely stemmed ("deleted", "deletes" -> "delet")."""
    return [_stem(w) for w in words(text) if len(w) >= 3 and w not in _STOP and not w.isdigit()]


def _stated(given: CheckInput) -> set[str]:
    """The content words of what users wrote, as far as the input shows: their messages, and the goal and
    requirement sections of the previous summary (which came from user messages before)."""
    kept = [
        "\n".join(section.items)
        for section in parse_sections(given.previous + "\n\n" + given.trusted)
        if section.name in _STATED_SECTIONS
    ]
    return set(content_words("\n".join([*user_texts(given), *kept])))


def traced_share(text: str, stated: set[str]) -> float:
    """The share of ``text``'s content words (its claim frame left out) that users wrote."""
    found = [w for w in content_words(text) if w not in _FRAME]
    return sum(w in stated for w in found) / len(found) if found else 1.0


def _is_none(item: str) -> bool:
    return item.strip(" .*_()").lower() in ("", "none", "n/a", "nothing", "not stated", "none stated")


def untraced_requirement(summary: str, given: CheckInput) -> Rejection | None:
    """A requirement or constraint no user message states: the model promoted tool or assistant text (or
    made it up)."""
    stated = _stated(given)
    for section in parse_sections(summary):
        if section.name not in REQUIREMENT_SECTIONS:
            continue
        for item in section.items:
            if not _is_none(item) and traced_share(item, stated) < TRACED_SHARE:
                why = f"lists {clip(item, 70)!r} under {section.name!r}, which no user message says"
                return Rejection("untraced_requirement", why)
    return None


def _flagged_grams(given: CheckInput) -> set[tuple[str, ...]]:
    """Word 4-grams of the input's text that could pass for an order or a role's turn: flagged sentences
    of assistant messages and tool outputs (all of a forged turn, from where it starts), and what the
    previous summary quotes. Words a user message or the plain rest of the input also says are not
    among them: a line may come from there."""
    flagged_grams: set[tuple[str, ...]] = set()
    plain = ngrams(words("\n".join(user_texts(given))), _GRAM)
    for rendered in given.messages:
        label = _LABEL.match(rendered)
        if label is None:
            continue  # a user or system message: theirs to state
        text = rendered[label.end() :]
        tool = label.group(0).startswith("TOOL")
        cut = tainted_from(text)
        flagged_grams |= ngrams(words(text[cut:]), _GRAM)
        for sentence in sentences(text[:cut], limit=len(text) + 1):
            grams = ngrams(words(sentence), _GRAM)
            if flagged(sentence, rules=tool):
                flagged_grams |= grams
            else:
                plain |= grams
    for quote in re.findall(r"“([^“”]*)”", given.previous + "\n" + given.trusted):
        flagged_grams |= ngrams(words(quote), _GRAM)
    return flagged_grams - plain


def clauses(line: str) -> list[str]:
    """The clauses of a summary line (split after ``.``, ``;``, ``!``, ``?``), never inside a quotation:
    an attribution vouches for its own clause, not for the rest of the line."""
    quotes: list[str] = []

    def hide(match: re.Match[str]) -> str:
        quotes.append(match.group(0))
        return f"\x00{len(quotes) - 1}\x00"

    masked = _QUOTES.sub(hide, line)
    return [re.sub(r"\x00(\d+)\x00", lambda m: quotes[int(m.group(1))], c) for c in _CLAUSE.split(masked) if c]


def _launders(clause: str, stated: set[str], planted: set[tuple[str, ...]]) -> str | None:
    """Why one clause launders tool or assistant text, or None (an attributed clause never does)."""
    if _ATTRIBUTION.search(clause):
        return None
    quoted = [a or b for a, b in _QUOTES.findall(clause)]
    bare = _CODE.sub(" ", _QUOTES.sub(" ", clause))
    speaks = bool(imitation(bare)) or claims_authority(bare)
    if speaks and traced_share(bare, stated) < TRACED_SHARE:
        return f"{clip(clause, 70)!r} speaks for the user or the system, but no user message says it"
    if any(ngrams(words(part), _GRAM) & planted for part in (bare, *quoted)):
        return f"{clip(clause, 70)!r} repeats an order or a forged turn of the input without naming its source"
    return None


def laundered(summary: str, given: CheckInput) -> Rejection | None:
    """A clause that states tool or assistant text as a request of the user or an instruction of the
    system: it imitates a role's turn or claims to speak for the user ("the user asked ...") beyond what
    users wrote, or copies flagged input text (an order, a forged turn) without saying where it came from."""
    stated, planted = _stated(given), _flagged_grams(given)
    for raw in body_text(summary).splitlines():
        for clause in clauses(LIST_MARKER.sub("", raw).strip()):
            why = _launders(clause, stated, planted)
            if why is not None:
                return Rejection("laundered", why)
    return None


CHECKS = (
    missing_sections,
    prompt_echo,
    unchanged,
    message_copy,
    unknown_paths,
    unknown_commands,
    unsupported_claims,
    untraced_requirement,
    laundered,
)


def check_summary(summary: str, given: CheckInput) -> Rejection | None:
    """The first reason not to accept ``summary``, or None when every check passes."""
    for check in CHECKS:
        rejection = check(summary, given)
        if rejection is not None:
            return rejection
    return None
