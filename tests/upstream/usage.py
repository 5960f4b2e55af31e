"""Deterministic usage figures for the scripted upstream, and a simulated Anthropic prompt cache.

Prompt tokens are a pure function of the request, so a test can compute exactly what the upstream will
report: each *unit* of the request (a tool schema, a system block, a message's content block, or a whole
message when its content is a string) costs ``ceil(utf8 bytes of its compact sorted JSON / 4)`` tokens, and
every request adds a fixed ``overhead`` on top, like the hidden framing real providers count. A proxy that
calibrates an additive overhead therefore has a known right answer.

The cache follows Anthropic's rules closely enough to test breakpoint handling: the prefix up to each
``cache_control`` breakpoint (tools, then system, then messages) is written when new and read when an
earlier request wrote the same prefix; the ``cache_control`` markers themselves are not part of the key.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from .replies import RedactedThinking, Reply, Text, Thinking, ToolCall

DEFAULT_OVERHEAD = 300


def _compact(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def unit_tokens(unit: Any) -> int:
    return (len(_compact(unit)) + 3) // 4


def request_units(body: dict[str, Any]) -> list[Any]:
    """The request in Anthropic's cache order, one unit per tool, system block and content block."""
    units: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        units.extend(system)
    elif system:
        units.append({"type": "text", "text": system})
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            units.extend({"role": message.get("role"), **block} for block in content if isinstance(block, dict))
        else:
            units.append(message)
    return units


def prompt_tokens(body: dict[str, Any], overhead: int = DEFAULT_OVERHEAD) -> int:
    """What the upstream reports as the request's prompt size (input + cache read + cache write)."""
    return sum(unit_tokens(u) for u in request_units(body)) + overhead


def output_tokens(reply: Reply) -> int:
    chars = 0
    for block in reply.blocks:
        if isinstance(block, Text):
            chars += len(block.text)
        elif isinstance(block, Thinking):
            chars += len(block.thinking)
        elif isinstance(block, RedactedThinking):
            chars += len(block.data)
        elif isinstance(block, ToolCall):
            chars += len(_compact(block.input)) + len(block.name)
    return max(1, (chars + 3) // 4)


def _without_cache_control(unit: Any) -> Any:
    if isinstance(unit, dict) and "cache_control" in unit:
        return {k: v for k, v in unit.items() if k != "cache_control"}
    return unit


@dataclass(frozen=True)
class PromptUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class PromptCache:
    """Remembers the prefixes written at breakpoints; thread-safe, one per upstream."""

    def __init__(self) -> None:
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any], overhead: int = DEFAULT_OVERHEAD) -> PromptUsage:
        units = request_units(body)
        digest = hashlib.sha256()
        running = 0
        breakpoints: list[tuple[str, int]] = []  # (prefix digest, prefix tokens)
        for unit in units:
            running += unit_tokens(unit)
            digest.update(_compact(_without_cache_control(unit)))
            if isinstance(unit, dict) and unit.get("cache_control"):
                breakpoints.append((digest.copy().hexdigest(), running))
        total = running + overhead
        with self._lock:
            read = max((tokens for key, tokens in breakpoints if key in self._written), default=0)
            last_tokens = breakpoints[-1][1] if breakpoints else 0
            written = last_tokens - read if breakpoints and breakpoints[-1][0] not in self._written else 0
            self._written.update(key for key, _ in breakpoints)
        return PromptUsage(total - read - written, written, read)
