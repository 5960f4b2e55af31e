"""What the scripted upstream keeps of every request: headers, body, and the exact bytes it answered."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .replies import Answer


@dataclass
class RecordedRequest:
    """One request as the upstream saw it, and what it answered."""

    number: int  # 1-based, in arrival order
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    raw: bytes
    body: Any  # parsed JSON, or None when the body is not JSON
    api: str  # "anthropic", "openai" or "other"
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response: bytearray = field(default_factory=bytearray)  # every byte of the body sent
    completed: bool = False  # the whole body was sent (False after a cut stream, a hang, or while sending)
    usage: dict[str, Any] | None = None  # the usage object the upstream reported, when it answered a reply
    refused_tokens: int | None = None  # the prompt size when the upstream refused it as too long
    client_disconnected: bool = False  # the client closed the connection before the body was complete

    @property
    def response_text(self) -> str:
        """The response body as the client reads it (gunzipped when it was sent compressed)."""
        raw = bytes(self.response)
        if self.response_headers.get("content-encoding") == "gzip":
            raw = zlib.decompressobj(wbits=31).decompress(raw)  # as much as arrived, when the body was cut
        return raw.decode(errors="replace")

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def messages(self) -> list[Any]:
        return list(self.body.get("messages") or []) if isinstance(self.body, dict) else []


# What a script is: the answer to a request, computed from it.
Script = Callable[[RecordedRequest], Answer]
