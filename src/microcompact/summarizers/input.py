"""What a summarizer reads: redacted copies of an exchange, bounded to a token budget, rendered as text."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..messages import Message
from ..redact import redact_message
from ..render import exchange_text as render_exchange
from .base import CountText

OMISSION_NOTE = "[... {count:,} characters omitted by microcompact ...]"
_MIN_PIECE_TOKENS = 32  # a cut piece keeps at least a line or so of head and tail


@dataclass
class _Piece:
    """One content string or tool-call argument string of a prepared message, writable in place."""

    text: str  # the redacted original, before any cut
    write: Callable[[str], None]


def prepare_exchange(messages: Iterable[Message], max_tokens: int, count_text: CountText) -> list[Message]:
    """Redacted copies of ``messages`` whose rendering is at most about ``max_tokens`` tokens.

    What a summarizer reads must be bounded whatever the agent produced: the largest pieces (a content
    string, a text part or a tool call's arguments) are cut head-and-tail, with an explicit omission note,
    down to a common cap chosen so everything fits; smaller pieces stay whole. Cut arguments are no
    longer valid JSON, which is fine because only summarizers read them. The input is never touched.
    The bound can be exceeded only when an exchange has so many messages that even their labels and
    minimal heads and tails do not fit.
    """
    prepared = [redact_message(m) for m in messages]
    rendered_tokens = count_text(render_exchange(prepared))
    if rendered_tokens <= max_tokens:
        return prepared
    pieces = list(_pieces(prepared))
    counts = [count_text(p.text) for p in pieces]
    budget = max_tokens - max(0, rendered_tokens - sum(counts))  # labels and separators are fixed costs
    for _ in range(3):  # omission notes and token boundaries cost a little extra: re-cut tighter if needed
        cap = max(_MIN_PIECE_TOKENS, _water_level(counts, budget))
        for piece, tokens in zip(pieces, counts, strict=False):
            piece.write(_cut_middle(piece.text, cap, tokens, count_text) if tokens > cap else piece.text)
        excess = count_text(render_exchange(prepared)) - max_tokens
        if excess <= 0 or cap == _MIN_PIECE_TOKENS:
            break
        budget -= excess
    return prepared


def _pieces(messages: list[Message]) -> Iterator[_Piece]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and content:
            yield _Piece(content, _setter(message, "content"))
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield _Piece(part["text"], _setter(part, "text"))
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                yield _Piece(function["arguments"], _setter(function, "arguments"))


def _setter(target: dict[str, Any], key: str) -> Callable[[str], None]:
    def write(value: str) -> None:
        target[key] = value

    return write


def _water_level(counts: list[int], budget: int) -> int:
    """The largest cap C with sum(min(count, C)) <= budget (cutting only what is above C)."""
    remaining = max(0, budget)
    ordered = sorted(counts)
    for i, tokens in enumerate(ordered):
        left = len(ordered) - i
        if tokens * left > remaining:
            return remaining // left
        remaining -= tokens
    return ordered[-1] if ordered else 0


def _cut_middle(text: str, keep_tokens: int, tokens: int, count_text: CountText) -> str:
    """Head and tail of ``text`` (about ``keep_tokens`` tokens in all) around an omission note."""
    keep_chars = int(len(text) * keep_tokens / max(tokens, 1))
    note_tokens = count_text(OMISSION_NOTE.format(count=len(text)))
    while True:
        head = keep_chars // 2
        tail = keep_chars - head
        note = OMISSION_NOTE.format(count=len(text) - keep_chars)
        out = f"{text[:head]}\n{note}\n{text[len(text) - tail :]}"
        if keep_chars == 0 or count_text(out) <= keep_tokens + note_tokens:
            return out
        keep_chars = int(keep_chars * 0.85)
