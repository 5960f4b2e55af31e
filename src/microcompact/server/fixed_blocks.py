"""Messages a client re-sends at the same place every turn, re-placed after the history that grew before them.

aider sends its file-context pair ("I am not sharing any files..." / "Ok.") between the history and the
current message, and some models' reminder as a last ``system`` message: on the next turn the history
has grown *before* them, so the list no longer starts with the previous one and every turn would fork a
new session. Such a *fixed block* is recognised against the conversation's previous request: a run of
the messages that followed the common prefix there, found unchanged further on now, because new messages
were inserted before it. The session then sees one *canonical* order, every block held where it first
stood (its *anchor*), so each request continues the last; the view puts each block back where the client
put it this time. Anything else that stops matching (an edited, dropped or new message in its place) is
still a real divergence and forks.

Pure functions over digest lists.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..identity import common_prefix
from ..messages import Message

log = logging.getLogger("microcompact")

# Bounds that keep recognition linear: a block is short, and what followed the common prefix is a turn.
MAX_BLOCK = 8
MAX_TAIL = 64
MAX_BLOCKS = 4


@dataclass(frozen=True)
class Block:
    """A run of client messages (by digest) held at ``anchor`` in the canonical order."""

    digests: tuple[str, ...]
    anchor: int


def _last_run(items: Sequence[str], run: Sequence[str], start: int) -> int | None:
    """The last index ``>= start`` where ``run`` occurs contiguously in ``items``."""
    t = len(run)
    for q in range(len(items) - t, start - 1, -1):
        if items[q] == run[0] and list(items[q : q + t]) == list(run):
            return q
    return None


def _moved(order: list[int], q: int, t: int, anchor: int) -> list[int]:
    """``order`` with its run ``[q, q+t)`` moved to ``anchor`` (< q)."""
    return order[:anchor] + order[q : q + t] + order[anchor:q] + order[q + t :]


def canonical_order(digests: Sequence[str], blocks: Sequence[Block]) -> list[int]:
    """Client indexes in canonical order: each block found at or after its anchor moved back to it."""
    order = list(range(len(digests)))
    for block in blocks:
        current = [digests[i] for i in order]
        q = _last_run(current, block.digests, block.anchor + 1)
        if q is not None and block.anchor <= len(order):
            order = _moved(order, q, len(block.digests), block.anchor)
    return order


def recognise(previous: Sequence[str], current: Sequence[str]) -> list[Block] | None:
    """The fixed blocks that make ``previous`` (the last request, canonical) a prefix of ``current``
    (this one, canonical under the blocks known so far), or None when no re-placement explains the
    difference (a real divergence) or there is none to explain."""
    if common_prefix(previous, current) == len(previous) or len(previous) - common_prefix(previous, current) > MAX_TAIL:
        return None
    found: list[Block] = []
    cur = list(current)
    while len(found) < MAX_BLOCKS:
        m = common_prefix(previous, cur)
        if m == len(previous):
            return found
        block = _first_block(previous, cur, m)
        if block is None:
            return None
        q, t = block
        cur = cur[:m] + cur[q : q + t] + cur[m:q] + cur[q + t :]
        found.append(Block(tuple(previous[m : m + t]), m))
    return None


def _first_block(previous: Sequence[str], current: Sequence[str], m: int) -> tuple[int, int] | None:
    """(where it is now, its length) of the longest run starting at ``previous[m]`` found later in
    ``current`` (moved: new messages came before it)."""
    for t in range(min(MAX_BLOCK, len(previous) - m), 0, -1):
        q = _last_run(current, previous[m : m + t], m + 1)
        if q is not None:
            return q, t
    return None


def client_order(runs: Sequence[tuple[int | None, Message]], order: Sequence[int]) -> list[Message]:
    """The outgoing messages, spelled in canonical order (``runs``: each with its canonical index, None for
    a marker), put back in the client's order: the messages the canonical order moved go before the first
    message that came after them in the client's list (markers stay where the view has them)."""
    moved = {h for h, i in enumerate(order) if i != h}
    if not moved:
        return [m for _, m in runs]
    rest: list[tuple[int | None, Message]] = []
    placed: list[tuple[int, Message]] = []
    for h, message in runs:
        if h is not None and h in moved and h < len(order):
            placed.append((order[h], message))
        else:
            rest.append((order[h] if h is not None and h < len(order) else None, message))
    for index, message in sorted(placed, key=lambda p: p[0]):
        at = next((k for k, (i, _) in enumerate(rest) if i is not None and i > index), len(rest))
        rest.insert(at, (index, message))
    return [m for _, m in rest]


class FixedBlocks:
    """Per conversation key: the canonical digests of its last request and the blocks recognised so far
    (in memory, the most recent ``max_keys`` keys; after a restart a re-placed block forks once).

    A client that keys its conversation on its opening messages (the proxy's default key: the system
    prompt and the first user message) changes key when a re-placed block held its first user message
    (aider's first request opens with the file-context pair): a key never seen before whose history
    continues, by re-placement, the last request that opened with the same message is that conversation,
    and keeps its key."""

    def __init__(self, max_keys: int = 4096) -> None:
        self.max_keys = max_keys
        self._last: OrderedDict[str, tuple[list[str], list[Block]]] = OrderedDict()
        self._alias: OrderedDict[str, str] = OrderedDict()  # a key -> the conversation it continues
        self._opened: OrderedDict[str, str] = OrderedDict()  # owner and first message -> the last key it opened
        self._lock = threading.Lock()

    def resolve(self, key: str, digests: Sequence[str], owner: str = "") -> tuple[str, list[int]]:
        """The conversation key to route under and this request's canonical order (new blocks recognised
        against the conversation's last request). ``owner`` (the credential's fingerprint): a key only
        continues a conversation another key of the same owner opened."""
        opened = f"{owner}\0{digests[0]}" if digests else ""
        with self._lock:
            key = self._alias.get(key, key)
            state = self._last.get(key)
            if state is None and digests:
                other = self._opened.get(opened)
                if other is not None and other != key and other in self._last:
                    candidate = self._last[other]
                    if recognise(candidate[0], [digests[i] for i in canonical_order(digests, candidate[1])]):
                        self._remember(self._alias, key, other)
                        key, state = other, candidate
        previous, blocks = state or ([], [])
        order = canonical_order(digests, blocks)
        new = recognise(previous, [digests[i] for i in order]) if previous else None
        if new:
            blocks = [*blocks, *new]
            order = canonical_order(digests, blocks)
            moved = sum(len(b.digests) for b in new)
            log.info(
                "Conversation %s: %d message(s) re-sent at a new place are held where they first stood", key, moved
            )
        with self._lock:
            self._remember(self._last, key, ([digests[i] for i in order], blocks))
            if digests:
                self._remember(self._opened, opened, key)
        return key, order

    def _remember(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        """Set ``table[key]``, the most recent; the oldest dropped beyond ``max_keys`` (under the lock)."""
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.max_keys:
            table.popitem(last=False)
