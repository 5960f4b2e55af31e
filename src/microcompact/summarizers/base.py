"""The summarizer protocol, its errors and the sections summaries are laid out in.

The engine calls ``merge`` (fold one exchange into the rolling summary), ``condense`` (shorten a rolling
summary that grew too long) and ``batch`` (compact a whole span into fixed sections). Every failure is a
:class:`SummarizerError` subclass so the engine can decide what to retry; the engine owns retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

CountText = Callable[[str], int]


class SummarizerError(Exception):
    """Base of every summarizer failure (the engine catches everything anyway)."""


class SummarizerTimeout(SummarizerError):
    """No answer within the configured timeout."""


class SummarizerRateLimited(SummarizerError):
    """HTTP 429: worth retrying later."""


class SummarizerAuthError(SummarizerError):
    """401/403 or exhausted quota: retrying will not help, so never retry in a loop."""


class SummarizerUnavailable(SummarizerError):
    """5xx or no connection."""


class SummarizerBadOutput(SummarizerError):
    """Empty, truncated, unparseable or otherwise unusable output."""


@runtime_checkable
class Summarizer(Protocol):
    name: str  # telemetry's ``aux_model``: "extractive" or the model name

    def merge(self, summary: str, exchange: list[dict]) -> str:
        """The rolling summary updated with what ``exchange`` adds; what no longer matters dropped."""
        ...

    def condense(self, summary: str, target_tokens: int) -> str:
        """A shorter version of ``summary`` aiming at ``target_tokens``."""
        ...

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        """``summary`` updated with ``messages`` in the fixed batch sections, favouring ``focus``."""
        ...


BATCH_SECTIONS = (
    "Goal",
    "Constraints and preferences",
    "Completed actions",
    "Active state",
    "Blocked (exact errors)",
    "Key decisions (with reasons)",
    "Relevant files",
    "Open questions",
)
MICRO_SECTIONS = ("Requirements", "Findings", "Open questions", "Commands and results", "Answers")


def make_summarizer(kind: str, **options: Any) -> Summarizer:
    """``"extractive"`` or ``"openai"``, constructed with ``options``."""
    # Imported here: both implementations import this module for the protocol and the errors.
    if kind == "extractive":
        from .extractive import ExtractiveSummarizer

        return ExtractiveSummarizer(**options)
    if kind == "openai":
        from .http import OpenAISummarizer

        return OpenAISummarizer(**options)
    raise ValueError(f"unknown summarizer kind {kind!r} (expected 'extractive' or 'openai')")
