"""A bounded memo of what a pure function makes of long texts, keyed by the text itself.

The same long texts come back again and again: a client re-sends its whole history with every request, a
fold renders for its summarizer the messages the ledger already counted, a splice copies the messages it
keeps, a resumed session reads its transcript anew. Token counts and identifiers depend on the text alone,
so each is computed once while the text is recent. The key is the text itself, never a digest: only an
equal text hits, so the answer is always the one a fresh computation gives. The memo holds at most
``max_chars`` characters of keys and forgets the least recently used text first.

Thread-safe (sessions are shared across a server's threads): the lock guards the table only; the function
runs outside it, so two threads reading one new text may both compute it, and both get the same answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# A text up to this many characters is short: its callers keep a cache of their own (an ``lru_cache`` of
# many small texts: a ledger's values, lesson lines); a longer one goes to a :class:`TextMemo`.
SHORT_TEXT_CHARS = 200
# What one memo holds of the most recent long texts, in characters of keys (~4 MB, one history or two).
MEMO_CHARS = 4_000_000


class TextMemo(Generic[T]):
    """``fn(text)``, remembered for the most recently used texts up to ``max_chars`` characters in all."""

    def __init__(self, fn: Callable[[str], T], max_chars: int) -> None:
        self._fn = fn
        self._max_chars = max_chars
        self._chars = 0
        self._table: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, text: str) -> T:
        with self._lock:
            if text in self._table:
                self._table.move_to_end(text)
                return self._table[text]
        value = self._fn(text)
        if len(text) > self._max_chars:
            return value
        with self._lock:
            if text not in self._table:
                self._table[text] = value
                self._chars += len(text)
                while self._chars > self._max_chars:
                    old, _ = self._table.popitem(last=False)
                    self._chars -= len(old)
        return value

    def __len__(self) -> int:
        return len(self._table)

    @property
    def chars(self) -> int:
        """The characters of the texts held now (at most ``max_chars``)."""
        return self._chars
