"""What the proxy needs to know about one provider's API: a small protocol both formats implement.

A *client message* is one entry of the request's ``messages`` as the client sent it; *session messages* are
what the library holds (chat-completions shape). ``convert`` turns one into the other (one client message
may become several), and the outgoing request is built back from the client's own messages: what the
session kept whole is forwarded exactly as sent, what it kept in part (or shortened) is ``rebuild``-t from
the original, and markers become ``marker`` messages.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..messages import META_KEY, Message

# What batch compaction's prune and last resort do to a message they keep (the content is no longer the
# client's): see batch/prune.py.
REWRITE_FLAGS = ("stub", "shortened", "cut")


def rewritten(part: Message) -> bool:
    """True when the engine kept ``part`` in a shortened form (a stub, shortened arguments, a cut)."""
    meta = part.get(META_KEY)
    return isinstance(meta, dict) and any(meta.get(flag) for flag in REWRITE_FLAGS)


class Provider(Protocol):
    """One API's request format (see ``openai_format`` and ``anthropic_format``)."""

    name: str  # "openai" or "anthropic": metrics labels, error shapes

    def history(self, body: Any) -> list[Message]:
        """The request's messages, checked (raises BadRequest naming the problem)."""
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

    def key_material(self, body: dict[str, Any]) -> Any:
        """What identifies a conversation without a session header: its system prompt and first user message."""
        ...

    def prompt_tokens(self, response: Any) -> int | None:
        """The prompt size a JSON response (or one parsed SSE event) reports, if it does."""
        ...
