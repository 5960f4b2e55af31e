"""The compaction events the store consumes: the event vocabulary of :mod:`microcompact.events`
(the store never imports the engines)."""

from __future__ import annotations

from ..events import Absorb, BatchCompact, Event, Prune, Rewrite

__all__ = ["Absorb", "BatchCompact", "Event", "Prune", "Rewrite"]
