"""How ``recall`` reads a query and ranks the originals it finds: exact identifiers first, then words.

A query is split into *identifiers* (a "quoted phrase", or a token holding ``_ . / : - @ #`` or a digit, or
written in camelCase: ``pane_exists``, ``src/app.py``, ``ActiveSessionRegistry``, ``4021``), matched with their
case, and *words* (3+ letters, not a filler word), matched without it. An original scores 100 per identifier
it holds whole (20 when only inside a longer name: ``unique_1`` in ``unique_11``) and 10 per word, plus a little
per repeat; ties go to the newer original. Ranking reads the
*redacted* text only, so a match inside a redacted secret neither ranks nor shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TERMS = 12
IDENTIFIER_POINTS = 100
PART_POINTS = 20  # an identifier found only inside a longer name
WORD_POINTS = 10
MIN_TERM_CHARS = 3
EXCERPT_BEFORE = 90
EXCERPT_AFTER = 170
_PHRASE = re.compile(r'"([^"]{3,200})"')
_TOKEN = re.compile(r"[\w./:\-@#]+")
_IDENTIFIER_MARK = re.compile(r"[_./:\-@#0-9]|[a-z][A-Z]")
_EDGE = ".,:;-#@/"
_FILLERS = frozenset(
    "the and for with that this from what where which when was were are has have had not but all any can "
    "into its our out you your file files show find value values".split()
)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Query:
    identifiers: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def terms(self) -> tuple[str, ...]:
        return self.identifiers + self.words


def parse_query(query: str) -> Query:
    """The identifiers and words of ``query``, at most :data:`MAX_TERMS` in all, identifiers first."""
    identifiers: list[str] = [p.strip() for p in _PHRASE.findall(query) if p.strip()]
    words: list[str] = []
    for raw in _TOKEN.findall(_PHRASE.sub(" ", query)):
        token = raw.strip(_EDGE)
        if len(token) < MIN_TERM_CHARS:
            continue
        if _IDENTIFIER_MARK.search(token):
            identifiers.append(token)
        elif token.lower() not in _FILLERS:
            words.append(token.lower())
    identifiers = list(dict.fromkeys(identifiers))[:MAX_TERMS]
    words = list(dict.fromkeys(words))[: MAX_TERMS - len(identifiers)]
    return Query(tuple(identifiers), tuple(words))


def score(text: str, query: Query) -> tuple[int, int]:
    """(score, where the best match starts) of ``text``; score 0 when nothing matches."""
    total, where = 0, -1
    for term in query.identifiers:
        whole = [m.start() for m in _whole(term).finditer(text)]
        if whole:
            total += IDENTIFIER_POINTS + min(len(whole), 5) - 1
            where = whole[0] if where < 0 else where
        elif term in text:  # inside a longer name (``unique_1`` in ``unique_11``): a weaker match
            total += PART_POINTS
            where = text.find(term) if where < 0 else where
    lowered = text.lower() if query.words else ""
    for word in query.words:
        count = lowered.count(word)
        if count:
            total += WORD_POINTS + min(count, 5) - 1
            where = lowered.find(word) if where < 0 else where
    return total, where


def _whole(term: str) -> re.Pattern[str]:
    """``term`` not inside a longer name: no word character right before or after it."""
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)")


def excerpt(text: str, at: int) -> str:
    """A one-line passage of ``text`` around ``at``, with an ellipsis where it was cut."""
    start = max(0, at - EXCERPT_BEFORE)
    end = min(len(text), max(at, 0) + EXCERPT_AFTER)
    passage = _SPACES.sub(" ", text[start:end]).strip()
    return ("…" if start > 0 else "") + passage + ("…" if end < len(text) else "")
