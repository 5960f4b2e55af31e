"""A server's "your request does not fit my context" error, recognised and turned into an input budget.

Retrying the same request after a pause cannot help (issue 12: llama.cpp's HTTP 400 "exceeds the
available context size" was retried after 30 s). The input is shrunk to fit instead. The error is phrased
differently by each server; all of these are recognised:

- llama.cpp: ``the request exceeds the available context size, try increasing it`` (newer builds add
  ``"type": "exceed_context_size_error"``, ``n_prompt_tokens`` and ``n_ctx`` to the error object);
- vLLM: ``This model's maximum context length is 16384 tokens. However, you requested 17408 tokens ...``;
- OpenAI: the same sentence with ``"code": "context_length_exceeded"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CONTEXT_ERROR = re.compile(
    r"(?i)exceeds? the available context size|context[ _]length|context_length_exceeded|exceed_context_size"
    r"|context window|prompt is too long|too many tokens"
)
_LIMIT = re.compile(
    r"(?i)(?:available context size \((\d+) tokens?\)|maximum context length is (\d+)|context (?:size|window) of (\d+))"
)
_REQUESTED = re.compile(r"(?i)(?:you requested|resulted in|request \(|n_prompt_tokens\D{0,4})(\d+)")


@dataclass(frozen=True)
class ContextOverflow:
    """What the server said about the request that did not fit (numbers when it gave them)."""

    limit: int | None  # the server's context size in tokens
    requested: int | None  # the tokens the request needed, by the server's count


def context_overflow(exc: Exception) -> ContextOverflow | None:
    """The overflow an SDK error reports, or None when the error is about something else."""
    body = getattr(exc, "body", None)
    fields: dict[str, Any] = body if isinstance(body, dict) else {}
    if isinstance(fields.get("error"), dict):
        fields = fields["error"]
    text = " ".join(str(v) for v in (str(exc), fields.get("message"), fields.get("type"), fields.get("code")) if v)
    if not _CONTEXT_ERROR.search(text):
        return None
    limit = _int(fields.get("n_ctx"))
    if limit is None and (match := _LIMIT.search(text)):
        limit = _int(next(g for g in match.groups() if g))
    requested = _int(fields.get("n_prompt_tokens"))
    if requested is None and (match := _REQUESTED.search(text)):
        requested = _int(match.group(1))
    return ContextOverflow(limit, requested)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def input_budget(overflow: ContextOverflow, max_output_tokens: int, sent_tokens: int) -> int:
    """Tokens (by our count) the next request may hold so that it and the answer fit the server's context.

    With the server's limit and its count of the failed request, our count is scaled by theirs (tokenizers
    differ); with the limit alone, our count is trusted with a margin; with neither, the request is halved.
    """
    if overflow.limit is None:
        return sent_tokens // 2
    room = overflow.limit - max_output_tokens
    if overflow.requested:
        room = room * sent_tokens // max(overflow.requested, 1)  # theirs -> ours
    return min(int(room * 0.9), sent_tokens * 9 // 10)  # a margin, and always smaller than what failed
