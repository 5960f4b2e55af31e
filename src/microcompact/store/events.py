"""The engines' compaction events, as the store consumes them: the store's only import of the engines.

Kept in this one module so that moving the event vocabulary (to ``microcompact.events``) changes one place.
"""

from __future__ import annotations

from ..batch import BatchCompact, Prune
from ..micro import Absorb, Event, Rewrite

__all__ = ["Absorb", "BatchCompact", "Event", "Prune", "Rewrite"]
