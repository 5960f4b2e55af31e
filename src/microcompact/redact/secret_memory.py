"""Secrets, once seen, stay hidden: a session's memory of the values redaction removed.

:mod:`microcompact.redact` finds a secret by its context (``AWS_SECRET_ACCESS_KEY=...``, a URL's
``user:PASSWORD@``); the same value written later without that context (``uses key wJalr... for the
service``) would reach the summarizer. A :class:`SecretMemory` remembers every value redaction removed in a
session and hides its later bare mentions too, in every text redacted while the memory is active.

It never holds a value: only a keyed digest of it (BLAKE2b keyed with a per-install key, a MAC: the digests
say nothing about the values without the key), and its *shape*, the length and the symbols it uses, which
is what finds candidates to digest. Text is scanned for maximal runs of letters, digits and a remembered
value's symbols whose length is one a value of those symbols had; each run's digest is compared, so the
cost is a scan per distinct symbol set and a digest per run of a remembered length.

Only values that cannot be ordinary text are remembered: at least :data:`MIN_LENGTH` characters without
whitespace, mixing letters with digits (or three kinds of characters), with a few distinct characters. A
word, a number or a dotted name redacted under a password key (``password: Swordfish``) is not, so the
memory never hides ordinary words; a git SHA or a UUID is hidden only once it was seen as a secret.

The key lives in ``$MICROCOMPACT_HOME/secret-memory.key`` (mode 0600, created on first need); a session
without a store uses a key of its own process. The memory is stored in the session's meta as JSON
(:meth:`SecretMemory.export`): digests per key id (another install's digests are kept but cannot match
here), and the shapes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

KEY_FILE = "secret-memory.key"
MIN_LENGTH = 8
MAX_LENGTH = 512
_PERSON = b"microcompact-sm1"  # BLAKE2b personalisation: these digests are of nothing else
_STRIP = ".,:;!?"  # sentence punctuation a run may end with although the value does not
_FORMAT = 1
_PROCESS_KEY = secrets.token_bytes(32)  # sessions without a store: one key per process, so a fork can adopt


def worth_remembering(value: str) -> bool:
    """A value long and mixed enough that it cannot be an ordinary word, number or name."""
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH or not value.isascii() or "[REDACTED]" in value:
        return False
    if any(c.isspace() or c == "\\" for c in value) or len(set(value)) < 5:
        return False
    lower = any(c.islower() for c in value)
    upper = any(c.isupper() for c in value)
    digit = any(c.isdigit() for c in value)
    symbol = any(not c.isalnum() for c in value)
    kinds = lower + upper + digit + symbol
    return ((lower or upper) and digit) or kinds >= 3


def _symbols(value: str) -> str:
    return "".join(sorted({c for c in value if not c.isalnum()}))


def install_key(home: Path) -> bytes:
    """The per-install key (32 random bytes, hex in ``home/secret-memory.key``, owner-only), created once."""
    path = home / KEY_FILE
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it meanwhile: use theirs
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key.hex() + "\n")
    return key


class _Scanner:
    """Maximal runs of letters, digits and one symbol set, at least as long as its shortest value (JSON's
    ``\\/`` counts as ``/``). The pattern starts with a character class and has no lookaround, so ``re``
    scans in C; a run found is maximal because the scan goes left to right and each run is taken whole."""

    def __init__(self, symbols: str, lengths: frozenset[int]) -> None:
        self.lengths = lengths
        self.symbols = symbols  # a mention holds every one (an escaped slash holds a slash too)
        self.slash = "/" in symbols
        cls = "A-Za-z0-9" + "".join(re.escape(c) for c in symbols)
        unit = rf"(?:[{cls}]|\\/)" if self.slash else f"[{cls}]"
        self.pattern = re.compile(f"{unit}{{{min(lengths)},}}")

    def candidates(self, text: str, start: int, token: str) -> Iterator[tuple[str, int, int]]:
        """The values ``token`` (found at ``start``) may be, with how much to cut from its start and end:
        itself; without the letter of an escaped line break before it (``\\nVALUE``); without up to two
        trailing punctuation marks (``VALUE.``)."""
        value = token.replace("\\/", "/") if self.slash else token
        head = 1 if start > 0 and text[start - 1] == "\\" and value[:1] in "ntr" else 0
        for lead in {0, head}:
            body, cut = value[lead:], 0
            yield body, lead, 0
            while cut < 2 and body and body[-1] in _STRIP:
                body, cut = body[:-1], cut + 1
                yield body, lead, cut


class SecretMemory:
    """The keyed digests and shapes of the values redacted in one session (see the module docstring).

    Thread-safe: the session's thread and its background pass may both redact while it is active.
    """

    def __init__(self, home: Path | None = None) -> None:
        self._home = home  # None: a key of this process only (a session without a store)
        self._key: bytes | None = None
        self._digests: set[str] = set()
        self._shapes: dict[str, set[int]] = {}
        self._others: dict[str, list[str]] = {}  # digests another install's key made, kept as read
        self._scanners: tuple[_Scanner, ...] = ()
        self._lock = threading.Lock()
        self.version = 0  # bumped at every change: the store writer saves when it moved

    def __bool__(self) -> bool:
        return bool(self._digests)

    def _keyed(self) -> bytes:
        if self._key is None:
            self._key = install_key(self._home) if self._home is not None else _PROCESS_KEY
        return self._key

    def _key_id(self) -> str:
        return hashlib.blake2b(self._keyed(), digest_size=8, person=b"microcompact-kid").hexdigest()

    def _digest(self, value: str) -> str:
        return hashlib.blake2b(value.encode(), key=self._keyed(), digest_size=16, person=_PERSON).hexdigest()

    def remember(self, values: Iterable[str]) -> None:
        """Remember the values worth it (see :func:`worth_remembering`); the others are forgotten."""
        for value in values:
            if not worth_remembering(value):
                continue
            digest = self._digest(value)
            with self._lock:
                if digest in self._digests:
                    continue
                self._digests.add(digest)
                self._shapes.setdefault(_symbols(value), set()).add(len(value))
                self._rebuild()

    def _rebuild(self) -> None:
        self._scanners = tuple(_Scanner(s, frozenset(n)) for s, n in sorted(self._shapes.items()))
        self.version += 1

    def hide(self, text: str, replacement: str) -> str:
        """``text`` with every remembered value that stands alone in it replaced by ``replacement``."""
        scanners = self._scanners
        if not scanners or not text:
            return text
        spans: list[tuple[int, int]] = []
        for scanner in scanners:
            if scanner.symbols and not all(c in text for c in scanner.symbols):
                continue  # a mention holds every symbol of its value
            lengths = scanner.lengths
            for m in scanner.pattern.finditer(text):
                for value, lead, cut in scanner.candidates(text, m.start(), m.group()):
                    if len(value) in lengths and self._digest(value) in self._digests:
                        spans.append((m.start() + lead, m.end() - cut))
                        break
        return _replace(text, spans, replacement) if spans else text

    # ------------------------------------------------------------------ stored in the session's meta

    def export(self) -> dict[str, Any]:
        """JSON values for the session's meta: digests by key id and the shapes, never a value."""
        with self._lock:
            by_key = dict(self._others)
            if self._digests:
                by_key[self._key_id()] = sorted(self._digests)
            shapes = [[s, n] for s, lengths in sorted(self._shapes.items()) for n in sorted(lengths)]
        return {"v": _FORMAT, "digests": by_key, "shapes": shapes}

    def restore(self, data: Any, *, stored: bool = True) -> bool:
        """Take back what :meth:`export` wrote (``stored``: read from this session's store, so nothing new to
        write; else another session's, e.g. a fork's parent); False when ``data`` is no memory."""
        if not isinstance(data, dict) or data.get("v") != _FORMAT:
            return False
        by_key, shapes = data.get("digests"), data.get("shapes")
        if not isinstance(by_key, dict) or not isinstance(shapes, list):
            return False
        with self._lock:
            for symbols, length in (s for s in shapes if isinstance(s, list) and len(s) == 2):
                if isinstance(symbols, str) and isinstance(length, int) and MIN_LENGTH <= length <= MAX_LENGTH:
                    self._shapes.setdefault(symbols, set()).add(length)
            if by_key:  # the key is needed only when there are digests to match
                mine = self._key_id()
                for key_id, digests in by_key.items():
                    if isinstance(digests, list):
                        kept = [d for d in digests if isinstance(d, str)]
                        if key_id == mine:
                            self._digests.update(kept)
                        else:
                            self._others[str(key_id)] = kept
            self._rebuild()
            if stored:
                self.version = 0  # what was read is what the store holds
        return True


