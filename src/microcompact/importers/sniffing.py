"""Cheap format detection for ``import --from auto``: the key paths at the start of a file.

Recorded sessions run to megabytes and the tell-tale keys sit at their start (a Claude Code log's first
line, the first record of an ADP array, the first step of an SWE-agent trajectory), so detection reads
only :data:`HEAD_BYTES` and never parses the whole file. :func:`key_paths` walks the first JSON value of
that head, as far as it goes, and lists the object keys it meets as dotted paths: ``history``,
``trajectory[].action`` (a key of an element of the ``trajectory`` list), ``[].messages`` (a key of an
element of a top-level array). A truncated head still yields the keys before the cut. (aider's Markdown
history is the one format told apart by its text, not its keys.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..messages import TranscriptError

# Enough to hold the first line of a Claude Code log or the first keys of a record, small enough to be free.
HEAD_BYTES = 64 * 1024

# Keys deeper than this are never needed to tell the formats apart.
MAX_DEPTH = 3

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)


@dataclass
class _Container:
    """An open ``{`` or ``[`` while scanning: its own path, and for objects the key being read."""

    kind: str
    path: str
    key_next: bool = True
    child: str = ""


def read_head(path: Path, size: int = HEAD_BYTES) -> str:
    """The first ``size`` bytes of ``path`` as text (bytes that do not decode are replaced)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(size)
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror or exc}") from None
    return data.decode("utf-8", errors="replace")


def _join(prefix: str, key: str) -> str:
    """The path of ``key`` inside the object at ``prefix``."""
    return f"{prefix}.{key}" if prefix else key


def _child_path(stack: list[_Container]) -> str:
    """The path of a value opened now: the pending key of an object, or an element of an array."""
    if not stack:
        return ""
    top = stack[-1]
    return top.child if top.kind == "{" else top.path + "[]"


@lru_cache(maxsize=4)  # every registered sniffer asks about the same head
def key_paths(head: str) -> frozenset[str]:
    """Dotted key paths of the first JSON value in ``head`` (empty when it is not an object or array)."""
    text = head.lstrip("\ufeff \t\r\n")
    if not text or text[0] not in "{[":
        return frozenset()
    paths: set[str] = set()
    stack: list[_Container] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            match = _STRING.match(text, i)
            if match is None:  # the head ends inside this string
                break
            top = stack[-1] if stack else None
            if top is not None and top.kind == "{" and top.key_next:
                top.child, top.key_next = _join(top.path, match.group(1)), False
                if len(stack) <= MAX_DEPTH:
                    paths.add(top.child)
            i = match.end()
            continue
        if c in "{[":
            stack.append(_Container(c, _child_path(stack)))
        elif c in "}]":
            stack.pop()
            if not stack:  # the first value is complete (the rest of a JSONL file is other lines)
                break
        elif c == "," and stack[-1].kind == "{":
            stack[-1].key_next = True
        i += 1
    return frozenset(paths)
