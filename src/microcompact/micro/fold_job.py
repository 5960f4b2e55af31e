"""A fold computed on the background worker, and where it is in its life.

A :class:`FoldJob` holds what the engine needs to adopt the fold later (the transcript and rolling state it
started from, the events its passes recorded, the state after them) and one :class:`FoldStage`. The worker
(:class:`~microcompact.session.background.BackgroundPasses`) moves a job between the stages; nothing else does:

- ``RUNNING_AHEAD``: started before the policy said fold; held when it finishes.
- ``DUE``: running, and the policy has said fold: adopted when it finishes (if switching to it pays).
- ``EXTENDING``: running over a held fold that was due but lagged the transcript; decided on when it lands.
- ``HELD``: finished, not adopted yet: a later request adopts it, or extends it first.
- ``DROPPED``: running over a view that was switched meanwhile: discarded when it finishes.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from enum import Enum

from ..events import Event
from ..messages import Message
from .state import PassResult, RollingSummary


class FoldStage(Enum):
    RUNNING_AHEAD = "running ahead"
    DUE = "due"
    EXTENDING = "extending"
    HELD = "held"
    DROPPED = "dropped"

    @property
    def adopt_when_done(self) -> bool:
        """A running job in this stage is adopted when it finishes (if it applies and pays), not held."""
        return self in (FoldStage.DUE, FoldStage.EXTENDING)


@dataclass
class FoldJob:
    """A whole fold computed on a shadow engine: the events to commit and apply, and the state after them."""

    base: list[Message]  # the transcript the fold ran on (its messages must still open the transcript)
    base_summary: str
    base_marker: int | None
    stage: FoldStage
    events: list[Event] = field(default_factory=list)
    results: list[PassResult] = field(default_factory=list)
    state: RollingSummary | None = None
    largest_pass_tokens: int = 0
    summarizer_ms: float = 0.0
    seconds: float = 0.0  # engine time its passes took (the clock's), all extensions included
    removed_tokens: int = 0  # how much smaller its passes made the transcript (counted tokens)
    covered: int = 0  # messages of the transcript it last ran over (the rest came after its snapshot)
    caught_up: bool = False  # extended once at a due fold to cover what came while it ran
    open_end: bool = False  # it may have absorbed the newest message it ran on: adopted once more came
    offline: bool = False  # its last run used the offline summarizer: its time is not the summarizer's

    @property
    def ahead(self) -> bool:
        """Started before the policy said fold, and not due yet."""
        return self.stage is FoldStage.RUNNING_AHEAD

    @classmethod
    def starting(cls, messages: list[Message], state: RollingSummary, stage: FoldStage) -> FoldJob:
        """A new fold over ``messages`` from the engine's rolling ``state`` (copied: the shadow's own)."""
        return cls(list(messages), state.text, state.marker_index, stage, state=copy.deepcopy(state))

    def applies_to(self, messages: list[Message], state: RollingSummary) -> bool:
        """True while ``messages`` open with what it ran on (only messages at the end were added since) and
        the engine's rolling ``state`` is the one it started from."""
        fresh = len(messages) >= len(self.base) and all(a is b for a, b in zip(messages, self.base, strict=False))
        return fresh and state.text == self.base_summary and state.marker_index == self.base_marker

    def extended(self, stage: FoldStage) -> FoldJob:
        """A new job that continues this one (a shadow not adopted yet) over a newer snapshot, in ``stage``:
        its own lists and rolling state, the running figures carried over."""
        return dataclasses.replace(
            self,
            stage=stage,
            events=list(self.events),
            results=list(self.results),
            state=copy.deepcopy(self.state),
            offline=False,
        )
