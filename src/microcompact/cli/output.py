"""Files the commands write: checked before a long run, written whole or not at all, in the input's form.

An output path (``--out``, ``--plot``) is a file: a path that does not exist yet, or a regular file, which is
replaced whole (a temporary file in the same folder, renamed into place). A symlink is written through: its
target is the file (created when missing), the link stays, and the command says so. Anything else that exists
there (a folder, a device such as /dev/null, a FIFO, a socket) is refused with one line before any work:
renaming over it would replace the device node or the FIFO with a regular file, and opening it would block
or write somewhere that is not a file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..keys import BOOKKEEPING_KEYS, SRC_KEY
from ..messages import Message
from .base import fail, say

KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


class NotAFile(ValueError):
    """An output path where no regular file can be written (the message says what is there)."""


def output_file(path: Path) -> Path:
    """The file that writing ``path`` writes: ``path`` itself, or the target of the symlink(s) at ``path``;
    NotAFile when that exists and is not a regular file, or when its folder does not exist."""
    target = path
    if path.is_symlink():
        try:
            target = Path(os.path.realpath(path, strict=False))
        except (OSError, RuntimeError) as exc:
            raise NotAFile(f"is a symlink that cannot be followed ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise NotAFile(f"cannot be checked: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
        where = f" (the target of the symlink, {target})" if target != path else ""
        raise NotAFile(f"is {kind}{where}, not a regular file; give a file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise NotAFile(f"folder {folder} does not exist")
    return target


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


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to the file ``path`` writes (a symlink's target: the link stays) through a temporary
    file in the same folder, renamed into place only once fully written and synced: a full disk or a crash
    leaves no partial output (and an older file whole). NotAFile (a ValueError) when the path holds no
    regular file."""
    path = output_file(path)
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
