"""The prompt size a response reports, and what the provider's cache did, read on the side while its bytes
pass through untouched.

A streamed response (SSE) is split into events as it arrives; only events that mention ``usage`` are
parsed (OpenAI's final chunk with ``stream_options.include_usage``, Anthropic's ``message_start`` and
``message_delta``, Gemini's chunks with ``usageMetadata``). A JSON response is kept up to
``MAX_JSON_BYTES`` and parsed once it is complete.

The cache figures: Anthropic's ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` (in the
message's ``usage``, or a stream's ``message_start`` / ``message_delta``; the largest value seen counts),
OpenAI's ``prompt_tokens_details.cached_tokens`` (the Responses API's ``input_tokens_details.cached_tokens``, a
stream's in its final ``response``), Gemini's ``usageMetadata.cachedContentTokenCount``
(its JSON leaves a zero out: with a prompt count and no cached count, it read nothing). A figure that is
not a count, or larger than the prompt, is ignored with one log line
(:func:`microcompact.bill.cache_usage.checked_report`).

A stream's final event (:data:`STOP_TYPES`, OpenAI's ``[DONE]``, Gemini's chunk with a ``finishReason`` and
its ``usageMetadata``) sets :attr:`UsageTap.stopped`: its usage is all in, and the proxy bills it before
passing that event on, so a client that sends its next request the moment it reads it finds it in that
request's totals.

Why the response stopped (Anthropic's ``stop_reason``, OpenAI's ``finish_reason``, Gemini's
``finishReason``; the Responses API's completed response, by whether its output calls a function) says
whether the client's turn is over (a final answer: an idle gap may follow) or goes on (a tool call). Gemini
says ``STOP`` after a ``functionCall`` too, so there a call seen in any chunk of the answer means the turn
goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import orjson

from ..bill.cache_usage import UsageReport, checked_report
from ..wire import Upstream

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_PENDING_EVENT_BYTES = 4 * 1024 * 1024
USAGE = b'"usage'  # "usage" (OpenAI, Anthropic) and "usageMetadata" (Gemini)
FINISH = b'"finish_reason'  # OpenAI's stream may say why it stopped in a chunk without usage
# Gemini's chunks: why it stopped, and a call (either may come in a chunk without usageMetadata).
GEMINI_FINISH, GEMINI_CALL = b'"finishReason', b'"functionCall'
# The event that ends a stream (after it nothing is reported): Anthropic's message_stop, OpenAI Chat's
# [DONE], the Responses API's final response event (Gemini: a chunk with finishReason and usageMetadata).
STOP_TYPES = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed"})
DONE = b"[DONE]"
STOPS = (b'"message_stop"', DONE, b'"response.completed"', b'"response.incomplete"', b'"response.failed"')
WATCHED = (USAGE, FINISH, GEMINI_FINISH, GEMINI_CALL, *STOPS)
# Why a response stopped, by API: the reasons that end the client's turn, and those that continue it.
TURN_OVER = {"end_turn", "stop", "stop_sequence"}
TURN_GOES_ON = {"tool_use", "tool_calls", "function_call", "pause_turn"}
GEMINI_TURN_OVER = "STOP"
# Output items of a Responses API answer that the client runs and answers: its turn goes on.
RESPONSES_CALLS = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "computer_call", "mcp_approval_request"}
)


# Where each API reports its cache figures: (read field, write field) in ``usage``; OpenAI's read is nested.
ANTHROPIC_CACHE_FIELDS = ("cache_read_input_tokens", "cache_creation_input_tokens")
OPENAI_DETAILS = "prompt_tokens_details"
RESPONSES_DETAILS = "input_tokens_details"
OPENAI_CACHED = "cached_tokens"
GEMINI_USAGE, GEMINI_PROMPT, GEMINI_CACHED = "usageMetadata", "promptTokenCount", "cachedContentTokenCount"
MISSING = object()  # a figure the usage does not carry


def usage_of(parsed: Any) -> dict[str, Any] | None:
    """The ``usage`` object of a response or of one stream event (Anthropic's ``message_start`` nests it
    in ``message``, the Responses API's final events in ``response``; Gemini's is ``usageMetadata``, the last
    chunk's in a streamed JSON array)."""
    if isinstance(parsed, list):
        found = [u for u in map(usage_of, parsed) if u is not None]
        return found[-1] if found else None
    if not isinstance(parsed, dict):
        return None
    inner = next((parsed[k] for k in ("message", "response") if isinstance(parsed.get(k), dict)), parsed)
    usage = inner.get("usage", parsed.get(GEMINI_USAGE))
    return usage if isinstance(usage, dict) else None


def anthropic_cache_fields(usage: dict[str, Any]) -> tuple[Any, Any]:
    """The raw (read, written) cache figures of an Anthropic ``usage``, ``MISSING`` where it has none."""
    return usage.get(ANTHROPIC_CACHE_FIELDS[0], MISSING), usage.get(ANTHROPIC_CACHE_FIELDS[1], MISSING)


def _cached_read(usage: dict[str, Any], details_field: str) -> tuple[Any, Any]:
    """OpenAI's read figure, ``cached_tokens`` nested under ``details_field``; OpenAI reports no write."""
    details = usage.get(details_field)
    return (details.get(OPENAI_CACHED, MISSING) if isinstance(details, dict) else MISSING), MISSING


def openai_cache_fields(usage: dict[str, Any]) -> tuple[Any, Any]:
    """Chat Completions' read figure (``prompt_tokens_details``)."""
    return _cached_read(usage, OPENAI_DETAILS)


def responses_cache_fields(usage: dict[str, Any]) -> tuple[Any, Any]:
    """The Responses API's read figure (``input_tokens_details``)."""
    return _cached_read(usage, RESPONSES_DETAILS)


def gemini_cache_fields(usage: dict[str, Any]) -> tuple[Any, Any]:
    """Gemini's read figure (a zero left out when the prompt count is there); it reports no write."""
    return usage.get(GEMINI_CACHED, 0 if GEMINI_PROMPT in usage else MISSING), MISSING


def _larger(kept: Any, new: Any) -> Any:
    """Of two raw figures, the one to keep: a count beats a missing field, the larger count wins (a stream's
    ``message_delta`` may repeat ``message_start``'s figures, or carry cumulative ones); anything else that
    is present is kept so the check names it."""
    if new is MISSING:
        return kept
    if kept is MISSING:
        return new
    both = all(isinstance(v, int) and not isinstance(v, bool) for v in (kept, new))
    return max(kept, new) if both else (kept if not isinstance(new, int) else new)


class UsageReader(Protocol):
    """What the tap reads a response with: the provider's own readers (``provider.Provider`` is one)."""

    @property
    def name(self) -> Upstream: ...

    def prompt_tokens(self, response: Any) -> int | None: ...

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]: ...