def _replace(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    """Replace the spans (merged where they overlap) by ``replacement``."""
    out: list[str] = []
    pos = 0
    end = -1
    for start, stop in sorted(spans):
        if start < end:  # overlaps the span just written: extend it
            if stop > end:
                pos = end = stop
            continue
        out += [text[pos:start], replacement]
        pos = end = stop
    out.append(text[pos:])
    return "".join(out)


# ------------------------------------------------------------------ the memory of the running session

_ACTIVE: ContextVar[SecretMemory | None] = ContextVar("microcompact_secret_memory", default=None)


def active_memory() -> SecretMemory | None:
    """The memory redaction consults now: the session whose hook is running (this thread or its context)."""
    return _ACTIVE.get()


@contextmanager
def remembering(memory: SecretMemory | None) -> Iterator[None]:
    """Redaction inside the block remembers into ``memory`` and hides what it remembers."""
    token = _ACTIVE.set(memory)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


class _Remembers(Protocol):
    secrets: SecretMemory


_S = TypeVar("_S", bound=_Remembers)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def hides_secrets(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A session method during which redaction uses the session's memory (``self.secrets``)."""

    def run(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with remembering(self.secrets):
            return method(self, *args, **kwargs)

    return functools.update_wrapper(run, method)  # type: ignore[return-value]  # _Wrapped is the callable
