"""Message identity: how a session given a client's *full* history knows which messages it already holds.

Proxies and framework hooks see the caller's whole, uncompacted list on every call. Each message the
session takes from such a list carries its place in that list (``_hid``) and a digest of what it says
(``_hd``), both kept by the store like any other metadata. Matching a new list against the stored digests,
in order, tells what is new (a suffix to append), and where the caller's history stopped being ours (it
ran its own compaction, edited a message, retried with other content): then a new session is forked from
the common prefix, so a view never mixes two histories.

Pure functions over message lists; :meth:`microcompact.session.Session.sync_history` ties them to a session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .messages import Message, is_marker

HID_KEY = "_hid"  # the message's index in the client's full history
DIGEST_KEY = "_hd"  # the digest of that client message (several session messages may share one)
IDENTITY_KEYS = (HID_KEY, DIGEST_KEY)


def digest(message: Any) -> str:
    """A digest of what a client message says, whatever its key order (keys starting with ``_`` left out).

    32 hex digits of SHA-256 over canonical JSON: orjson for speed, the standard library for what orjson
    refuses (lone surrogates, huge integers). SHA-256 because CPUs hash it in hardware: a proxy digests the
    client's whole history on every request, and on a 150K-token history (690 KB) BLAKE2b took 6.7 ms where
    SHA-256 takes 1.2 ms (bench/bench_proxy.py's machine).
    """
    if isinstance(message, dict) and any(isinstance(k, str) and k.startswith("_") for k in message):
        message = {k: v for k, v in message.items() if not (isinstance(k, str) and k.startswith("_"))}
    try:
        data = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(message, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
        data = text.encode("utf-8", "replace")
    return hashlib.sha256(data).hexdigest()[:32]


def digests(messages: Iterable[Any]) -> list[str]:
    return [digest(m) for m in messages]


def common_prefix(known: Sequence[str], incoming: Sequence[str]) -> int:
    """How many leading digests the two lists share."""
    n = min(len(known), len(incoming))
    for i in range(n):
        if known[i] != incoming[i]:
            return i
    return n


def identity_of(message: Message) -> dict[str, Any]:
    """The identity keys a message carries (for copies made by compaction: a shortened tool output is still
    the same client message)."""
    return {k: message[k] for k in IDENTITY_KEYS if k in message}


def tagged(message: Message, hid: int, hd: str) -> Message:
    """A copy of ``message`` carrying its identity."""
    return {**message, HID_KEY: hid, DIGEST_KEY: hd}


def hid_of(message: Message) -> int | None:
    hid = message.get(HID_KEY)
    return hid if isinstance(hid, int) and not isinstance(hid, bool) else None


def is_human(message: Message) -> bool:
    """A message a person (or the harness on their behalf) wrote: a user message, not a tool result."""
    return message.get("role") == "user"


def known_digests(stored: Iterable[Message]) -> list[str] | None:
    """The client digests a session holds, in client order, from every row it ever stored (absorbed ones
    included); None when they do not form one unbroken history (rows written without identity, or a gap),
    so the caller forks instead of guessing."""
    by_hid: dict[int, str] = {}
    for m in stored:
        hid = hid_of(m)
        if hid is None:
            if is_marker(m):
                continue
            return None
        hd = m.get(DIGEST_KEY)
        if not isinstance(hd, str) or by_hid.setdefault(hid, hd) != hd:
            return None
    if sorted(by_hid) != list(range(len(by_hid))):
        return None
    return [by_hid[i] for i in range(len(by_hid))]


@dataclass(frozen=True)
class Divergence:
    """Where a client's history stops matching the session's: the first differing client message."""

    at: int
    known: int  # client messages the session holds
    incoming: int  # client messages in the new history

    def describe(self) -> str:
        if self.at == self.incoming:
            return f"the client sent {self.incoming} message(s), fewer than the {self.known} the session holds"
        return f"client message {self.at} differs from the one the session holds"


def fork_prefix(transcript: Sequence[Message], known: int, at: int) -> list[Message] | None:
    """The compacted form of client messages ``[0, at)`` from a session's ``transcript``, to start a fork with.

    Possible when no summary in the transcript covers a client message at or past ``at``: then the markers and
    every kept (or shortened) message before ``at`` are exactly a compaction of that prefix. None otherwise
    (the fork starts from the client's raw messages and compacts again), or when the transcript holds
    messages that came without identity.
    """
    present: set[int] = set()
    for m in transcript:
        hid = hid_of(m)
        if hid is not None:
            present.add(hid)
        elif not is_marker(m):
            return None
    absorbed_at_or_past = any(i not in present for i in range(at, known))
    if absorbed_at_or_past:
        return None
    return [dict(m) for m in transcript if is_marker(m) or (hid_of(m) or 0) < at]
