"""Deterministic usage figures for the scripted upstream, and a simulated Anthropic prompt cache.

Prompt tokens are a pure function of the request, so a test can compute exactly what the upstream will
report. Each *unit* of the request costs ``ceil(utf8 bytes of its compact sorted JSON / 4)`` tokens: a
tool schema, a system block, a message's content block (string content counts as one text block), or a
whole OpenAI message with tool calls. Every request adds a fixed ``overhead`` on top, like the hidden
framing real providers count, so a proxy that calibrates an additive overhead has a known right answer.

The cache follows Anthropic's rules closely enough to test breakpoint handling: the prefix up to each
``cache_control`` breakpoint (tools, then system, then messages) is written when new, and read when an
earlier request wrote the same prefix at that block or one of the 20 before it. The ``cache_control``
markers themselves are not part of the key.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .replies import RedactedThinking, Reply, Text, Thinking, ToolCall

DEFAULT_OVERHEAD = 300


def _compact(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _without_cache_control(unit: Any) -> Any:
    if isinstance(unit, dict) and "cache_control" in unit:
        return {k: v for k, v in unit.items() if k != "cache_control"}
    return unit


def unit_tokens(unit: Any) -> int:
    """Tokens of one unit; its cache_control marker is not content and costs nothing."""
    return (len(_compact(_without_cache_control(unit))) + 3) // 4


def _message_units(message: Any) -> list[Any]:
    """A message's content blocks, each with the role, the first also with the message's other fields.

    String content counts as one text block, as the API reads it; an OpenAI message that carries tool calls
    or answers one is a single unit.
    """
    if not isinstance(message, dict) or "tool_calls" in message or "tool_call_id" in message:
        return [message]
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return [message]
    extras = {k: v for k, v in message.items() if k != "content"}
    blocks = [b for b in content if isinstance(b, dict)]
    return [{**(extras if i == 0 else {"role": message.get("role")}), **b} for i, b in enumerate(blocks)]


def request_units(body: dict[str, Any]) -> list[Any]:
    """The request in Anthropic's cache order, one unit per tool, system block and content block."""
    units: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        units.extend(system)
    elif system:
        units.append({"type": "text", "text": system})
    for message in body.get("messages") or []:
        units.extend(_message_units(message))
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


@dataclass(frozen=True)
class PromptUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class PromptCache:
    """Remembers the prefixes written at breakpoints; thread-safe, one per upstream.

    As the API documents, a breakpoint also finds entries written at any of the ``LOOKBACK`` blocks before
    it, so a client that moves its breakpoint to the newest message (as Claude Code does) still reads the
    prefix the previous request wrote. With ``ttl_seconds`` an entry expires that long after it was last
    written or read (each hit refreshes it, as the 5-minute cache does); with ``min_tokens`` a prefix shorter
    than that is never cached (the API's minimum cacheable length, 1,024 tokens on many models).
    """

    LOOKBACK = 20

    def __init__(
        self, ttl_seconds: float | None = None, min_tokens: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._written: dict[str, float] = {}  # prefix digest -> when it was last written or read
        self._lock = threading.Lock()
        self.ttl_seconds = ttl_seconds
        self.min_tokens = min_tokens
        self.clock = clock

    def _alive(self, key: str, now: float) -> bool:
        at = self._written.get(key)
        return at is not None and (self.ttl_seconds is None or now - at <= self.ttl_seconds)

    def usage(self, body: dict[str, Any], overhead: int = DEFAULT_OVERHEAD) -> PromptUsage:
        digest = hashlib.sha256()
        running = 0
        prefixes: list[tuple[str, int]] = []  # per unit: (digest of the prefix ending there, its tokens)
        breakpoints: list[int] = []  # unit indexes carrying cache_control
        for index, unit in enumerate(request_units(body)):
            running += unit_tokens(unit)
            digest.update(_compact(_without_cache_control(unit)) + b"\0")
            prefixes.append((digest.copy().hexdigest(), running))
            if isinstance(unit, dict) and unit.get("cache_control"):
                breakpoints.append(index)
        cacheable = [b for b in breakpoints if prefixes[b][1] >= self.min_tokens]
        with self._lock:
            now = self.clock()
            candidates = {p for b in cacheable for p in range(max(0, b - self.LOOKBACK), b + 1)}
            hits = [p for p in candidates if self._alive(prefixes[p][0], now)]
            hit = max(hits, key=lambda p: prefixes[p][1], default=None)
            read = prefixes[hit][1] if hit is not None else 0
            last = prefixes[cacheable[-1]] if cacheable else None
            written = last[1] - read if last is not None and not self._alive(last[0], now) else 0
            if hit is not None:
                self._written[prefixes[hit][0]] = now
            self._written.update((prefixes[b][0], now) for b in cacheable)
        return PromptUsage(running + overhead - read - written, written, read)


class PrefixCache:
    """OpenAI's automatic prompt caching: a request reads the longest prefix an earlier request (within the
    TTL) shared with it, counted in 128-token steps from 1,024 tokens on; nothing is marked and nothing is
    billed as a write (``usage.prompt_tokens_details.cached_tokens``). Thread-safe, one per upstream."""

    STEP = 128

    def __init__(
        self, ttl_seconds: float | None = None, min_tokens: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seen: dict[str, float] = {}  # prefix digest (at each unit) -> when a request last had it
        self._lock = threading.Lock()
        self.ttl_seconds = ttl_seconds
        self.min_tokens = min_tokens
        self.clock = clock

    def cached_tokens(self, body: dict[str, Any], overhead: int = DEFAULT_OVERHEAD) -> int:
        digest = hashlib.sha256()
        running = 0
        prefixes: list[tuple[str, int]] = []
        for unit in request_units(body):
            running += unit_tokens(unit)
            digest.update(_compact(unit) + b"\0")
            prefixes.append((digest.copy().hexdigest(), running))
        with self._lock:
            now = self.clock()
            read = 0
            for key, tokens in reversed(prefixes):
                at = self._seen.get(key)
                if at is not None and (self.ttl_seconds is None or now - at <= self.ttl_seconds):
                    read = tokens
                    break
            self._seen.update((key, now) for key, _ in prefixes)
        if read < self.min_tokens:
            return 0
        return read - read % self.STEP
