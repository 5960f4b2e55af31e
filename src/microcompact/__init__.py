"""microcompact: keep long-running agent transcripts inside the context window.

Micro-compaction folds the oldest not-yet-summarized exchange into one rolling summary after each turn;
user messages are never summarized. Start with :class:`Session` (:class:`AsyncSession` for asyncio code,
:class:`SessionRouter` for many conversations that each resend their full history);
:func:`summarizer_from` makes your own OpenAI or Anthropic client (or a function) the summarizer, and a
summarizer of your own implements :class:`Summarizer` and raises its errors.

This is the front door: what a user builds with. The engines, the contract checkers and the store's
internals live in their own modules (``microcompact.messages``, ``microcompact.store``, ...).
"""

from .config import Config, ConfigError, load_config, parse_config
from .events import Outcome
from .messages import TranscriptError, to_api
from .micro import micro_compact
from .router import SessionRouter
from .session import HistoryDiverged, Session
from .session.aio import AsyncSession
from .store import SessionBusy, StoreError, open_store
from .summarizers import (
    ExtractiveSummarizer,
    FallbackChain,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerError,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
    summarizer_from,
)
from .telemetry import log_telemetry

__all__ = [
    # sessions
    "Session",
    "AsyncSession",
    "SessionRouter",
    "HistoryDiverged",
    "TranscriptError",
    "Outcome",
    # configuration
    "Config",
    "ConfigError",
    "load_config",
    "parse_config",
    # the store a session writes to
    "open_store",
    "StoreError",
    "SessionBusy",
    # summarizers
    "Summarizer",
    "SummarizerError",
    "SummarizerTimeout",
    "SummarizerRateLimited",
    "SummarizerAuthError",
    "SummarizerUnavailable",
    "SummarizerBadOutput",
    "summarizer_from",
    "FallbackChain",
    "ExtractiveSummarizer",
    # one call, no session
    "micro_compact",
    "to_api",
    # the telemetry log the report command reads
    "log_telemetry",
]

__version__ = "0.1.0"
