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
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

from .keys import DIGEST_KEY as DIGEST_KEY  # identity's keys (defined in keys), where callers import them
from .keys import HID_KEY as HID_KEY
from .keys import IDENTITY_KEYS as IDENTITY_KEYS
from .keys import PARTS_KEY as PARTS_KEY
from .keys import RESERVED_KEYS as RESERVED_KEYS
from .messages import Message, TranscriptError, is_marker


def digest(message: Any) -> str:
    """A digest of what a client message says, whatever its key order (keys starting with ``_`` left out).

    32 hex digits of SHA-256 over canonical JSON: orjson for speed, and SHA-256 because CPUs hash it in
    hardware (a proxy digests the client's whole history on every request: for a 150K-token history, 690
    KB, BLAKE2b took 6.7 ms where SHA-256 takes 1.2 ms on bench/bench_proxy.py's machine). What orjson
    refuses (lone surrogates, huge integers, non-string keys, deep nesting) is hashed by
    :func:`_canonical_walk`, whose bytes never equal orjson's, so no two messages collide.
    """
    if isinstance(message, dict) and any(isinstance(k, str) and k.startswith("_") for k in message):
        message = {k: v for k, v in message.items() if not (isinstance(k, str) and k.startswith("_"))}
    try:
        data = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        data = _canonical_walk(message)
    return hashlib.sha256(data).hexdigest()[:32]


class _Encoded(bytes):
    """Bytes the walk already encoded (a key, a closing bracket), told apart from a bytes value."""


_END_DICT, _END_LIST = _Encoded(b"}"), _Encoded(b"]")


def _canonical_walk(value: Any) -> bytes:
    """An unambiguous encoding of any value (type-tagged, length-prefixed), built without recursion so no
    nesting depth exhausts the stack. Starts with a NUL byte, which orjson output never does."""
    out: list[bytes] = [b"\0"]
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Encoded:
            out.append(item)
        elif isinstance(item, dict):
            items = sorted(item.items(), key=lambda kv: (type(kv[0]).__name__, str(kv[0])))
            stack.append(_END_DICT)
            for k, v in reversed(items):
                stack += [v, _Encoded(_scalar(k))]
            out.append(b"{")
        elif isinstance(item, (list, tuple)):
            stack.append(_END_LIST)
            stack.extend(reversed(item))
            out.append(b"[")
        else:
            out.append(_scalar(item))
    return b"".join(out)


