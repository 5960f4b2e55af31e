"""microcompact: keep long-running agent transcripts inside the context window.

Micro-compaction folds the oldest not-yet-summarized exchange into one rolling summary after each turn;
user messages are never summarized. Start with :class:`Session` (:class:`AsyncSession` for asyncio code);
:func:`summarizer_from` makes your own OpenAI or Anthropic client (or a function) the summarizer.
"""

from .aio import AsyncSession
from .config import Config, ConfigError, load_config, parse_config
from .contract import role_sequence_errors, tool_pairing_errors, user_message_errors
from .events import Outcome
from .messages import (
    MARKER_PREFIX,
    TranscriptError,
    is_marker,
    marker_kind,
    to_api,
)
from .micro import MicroCompactor, RollingSummary, micro_compact
from .session import Session
from .store import SessionBusy, StoreError, open_store
from .summarizers import ExtractiveSummarizer, FallbackChain, summarizer_from
from .telemetry import log_telemetry

__all__ = [
    "Config",
    "ConfigError",
    "load_config",
    "parse_config",
    "MARKER_PREFIX",
    "TranscriptError",
    "is_marker",
    "marker_kind",
    "role_sequence_errors",
    "to_api",
    "tool_pairing_errors",
    "user_message_errors",
    "MicroCompactor",
    "Outcome",
    "RollingSummary",
    "micro_compact",
    "Session",
    "AsyncSession",
    "SessionBusy",
    "StoreError",
    "open_store",
    "ExtractiveSummarizer",
    "FallbackChain",
    "summarizer_from",
    "log_telemetry",
]

__version__ = "0.1.0"
