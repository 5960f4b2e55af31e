"""What the proxy needs to know about one provider's API: a small protocol every format implements.

A *client message* is one entry of the request's ``messages`` as the client sent it; *session messages* are
what the library holds (chat-completions shape). ``convert`` turns one into the other (one client message
may become several), and the outgoing request is built back from the client's own messages: what the
session kept whole is forwarded exactly as sent, what it kept in part (or shortened) is ``rebuild``-t from
the original, and markers become ``marker`` messages.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import orjson

from ..messages import META_KEY, Message
from ..wire import Upstream, WireApi
from .errors import BadRequest

# What batch compaction's prune and last resort do to a message they keep (the content is no longer the
# client's): see batch/prune.py.
REWRITE_FLAGS = ("stub", "shortened", "cut")


# Clients resend a message in a different spelling without changing what it says: Claude Code moves its cache
# breakpoint to the newest message on every request, and sends its environment message first as a lone
# text block, later as a plain string. Identity (and so the session) reads the message as meant; forwarding
# keeps the client's spelling of the current request.
CACHE_CONTROL = "cache_control"


def identity_form(message: Any) -> Any:
    """``message`` (a client message) as it is meant: no cache breakpoints on it or its blocks, and a content
    of one plain text block read as that text. The message itself when nothing differs."""
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    marked = isinstance(content, list) and any(isinstance(b, dict) and CACHE_CONTROL in b for b in content)
    lone = isinstance(content, list) and len(content) == 1 and _plain_text(content[0])
    if not marked and not lone and CACHE_CONTROL not in message:
        return message
    clean = {k: v for k, v in message.items() if k != CACHE_CONTROL}
    if lone and isinstance(content, list):
        clean["content"] = content[0]["text"]
    elif marked and isinstance(content, list):
        clean["content"] = [
            {k: v for k, v in b.items() if k != CACHE_CONTROL} if isinstance(b, dict) else b for b in content
        ]
    return clean


def _plain_text(block: Any) -> bool:
    """A text block with nothing on it but (maybe) a breakpoint."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and set(block) <= {"type", "text", CACHE_CONTROL}
    )


def stripped(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed, at any depth (for small values: key material)."""
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k != CACHE_CONTROL}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def rewritten(part: Message) -> bool:
    """True when the engine kept ``part`` in a shortened form (a stub, shortened arguments, a cut)."""
    meta = part.get(META_KEY)
    return isinstance(meta, dict) and any(meta.get(flag) for flag in REWRITE_FLAGS)


def history_array(body: Any, field: str, refusal: str) -> list[Any]:
    """The array a request body holds its history in (``messages``, ``contents``); BadRequest when the body
    is not a JSON object, or ``refusal`` when the field is not an array."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    items = body.get(field)
    if not isinstance(items, list):
        raise BadRequest(refusal)
    return items


def dumps(outgoing: dict[str, Any]) -> bytes:
    """An outgoing body as JSON bytes: orjson for speed; the standard library for what orjson refuses but a
    provider may accept (integers beyond 64 bits, lone surrogates)."""
    try:
        return orjson.dumps(outgoing)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(outgoing, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


class Provider(Protocol):
    """One API's request format (see ``openai_format``, ``anthropic_format`` and ``gemini_format``)."""

    name: Upstream  # whose API: metrics labels, prices, credentials, error shapes (Responses is OpenAI's too)
    wire: WireApi  # which request format: one per compacted route, and the summary wire (upstream_summary)
    # Thinking blocks valid only while their prefix is what the upstream saw, and provider-side compaction
    # blocks (thinking.py): Anthropic Messages'.
    binds_thinking: bool
    # The body's fields every request repeats and no compaction shortens (model_windows.fixed_text).
    fixed_fields: tuple[str, ...]

    def history(self, body: Any) -> list[Message]:
        """The request's messages, checked (raises BadRequest naming the problem)."""
        ...

    def passthrough_reason(self, body: dict[str, Any]) -> str | None:
        """Why this request must go up as it came, uncompacted (its history lives on the provider, its
        items cannot be ordered), or None. The reason is the X-Microcompact-Mode header's."""
        ...

    def body(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        """The outgoing request body: the client's, with ``messages`` (client messages) in place of its history."""
        ...

    def convert(self, message: Message) -> list[Message]:
        """The session messages that stand for one client message."""
        ...

    def part_count(self, message: Message) -> int:
        """How many session messages ``convert`` makes of ``message`` (without converting it)."""
        ...

    def rebuild(self, original: Message, parts: list[Message]) -> Message:
        """``original`` holding only what ``parts`` (some of its session messages, maybe shortened) keep."""
        ...

    def render(self, message: Message) -> Message:
        """A session message that came without a client original (a marker, a raw-forked message)."""
        ...

    def normalize(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        """The outgoing list made acceptable to the API (role alternation, cache breakpoint limits)."""
        ...

    def view_problem(self, messages: list[Message]) -> str | None:
        """Why the API would refuse ``messages`` (a compacted view) on structure, or None: the last check
        before a view goes out, so an engine bug costs compaction, never the client's request."""
        ...

    def key_material(self, body: dict[str, Any]) -> Any:
        """What identifies a conversation without a session header: its system prompt and first user message."""
        ...

    def prompt_tokens(self, response: Any) -> int | None:
        """The prompt size a JSON response (or one parsed SSE event) reports, if it does."""
        ...

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        """The raw (read, written) cache figures a response's ``usage`` carries, ``usage_tap.MISSING`` where
        it has none (read by :class:`~.usage_tap.UsageTap`)."""
        ...

    def with_breakpoints(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        """The outgoing ``messages`` with the cache breakpoints a fold needs (``breakpoints``), where the
        API places them in the request; the list itself where it does not."""
        ...
