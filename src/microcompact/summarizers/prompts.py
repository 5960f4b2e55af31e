"""The HTTP summarizer's prompts, kept as templates outside the code (``templates/``).

Prompt wording is edited as text, not as Python: each template is a file read with importlib.resources
(so an installed wheel has them too) and filled with :class:`string.Template` (``$name``), which leaves
braces and every other character of the prose alone. A template file ends with one newline that is not
part of the prompt.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

from .base import BATCH_SECTIONS, PROSE_SECTIONS

TEMPLATES = "templates"
# Every template this module renders (tests check each one loads and renders completely).
TEMPLATE_NAMES = (
    "common_rules.md",
    "merge_system.md",
    "condense_system.md",
    "batch_system.md",
    "merge_request.txt",
    "condense_request.txt",
    "batch_request.txt",
    "batch_focus.txt",
    "prose_template.md",
    "retry_note.txt",
    "upstream_merge.txt",
)
EMPTY_MERGE_SUMMARY = "(empty: this is the first excerpt)"  # what the model sees before the first fold
EMPTY_BATCH_SUMMARY = "(none)"
# The stated length of a model's notes (merge and condense): small models follow a number of words better
# than a number of tokens. The facts kept beside the notes by code are not counted in it.
PROSE_WORDS = 250


@cache
def load_template(name: str) -> Template:
    """The template ``name`` from the package's ``templates/`` folder (read once per process)."""
    text = resources.files(__package__).joinpath(TEMPLATES, name).read_text(encoding="utf-8")
    return Template(text.removesuffix("\n"))


def render(name: str, **values: object) -> str:
    """Template ``name`` filled with ``values``; a placeholder left without a value is a KeyError."""
    return load_template(name).substitute(values)


def _system_prompt(name: str, **values: object) -> str:
    return render(name, common_rules=render("common_rules.md"), **values)


def merge_system(max_words: int = PROSE_WORDS) -> str:
    """The system prompt of a merge: the fill-in template, its stated length, the rules."""
    return _system_prompt("merge_system.md", template=render("prose_template.md"), max_words=max_words)


def condense_system(max_words: int = PROSE_WORDS) -> str:
    """The system prompt of a condense: the same template, a shorter stated length."""
    return _system_prompt("condense_system.md", template=render("prose_template.md"), max_words=max_words)


def condense_words(target_tokens: int) -> int:
    """The stated length of condensed notes that fit ``target_tokens`` (about 0.75 words a token)."""
    return max(60, min(PROSE_WORDS, target_tokens * 3 // 4))


def retry_note(reason: str) -> str:
    """What a retry adds to the request: why the first answer was rejected (the request changes)."""
    return render("retry_note.txt", reason=reason)


MERGE_PROMPT = merge_system()
CONDENSE_PROMPT = condense_system()
PROSE_HEADINGS = tuple(name.lower() for name in PROSE_SECTIONS)
BATCH_PROMPT = _system_prompt("batch_system.md", section_headings="\n".join(f"### {name}" for name in BATCH_SECTIONS))


def merge_request(summary: str, transcript: str, max_words: int = PROSE_WORDS) -> str:
    """The user message of a merge: the notes so far, the excerpt to fold in, and the length once more
    (after the data, where a small model still sees it)."""
    return render(
        "merge_request.txt", summary=summary.strip() or EMPTY_MERGE_SUMMARY, transcript=transcript, max_words=max_words
    )


def condense_request(summary: str, max_words: int) -> str:
    """The user message of a condense: the notes to shorten and the length to shorten them to."""
    return render("condense_request.txt", max_words=max_words, summary=summary.strip())


def batch_request(summary: str, transcript: str, focus: str | None) -> str:
    """The user message of a batch compaction: previous summary, optional focus, transcript."""
    focus_block = render("batch_focus.txt", focus=focus.strip()) + "\n\n" if focus else ""
    return render(
        "batch_request.txt", summary=summary.strip() or EMPTY_BATCH_SUMMARY, focus=focus_block, transcript=transcript
    )