def _scalar(value: Any) -> bytes:
    """A leaf's type tag, length and text (lone surrogates kept distinct: ``surrogatepass``)."""
    if value is None or isinstance(value, (bool, int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        text = f"{type(value).__name__}:{value}"
    encoded = text.encode("utf-8", "surrogatepass")
    return f"{type(value).__name__}{len(encoded)}:".encode() + encoded


# Inside :func:`digest_memo`: each message object digested so far, by id, held so no other object takes its id.
_MEMO: ContextVar[dict[int, tuple[Any, str]] | None] = ContextVar("microcompact_digest_memo", default=None)


@contextmanager
def digest_memo() -> Iterator[None]:
    """Within it (in this thread's context only), :func:`digests` digests each message object once: a proxy
    request digests its whole history for the conversation key and again in the session's sync, the same
    objects both times (at 150K tokens, about 600 messages: several ms of interpreter time each pass). The
    messages must not change while it lasts."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


class Forms(Sequence[Any]):
    """The messages ``form`` makes of ``raw``'s, in ``order`` (default: as they are), each made when first
    read: a continued history's known part, whose digests :class:`PrefixDigests` took from the last
    request, is never read. Once :attr:`known` is set (the digests of these messages, in this order),
    :func:`digests` answers with it."""

    def __init__(self, raw: Sequence[Any], form: Callable[[Any], Any], order: Sequence[int] | None = None) -> None:
        self._raw, self._form = raw, form
        self._order = list(order) if order is not None else None
        self._made: dict[int, Any] = {}
        self.known: list[str] | None = None

    def reordered(self, order: Sequence[int], known: Sequence[str]) -> Forms:
        """These messages in ``order`` (indexes into this sequence), ``known`` their digests in this one's."""
        out = Forms(self, lambda m: m, order)
        out.known = [known[i] for i in order]
        return out

    def __len__(self) -> int:
        return len(self._order) if self._order is not None else len(self._raw)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        made = self._made.get(index)
        if made is None:
            made = self._made[index] = self._form(self._raw[self._order[index] if self._order is not None else index])
        return made


def digests(messages: Iterable[Any]) -> list[str]:
    if isinstance(messages, Forms) and messages.known is not None:
        return list(messages.known)
    memo = _MEMO.get()
    if memo is None:
        return [digest(m) for m in messages]
    out = []
    for m in messages:
        hit = memo.get(id(m))
        if hit is None or hit[0] is not m:
            hit = memo[id(m)] = (m, digest(m))
        out.append(hit[1])
    return out


def _prefix_bytes(messages: Sequence[Any]) -> bytes | None:
    """orjson's bytes of ``messages`` without the enclosing brackets (None where orjson refuses a value):
    equal bytes are equal values, so the messages' digests are equal too (orjson spells NaN and Infinity
    as null, as :func:`digest` does)."""
    try:
        return orjson.dumps(list(messages))[1:-1]
    except (TypeError, orjson.JSONEncodeError):
        return None


class PrefixDigests:
    """Per conversation key, what its last request's history was, to skip digesting it again message by
    message: one SHA-256 over the history's bytes as orjson spells them (about 1 ms for a 150K-token
    history, a third of digesting each message in canonical form), the message count and the digests.

    A new history whose first messages hash as the last one did holds those same messages (a byte changed
    anywhere in them changes the hash), so their digests are the last ones; only the rest is digested.
    Anything else (another length, a changed message, a value orjson refuses) is digested in full, as
    :func:`digests` does. Memory: the digest list (a pointer per message, the strings shared with the
    session's) and a hash state, for the most recent ``max_keys`` keys."""

    def __init__(self, max_keys: int = 4096) -> None:
        self.max_keys = max_keys
        self._last: OrderedDict[str, tuple[int, bytes, list[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def digests(self, key: str, history: Sequence[Any], identity: Sequence[Any]) -> list[str]:
        """The digests of ``identity`` (the identity form of each message of ``history``, in order)."""
        return self.digests_and_size(key, history, identity)[0]

    def digests_and_size(
        self, key: str, history: Sequence[Any], identity: Sequence[Any]
    ) -> tuple[list[str], int | None]:
        """:meth:`digests`, and the size of ``history`` as orjson spells it (None where it refuses a value),
        which it measured anyway."""
        with self._lock:
            last = self._last.get(key)
        data = _prefix_bytes(history)
        if data is None:
            with self._lock:
                self._last.pop(key, None)
            return digests(identity), None
        view, hashed, out = memoryview(data), hashlib.sha256(), None
        if last is not None and 0 < last[0] <= len(history):
            n, known_hash, known = last
            rest = _prefix_bytes(history[n:]) if n < len(history) else b""
            cut = len(data) - len(rest) - 1 if rest else len(data)  # data: the first n, a comma, the rest
            hashed.update(view[:cut])
            if hashed.digest() == known_hash:
                out = known[:n] + digests(identity[n:])
            view = view[cut:]
        hashed.update(view)
        if out is None:
            out = digests(identity)
        with self._lock:
            self._last[key] = (len(history), hashed.digest(), out)
            self._last.move_to_end(key)
            while len(self._last) > self.max_keys:
                self._last.popitem(last=False)
        return out, len(data) + 2  # and its brackets


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


def client_message(message: Any, hid: int) -> Message:
    """A client's message as the library may trust it: every key starting with ``_`` dropped, so a client
    can plant no marker, identity or store bookkeeping (the digest leaves them out too). Raises
    TranscriptError for a non-object."""
    if not isinstance(message, dict):
        raise TranscriptError(f"client message {hid}: expected a JSON object, got {type(message).__name__}")
    if not any(isinstance(k, str) and k.startswith("_") for k in message):
        return message
    return {k: v for k, v in message.items() if not (isinstance(k, str) and k.startswith("_"))}


def tagged(message: Message, hid: int, hd: str, parts: int = 1) -> Message:
    """A copy of ``message`` (what a trusted ``convert`` made of :func:`client_message`) carrying its
    identity: its client index, the client message's digest and, when that client message became
    ``parts`` > 1 session messages, their number (so a fork can tell a message only partly absorbed).
    ``convert`` may add metadata of its own (an adapter's ``_items``); the reserved keys are never taken
    from it."""
    if not isinstance(message, dict):
        raise TranscriptError(f"client message {hid}: expected a JSON object, got {type(message).__name__}")
    own = {k: v for k, v in message.items() if k not in RESERVED_KEYS}
    return {**own, HID_KEY: hid, DIGEST_KEY: hd, **({PARTS_KEY: parts} if parts > 1 else {})}


def tagged_parts(client: Message, hid: int, hd: str, convert: Callable[[Message], list[Message]]) -> list[Message]:
    """The session messages client message ``hid`` becomes, each tagged (raises TranscriptError when
    ``convert`` makes none: a client message the session cannot hold would be asked for again forever)."""
    parts = convert(client_message(client, hid))
    if not parts:
        raise TranscriptError(f"client message {hid}: it converts to no message (role {client.get('role')!r})")
    return [tagged(m, hid, hd, len(parts)) for m in parts]


def hid_of(message: Message) -> int | None:
    hid = message.get(HID_KEY)
    return hid if isinstance(hid, int) and not isinstance(hid, bool) else None


def is_human(message: Message) -> bool:
    """A message a person (or the harness on their behalf) wrote: a user message, not a tool result."""
    return message.get("role") == "user"


def known_digests(stored: Iterable[Message], prefix: Sequence[str] = ()) -> list[str] | None:
    """The client digests a session holds, in client order, from every row it ever stored (absorbed ones
    included); None when they do not form one unbroken history (rows written without identity, or a gap),
    so the caller forks instead of guessing. ``prefix``: the digests of the client messages a fork started
    from in compacted form (it holds no rows for the ones its parent had absorbed)."""
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
    for i, hd in enumerate(prefix):
        if by_hid.setdefault(i, hd) != hd:
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


def fork_prefix(
    transcript: Sequence[Message], known: int, at: int, parts: Mapping[int, int] | None = None
) -> list[Message] | None:
    """The compacted form of client messages ``[0, at)`` from a session's ``transcript``, to start a fork with.

    Possible when no summary in the transcript covers a client message at or past ``at``: then the markers and
    every kept (or shortened) message before ``at`` are exactly a compaction of that prefix. None otherwise
    (the fork starts from the client's raw messages and compacts again), or when the transcript holds
    messages that came without identity. ``parts`` (client index -> how many session messages it became)
    also catches a client message only partly absorbed (its tool results summarized, its text kept);
    without it, one present part counts as the whole message.
    """
    present: Counter[int] = Counter()
    for m in transcript:
        hid = hid_of(m)
        if hid is not None:
            present[hid] += 1
        elif not is_marker(m):
            return None
    expected = dict(parts or {})
    for m in transcript:  # each message tells how many parts its client message had
        hid, count = hid_of(m), m.get(PARTS_KEY)
        if hid is not None and isinstance(count, int) and count > expected.get(hid, 1):
            expected[hid] = count
    if any(present[i] < expected.get(i, 1) for i in range(at, known)):
        return None
    return [dict(m) for m in transcript if is_marker(m) or (hid_of(m) or 0) < at]
