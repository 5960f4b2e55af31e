"""The summarizer protocol, its errors and the sections summaries are laid out in.

The engine calls ``merge`` (fold one exchange into the rolling summary), ``condense`` (shorten a rolling
summary that grew too long) and ``batch`` (compact a whole span into fixed sections). Every failure is a
:class:`SummarizerError` subclass so the engine can decide what to retry; the engine owns retries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .limits import ContextOverflow

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


@dataclass(frozen=True)
class Rejection:
    """Why a model's answer was not accepted: a short code for telemetry and a one-line reason.

    Codes: cut_off, context_size, unchanged, prompt_echo, message_copy, unknown_path, unknown_command,
    unsupported_claim, missing_sections.
    """

    code: str
    reason: str

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


class SummaryRejected(SummarizerBadOutput):
    """The model answered, but the answer cannot be used (it failed a check, was cut off, or the request
    did not fit the endpoint's context). The engine writes the deterministic summary instead, at once."""

    def __init__(self, rejection: Rejection, excerpt: str = "", overflow: ContextOverflow | None = None) -> None:
        super().__init__(str(rejection))
        self.rejection = rejection
        self.excerpt = excerpt  # redacted, short: for the log
        self.overflow = overflow  # what the server said when the request did not fit its context


@runtime_checkable
class Summarizer(Protocol):
    name: str  # telemetry's ``aux_model``: "extractive" or the model name

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        """The rolling summary updated with what ``exchange`` adds; what no longer matters dropped."""
        ...

    def condense(self, summary: str, target_tokens: int) -> str:
        """A shorter version of ``summary`` aiming at ``target_tokens``."""
        ...

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
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
# The sections a model's notes fill in (merge and condense); the facts beside them are kept by code.
PROSE_SECTIONS = ("Goal", "Work done", "Findings", "Next")
MICRO_SECTIONS = ("Requirements", "Findings", "Open questions", "Commands and results", "Answers")
