"""Files the commands write: checked before a long run, written whole or not at all, in the input's form.

An output path (``--out``, ``--plot``) is a file: a path that does not exist yet, or a regular file, which is
replaced whole (a temporary file in the same folder, renamed into place). A symlink is written through: its
target is the file (created when missing), the link stays, and the command says so. Anything else that exists
there (a folder, a device such as /dev/null, a FIFO, a socket) is refused with one line before any work:
renaming over it would replace the device node or the FIFO with a regular file, and opening it would block
or write somewhere that is not a file. The writing itself is :mod:`microcompact.outfile` (``write_jsonl``
of the importers uses it too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..keys import BOOKKEEPING_KEYS, SRC_KEY
from ..messages import Message
from ..outfile import NotAFile, output_file, replacing, write_atomically
from ..store import sqlite_path
from .base import fail, say


def check_writable_target(flag: str, path: Path) -> Path:
    """The file ``path`` writes (see :func:`output_file`), checked before a long run: anything else is a
    one-line error; a symlink is written through, and said so on stderr."""
    try:
        target = output_file(path)
    except NotAFile as exc:
        fail(f"{flag} {path}: {exc}")
    if target != path:
        say(f"{flag} {path} is a symlink: writing through it to {target}")
    return target


def sqlite_files(db: str | None) -> list[str]:
    """The files a SQLite ``--db`` lives in (the database, its WAL, shared-memory and journal files); none for
    PostgreSQL, an in-memory store or no ``--db``."""
    path = sqlite_path(db) if db is not None else None
    if path is None or path == ":memory:":
        return []
    return [path, *(path + suffix for suffix in ("-wal", "-shm", "-journal"))]


def check_apart(flag: str, path: Path, others: Iterable[tuple[str, str | Path | None]]) -> None:
    """Fail when the file ``path`` writes is also one the command reads or writes for something else
    (``--out`` on the ``--db`` store replaced the store with JSONL and exited 0): ``others`` are (what it is,
    its path or None)."""
    target = os.path.realpath(path)
    for what, other in others:
        if other is None:
            continue
        same = os.path.realpath(other) == target
        if not same and os.path.exists(other) and os.path.exists(target):
            same = os.path.samefile(other, target)  # a hard link
        if same:
            fail(f"{flag} {path}: is also {what}; writing it would replace that: give another file")


def export_form(message: Message) -> Message:
    """``message`` without the store's bookkeeping keys: what an exported transcript holds."""
    return {k: v for k, v in message.items() if k not in BOOKKEEPING_KEYS}


def as_read(message: Message, originals: list[Message]) -> Message:
    """``message`` for --out: the input message itself (its keys in the input's order, nested too) when it
    is input message ``_src`` unchanged; the store may hand it back with its keys in another order, and a
    resumed run must write what an uninterrupted one writes."""
    clean = export_form(message)
    src = message.get(SRC_KEY)
    if isinstance(src, int) and 0 <= src < len(originals) and clean == originals[src]:
        return originals[src]
    return clean


__all__ = [
    "NotAFile",
    "as_read",
    "check_apart",
    "check_writable_target",
    "export_form",
    "output_file",
    "replacing",
    "sqlite_files",
    "write_atomically",
]