class UsageTap:
    def __init__(self, content_type: str, provider: UsageReader) -> None:
        self.streaming = content_type.startswith("text/event-stream")
        self.json = "json" in content_type
        self._read_usage = provider.prompt_tokens
        self._cache_fields = provider.cache_fields
        self._api = provider.name
        self._buffer = bytearray()
        self.prompt_tokens: int | None = None
        self._cache_read: Any = MISSING
        self._cache_write: Any = MISSING
        self.turn_over: bool | None = None  # None: the response did not say why it stopped
        self.stopped = False  # a stream's final event was read: its usage is all in
        self._called = False  # a Gemini functionCall was seen: its STOP does not end the turn

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

    def report(self, at: float = 0.0) -> UsageReport | None:
        """What the response reported (call after :meth:`finish`): the prompt size and the cache figures,
        checked; None without a usable prompt size."""
        read = None if self._cache_read is MISSING else self._cache_read
        written = None if self._cache_write is MISSING else self._cache_write
        report = checked_report(self.prompt_tokens, read, written, at=at, where=f"{self._api} response")
        return dataclasses.replace(report, turn_over=self.turn_over) if report is not None else None

    def _events(self) -> None:
        data = self._buffer.replace(b"\r\n", b"\n") if b"\r" in self._buffer else self._buffer
        end = data.rfind(b"\n\n")
        if end < 0:
            if len(self._buffer) > MAX_PENDING_EVENT_BYTES:  # not SSE after all: stop looking
                self._buffer.clear()
            return
        complete, rest = bytes(data[:end]), bytes(data[end + 2 :])
        self._buffer = bytearray(rest)
        if not any(mark in complete for mark in WATCHED):
            return
        for event in complete.split(b"\n\n"):
            if not any(mark in event for mark in WATCHED):
                continue
            payload = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
            self._take(payload)

    def _take(self, payload: bytes) -> None:
        if payload.strip() == DONE:
            self.stopped = self.streaming
            return
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        self._stopped(parsed)
        tokens = self._read_usage(parsed)
        if tokens is not None:
            self.prompt_tokens = max(tokens, self.prompt_tokens or 0)
        usage = usage_of(parsed)
        if usage is not None:
            read, written = self._cache_fields(usage)
            self._cache_read = _larger(self._cache_read, read)
            self._cache_write = _larger(self._cache_write, written)

    def _stopped(self, parsed: Any) -> None:
        """Note why the response stopped, where it says (a JSON body, one stream event, or Gemini's JSON
        array of chunks)."""
        if isinstance(parsed, list):
            for item in parsed:
                self._stopped(item)
            return
        if not isinstance(parsed, dict):
            return
        if parsed.get("type") in STOP_TYPES:
            self.stopped = self.streaming
        candidates = parsed.get("candidates")
        if isinstance(candidates, list):
            self._gemini_stopped(candidates)
            finished = any(isinstance(c, dict) and c.get("finishReason") for c in candidates)
            if finished and GEMINI_USAGE in parsed:  # the last chunk, and its usage with it
                self.stopped = self.streaming
        reasons = [parsed.get("stop_reason")]
        delta, message = parsed.get("delta"), parsed.get("message")
        reasons += [d.get("stop_reason") for d in (delta, message) if isinstance(d, dict)]
        choices = parsed.get("choices")
        if isinstance(choices, list):
            reasons += [c.get("finish_reason") for c in choices if isinstance(c, dict)]
        reasons.append(_responses_reason(parsed))
        for reason in reasons:
            if reason in TURN_OVER:
                self.turn_over = True
            elif reason in TURN_GOES_ON:
                self.turn_over = False

    def _gemini_stopped(self, candidates: list[Any]) -> None:
        for candidate in candidates:
            if not isinstance(candidate, dict):
                continue
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            if isinstance(parts, list) and any(isinstance(p, dict) and "functionCall" in p for p in parts):
                self._called = True
                self.turn_over = False
            if candidate.get("finishReason") == GEMINI_TURN_OVER and not self._called:
                self.turn_over = True


def _responses_reason(parsed: dict[str, Any]) -> str | None:
    """Why a Responses API answer stopped, in Chat's words: ``tool_calls`` when its completed response calls
    a function (the client runs it and comes back), ``stop`` when it answered; None for anything else (an
    event before the end, an incomplete or failed response, another API's body)."""
    inner = parsed.get("response") if parsed.get("type") == "response.completed" else parsed
    if not isinstance(inner, dict) or inner.get("object") != "response" or inner.get("status") != "completed":
        return None
    output = inner.get("output")
    items = output if isinstance(output, list) else []
    called = any(isinstance(i, dict) and i.get("type") in RESPONSES_CALLS for i in items)
    return "tool_calls" if called else "stop"
