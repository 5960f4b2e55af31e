"""What a script tells the scripted upstream to answer: an assistant reply, or a fault.

A reply is provider-neutral (text, thinking, tool calls); ``anthropic_wire`` and ``openai_wire`` render it
in each provider's exact JSON and SSE formats, so one script serves both APIs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    """Extended thinking; Anthropic streams it as thinking_delta then one signature_delta."""

    thinking: str
    signature: str


@dataclass(frozen=True)
class RedactedThinking:
    data: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call; ``id`` defaults to a deterministic one derived from the request number and block index."""

    name: str
    input: dict[str, Any]
    id: str | None = None


Block = Text | Thinking | RedactedThinking | ToolCall


@dataclass(frozen=True)
class Reply:
    """One assistant message. ``stop_reason`` defaults to tool_use when a tool is called, else end_turn."""

    blocks: tuple[Block, ...]
    stop_reason: str | None = None
    model: str | None = None  # None: echo the request's model
    # Split text, thinking and tool input into pieces of this many characters when streaming.
    chunk_chars: int = 16

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolCall) for b in self.blocks) else "end_turn"


def text(content: str, **options: Any) -> Reply:
    return Reply((Text(content),), **options)


def tool_call(name: str, tool_input: dict[str, Any], *, before: str = "", **options: Any) -> Reply:
    """A reply calling one tool, optionally with some text first (as models often do)."""
    blocks: tuple[Block, ...] = (Text(before),) if before else ()
    return Reply((*blocks, ToolCall(name, tool_input)), **options)


@dataclass(frozen=True)
class Fault:
    """An answer that is not a reply.

    - ``status`` set: that HTTP status with the provider's error body (``error_type``, ``message``), plus
      ``retry-after`` when ``retry_after`` is set.
    - ``garbage`` set: status 200 whose body is these bytes (not JSON, not SSE).
    - ``cut_after_events`` set: a streamed reply (``reply``) whose connection is closed after that many SSE
      events, without the terminating chunk, so the client sees the stream break. On a non-streaming
      request the connection is closed after the headers and half the body.
    - ``hang`` seconds: wait that long before answering anything (the client's timeout should fire).
    """

    status: int | None = None
    error_type: str | None = None
    message: str = "scripted fault"
    retry_after: float | None = None
    garbage: bytes | None = None
    cut_after_events: int | None = None
    reply: Reply | None = None
    hang: float | None = None
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, *, retry_after: float | None = None, message: str = "scripted fault") -> Fault:
    return Fault(status=status, retry_after=retry_after, message=message)


def garbage(body: bytes = b'{"id": "msg_broken", "content": [') -> Fault:
    return Fault(garbage=body)


def disconnect(after_events: int = 3, reply: Reply | None = None) -> Fault:
    return Fault(cut_after_events=after_events, reply=reply)


def hang(seconds: float) -> Fault:
    return Fault(hang=seconds)


Answer = Reply | Fault
