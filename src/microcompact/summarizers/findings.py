"""Findings, not narration: the sentences of an agent's prose worth keeping in a summary.

A finding states a conclusion, a cause, a decision or a constraint ("The test fails because the fixture
is async.", "Use happy-dom instead of jsdom since the suite needs no layout."). Narration announces
what the agent is about to do or cheers what it just did ("Let me check the fixture.", "Now I'll run the
tests.", "Perfect!") and says nothing the next steps do not show anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .provenance import ASSISTANT, report, tainted_from
from .sections import LIST_MARKER, clip

ITEM_CHARS = 240
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_NARRATION = re.compile(
    r"(?i)^(?:(?:now|next|first|then|finally|ok(?:ay)?|alright|so|great|good|perfect|excellent|done|"
    r"awesome|nice|all right|right|yes|ah|oh|wait|hmm)\b[,!.]?\s*)*"
    r"(?:let me|let's|let us|i'll|i will|i'm going to|i am going to|i need to|i should|i want to|i can|"
    r"i see|i'm|i am|we'll|we need to|we should|going to|time to|looking at|checking|reading|running|"
    r"now\b|next\b|perfect|great|excellent|good|awesome|ok(?:ay)?\b|alright|done\b|hmm|sure\b|"
    r"here's|here is|this will|that should)"
)
_DECIDING = re.compile(r"(?i)^(?:i'll|i will|we'll|we will|i'm going to|we're going to)\b")
_FINDING = re.compile(
    r"(?i)\b(?:because|since|due to|caused by|root cause|the (?:issue|problem|bug|error|cause|reason|fix|"
    r"culprit) (?:is|was)|turns out|which means|this means|means that|so that|instead of|rather than|"
    r"decided|decision|chose|chosen|prefer|must|must not|cannot|can't|won't|doesn't|does not|isn't|is not|"
    r"aren't|are not|never|always|only|requires?|required|expects?|already|missing|conflicts?|"
    r"breaks?|broken|fails?|failing|failed|passes|passing|works|working|now (?:uses?|has|is|returns?))\b"
)
_IMPERATIVE = re.compile(
    r"(?i)^(?:(?:first|then|also|next|finally|now)\b[,]?\s*)*"
    r"(?:add|update|wire|fix|create|remove|delete|run|check|implement|write|move|make|change|rename|replace|"
    r"install|read|look|try|start|continue|modify|refactor|extract|ensure|verify|commit|push|open|edit|set|"
    r"use|call|pass|keep|drop|test|build|clean up|search|find|investigate|review)\b"
)
_MIN_STATEMENT_CHARS = 40
_REASON = re.compile(r"(?i)\b(?:because|since|so that|instead|rather than|decided|in order to|to avoid|due to)\b")
_HARNESS_BLOCK = re.compile(
    r"(?s)<(system-reminder|local-command-[a-z]+|command-(?:name|message|args)|task-notification|"
    r"user-prompt-submit-hook)>.*?(?:</\1>|\Z)"
)
_REQUIREMENT = re.compile(
    r"(?i)\b(?:must|required?|requirements?|never|always|do not|don't|should not|shouldn't|make sure|ensure|"
    r"prefer|avoid|instead of|only)\b"
)


def sentences(text: str, limit: int = ITEM_CHARS) -> Iterator[str]:
    """The sentences of ``text`` outside code fences, list markers and heading marks removed, clipped to
    ``limit`` characters."""
    for raw in _SENTENCE_SPLIT.split(_CODE_FENCE.sub(" ", text)):
        sentence = LIST_MARKER.sub("", raw).strip().strip("#").strip().strip("*").strip()
        if len(sentence) >= 12:
            yield clip(sentence, limit)


def is_narration(sentence: str) -> bool:
    """True for announcements and cheers ("Let me ...", "Now I'll ...", "Perfect!"). A decision announced
    with its reason ("I'll use a default instead because the key is optional.") is a finding."""
    text = sentence.strip()
    if _DECIDING.match(text) and _REASON.search(text):
        return False
    return bool(_NARRATION.match(text))


def findings(text: str) -> list[str]:
    """The sentences of assistant prose that state a conclusion, cause, decision or constraint."""
    return [s for s in sentences(text) if _is_finding(s)]


def _is_finding(sentence: str) -> bool:
    """A statement (not a question, not a lead-in to a list), neither narration nor a bare instruction
    ("Add the migration.") unless it gives its reason, and either long enough to say something or
    worded as a cause, conclusion or constraint ("Clean compile." says less than the test runs do)."""
    if sentence.endswith(("?", ":")) or is_narration(sentence):
        return False
    if _IMPERATIVE.match(sentence) and not has_reason(sentence):
        return False
    return len(sentence) >= _MIN_STATEMENT_CHARS or bool(_FINDING.search(sentence))


def reported_findings(text: str, source: str = ASSISTANT) -> tuple[list[str], list[str]]:
    """(findings, questions) of a message's prose, each attributed to ``source`` and quoted when it could
    pass for a user request or a system instruction, and so is everything from a forged turn, marker or
    section heading on (see :mod:`.provenance`)."""
    prose = _CODE_FENCE.sub(" ", text)
    cut = tainted_from(prose)
    parts = ((prose[:cut], False), (prose[cut:], True))
    found = [report(source, s, ITEM_CHARS, tainted=tainted) for part, tainted in parts for s in findings(part)]
    asked = [report(source, s, ITEM_CHARS, tainted=tainted) for part, tainted in parts for s in questions(part)]
    return found, asked


def questions(text: str) -> list[str]:
    """Questions the assistant asked (a question is open until the user answers; the user's answer stays
    verbatim in the transcript)."""
    return [s for s in sentences(text) if s.endswith("?") and not is_narration(s)]


def users_own(user_text: str) -> str:
    """A user message without what an agent's harness wraps into the user's turn (Claude Code's
    ``<system-reminder>``, a local command's caveat and output, a task notification): not the user's word."""
    return _HARNESS_BLOCK.sub(" ", user_text)


def requirements(user_text: str) -> list[str]:
    """The sentences of a user message, in the user's own words, that state a requirement, constraint or
    preference."""
    return [s for s in sentences(users_own(user_text)) if _REQUIREMENT.search(s)]


def has_reason(sentence: str) -> bool:
    return bool(_REASON.search(sentence))
