"""Files the commands write: checked before a long run, written whole or not at all, in the input's form."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..keys import BOOKKEEPING_KEYS, SRC_KEY
from ..messages import Message
from .base import fail


def check_writable_target(flag: str, path: Path) -> None:
    """Fail before a long replay when ``path`` cannot be an output file (missing folder, a folder itself)."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        fail(f"{flag} {path}: folder {folder} does not exist")
    if path.is_dir():
        fail(f"{flag} {path}: is a folder, give a file name")


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path`` through a temporary file in the same folder, renamed into place only
    once fully written and synced: a full disk or a crash leaves no partial output (and an older file whole)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
