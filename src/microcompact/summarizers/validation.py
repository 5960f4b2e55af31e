"""Checks on what a summarizer returns, and a deterministic fallback when its output cannot be trusted.

:func:`completion_summary` takes the usable text out of a model's chat completion, :func:`clean_summary`
is the last gate before an engine accepts a summary, and :func:`shorten_summary` shortens a summary
without a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..redact import redact_text
from .base import CountText, Rejection, SummarizerBadOutput, SummaryRejected
from .sections import Section, clip, parse_sections, render_sections

SHORTENED_NOTE = "[... summary shortened by microcompact ...]"
_CLIPPED_ITEM_CHARS = 100


def shorten_summary(summary: str, target_tokens: int, count_text: CountText) -> str:
    """A deterministic shortening of ``summary`` to at most ``target_tokens`` tokens.

    Used when a model's condensed output cannot be trusted. Keeps section headings; drops the oldest
    bullets first (from the section with the most bullets, down to one per section), then clips long
    bullets, then hard-truncates with a note. Over target, the result is always strictly shorter than the
    input, so repeated calls converge.
    """
    if count_text(summary) <= target_tokens:
        return summary
    sections = parse_sections(summary)
    candidate = _drop_oldest(sections, target_tokens, count_text)
    if count_text(candidate) > target_tokens:
        for section in sections:
            section.items = [clip(item, _CLIPPED_ITEM_CHARS) for item in section.items]
        candidate = render_sections(sections)
    if len(candidate) < len(summary) and count_text(candidate) <= target_tokens:
        return candidate
    return _truncate(
        candidate if len(candidate) < len(summary) else summary, target_tokens, count_text, shorter_than=len(summary)
    )


def _drop_oldest(sections: list[Section], target_tokens: int, count_text: CountText) -> str:
    """Pop oldest bullets until the rendering fits or every section has one bullet left; the rendering."""
    total = count_text(render_sections(sections))
    while True:
        largest = max(sections, key=lambda s: len(s.items), default=None)
        if total <= target_tokens or largest is None or len(largest.items) <= 1:
            return render_sections(sections)
        total -= count_text(f"- {largest.items.pop(0)}\n")
        if total <= target_tokens:  # the per-bullet estimate says it fits: check for real
            total = count_text(render_sections(sections))


def _truncate(text: str, target_tokens: int, count_text: CountText, *, shorter_than: int) -> str:
    """The longest prefix of ``text`` that fits with the note; without the note if that is too long."""

    def with_note(prefix: str) -> str:
        cut = prefix.rstrip()
        last = cut.rsplit("\n", 1)[-1]
        if last.count("“") > last.count("”"):  # a quotation cut short is closed: it never runs on
            cut += "…”"
        return f"{cut}\n{SHORTENED_NOTE}".lstrip("\n")

    noted = with_note(text[: _longest_prefix(text, lambda p: count_text(with_note(p)) <= target_tokens)])
    if len(noted) < shorter_than and count_text(noted) <= target_tokens:
        return noted
    return text[: _longest_prefix(text, lambda p: count_text(p) <= target_tokens)]


def _longest_prefix(text: str, fits: Callable[[str], bool]) -> int:
    """Length of the longest proper prefix of ``text`` that ``fits`` (binary search; 0 if none)."""
    low, high = 0, len(text) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(text[:mid]):
            low = mid
        else:
            high = mid - 1
    return low


def clean_summary(text: Any, limit_tokens: int, count_text: CountText) -> str:
    """Summarizer output as the engines accept it: text, redacted, stripped, non-empty, and no longer than
    ``limit_tokens`` (a summary longer than what it summarizes is a runaway, not a summary)."""
    if not isinstance(text, str):
        raise SummarizerBadOutput(f"summarizer returned {type(text).__name__}, not text")
    out = redact_text(text).strip()
    if not out:
        raise SummarizerBadOutput("summarizer returned an empty summary")
    if count_text(out) > limit_tokens:
        raise SummarizerBadOutput("summary is longer than everything it summarizes")
    return out


_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_PREAMBLE = re.compile(r"^\s*(?:here(?:'s| is)|sure|certainly|updated summary)\b[^\n]*:\s*\n", re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w-]*\n(?P<body>.*)\n```\s*$", re.DOTALL)


def completion_summary(response: Any, model: str) -> str:
    """The usable summary in a chat completion: reasoning blocks, preambles and fences removed.

    Output cut off at ``max_tokens`` is rejected (:class:`SummaryRejected`): a summary missing its tail
    would silently lose facts, and a small model cut off is usually copying its input.
    """
    choices = getattr(response, "choices", None)
    if not choices:
        raise SummarizerBadOutput(f"{model}: response has no choices")
    choice = choices[0]
    content = getattr(getattr(choice, "message", None), "content", None)
    if not isinstance(content, str):
        raise SummarizerBadOutput(f"{model}: response has no text content")
    if getattr(choice, "finish_reason", None) == "length":
        raise SummaryRejected(
            Rejection("cut_off", f"{model}: output was cut off at max_output_tokens"),
            clip(redact_text(content), 160),
        )
    text = _THINK_BLOCK.sub("", content)
    if "</think>" in text:  # the opening tag was part of the prompt template
        text = text.rsplit("</think>", 1)[1]
    text = _PREAMBLE.sub("", text, count=1)
    fenced = _FENCE.match(text)
    text = (fenced["body"] if fenced else text).strip()
    if not text:
        raise SummarizerBadOutput(f"{model}: empty summary")
    return text
