"""Files the library and its commands write (``--out``, ``--plot``, ``write_jsonl`` to a path): a file and
nothing else, written whole or not at all.

A path that does not exist yet, or a regular file, is written through a temporary file in the same folder,
renamed into place once complete (a full disk or a crash leaves the old file whole and no partial one). A
symlink is written through: its target is the file (created when missing) and the link stays. Anything else
that exists there (a folder, a device such as /dev/null, a FIFO, a socket) is :class:`NotAFile`: renaming
over it would replace the device node or the FIFO with a regular file, and opening it would block or write
somewhere that is not a file. The commands' side (checking before a long run, saying which file a symlink
writes) is :mod:`microcompact.cli.output`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

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


@contextlib.contextmanager
def replacing(path: Path, suffix: str | None = None) -> Iterator[Path]:
    """A temporary path, in the folder of the file ``path`` writes (see :func:`output_file`), ending in
    ``suffix`` (default ``path``'s own, so a writer that reads the format from it, such as matplotlib, still
    does), for the block to write; renamed over that file when the block ends normally, removed when it
    raises. NotAFile (a ValueError) when the path holds no regular file."""
    path = output_file(path)
    ending = path.suffix if suffix is None else suffix
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=ending, dir=path.parent)
    with contextlib.suppress(OSError):  # a file replaced keeps its permissions (a new one is private: 0600)
        os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` (UTF-8) to the file ``path`` writes (a symlink's target: the link stays), whole or not
    at all (see :func:`replacing`). NotAFile (a ValueError) when the path holds no regular file."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)


__all__ = ["KINDS", "NotAFile", "output_file", "replacing", "write_atomically"]
