"""The prompt size a response reports, read on the side while its bytes pass through untouched.

A streamed response (SSE) is split into events as it arrives; only events that mention ``usage`` are
parsed (OpenAI's final chunk with ``stream_options.include_usage``, Anthropic's ``message_start`` and
``message_delta``, Gemini's chunks with ``usageMetadata``). A JSON response is kept up to
``MAX_JSON_BYTES`` and parsed once it is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_PENDING_EVENT_BYTES = 4 * 1024 * 1024
USAGE = b'"usage'  # "usage" (OpenAI, Anthropic) and "usageMetadata" (Gemini)


class UsageTap:
    def __init__(self, content_type: str, read_usage: Callable[[Any], int | None]) -> None:
        self.streaming = content_type.startswith("text/event-stream")
        self.json = "json" in content_type
        self._read_usage = read_usage
        self._buffer = bytearray()
        self.prompt_tokens: int | None = None

    def feed(self, chunk: bytes) -> None:
        if self.streaming:
            self._buffer += chunk
            self._events()
        elif self.json and len(self._buffer) + len(chunk) <= MAX_JSON_BYTES:
            self._buffer += chunk

    def finish(self) -> int | None:
        """The prompt tokens reported, once the body is complete (None when it reported none)."""
        if self.json and not self.streaming and self._buffer:
            self._take(bytes(self._buffer))
            self._buffer.clear()
        return self.prompt_tokens

    def _events(self) -> None:
        data = self._buffer.replace(b"\r\n", b"\n") if b"\r" in self._buffer else self._buffer
        end = data.rfind(b"\n\n")
        if end < 0:
            if len(self._buffer) > MAX_PENDING_EVENT_BYTES:  # not SSE after all: stop looking
                self._buffer.clear()
            return
        complete, rest = bytes(data[:end]), bytes(data[end + 2 :])
        self._buffer = bytearray(rest)
        if USAGE not in complete:
            return
        for event in complete.split(b"\n\n"):
            if USAGE not in event:
                continue
            payload = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
            self._take(payload)

    def _take(self, payload: bytes) -> None:
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        tokens = self._read_usage(parsed)
        if tokens is not None:
            self.prompt_tokens = max(tokens, self.prompt_tokens or 0)
