"""What both engines' attempts name in their telemetry records about the engine that ran them.

A micro pass (:mod:`microcompact.micro.attempt`) and a batch compaction (:mod:`microcompact.batch.attempt`)
record the same facts about their engine; one value holds them, so the two records cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .config import Config
from .summarizers import Summarizer
from .tokens import TokenCounter


@dataclass(frozen=True)
class Context:
    """What every record names about the engine that ran the attempt (fixed for the engine's life)."""

    config: Config
    counter: TokenCounter
    session_id: str
    summarizer: Summarizer
    clock: Callable[[], float]


__all__ = ["Context"]
