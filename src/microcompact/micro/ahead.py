"""What the background worker asks about folds computed on a shadow of the engine: run one (with the
engine's summarizer or the offline one), whether it may be adopted and whether adopting it pays, which
passes extend one, and what the schedule planned. The worker reads none of the engine's collaborators
itself: everything goes through the engine's public methods and the :class:`~.policy.MicroPolicy`
protocol.
"""

from __future__ import annotations

import copy
from typing import Any

from ..events import Event, apply_event
from ..messages import Message
from ..summarizers import Summarizer
from ..summarizers.extractive import ExtractiveSummarizer
from ..tokens import Ledger
from .engine import MicroCompactor
from .fold_job import FoldJob
from .fold_tail import ends_open
from .policy import Fold, FoldPlan


class ShadowFolds:
    """Folds of one engine computed off its thread (one per background worker, ``BackgroundPasses``)."""

    def __init__(self, micro: MicroCompactor) -> None:
        self.micro = micro

    def run(self, snapshot: Ledger, folds: tuple[Fold, ...], job: FoldJob, *, offline: bool = False) -> FoldJob:
        """Every pass of ``folds`` on a shadow of the engine over ``snapshot`` (its own copy of the rolling
        state, a commit hook that only records the events): the engine is untouched, so a worker may run
        it. ``job`` (from :meth:`MicroCompactor.fold_job`): its events are applied to ``snapshot`` first.
        ``offline``: the shadow summarizes with the deterministic extractive summarizer (those passes cost
        nothing, and their time is not the summarizer's)."""
        micro = self.micro
        # Open-ended while this run may empty the tail, or nothing came after what an open-ended run absorbed.
        job.open_end = ends_open(folds) or (job.open_end and len(snapshot.messages) <= job.covered)
        job.covered = len(snapshot.messages)
        for event in job.events:
            apply_event(snapshot, event)
        t0, before, first = micro.clock(), snapshot.total, len(job.results)

        def record(event: Event, msgs: list[Message]) -> Any:
            job.events.append(event)

        summarizer: Summarizer = (
            ExtractiveSummarizer(micro.counter.count_text, ledger_budget_tokens=micro.config.ledger_room_tokens())
            if offline
            else micro.context.summarizer
        )
        shadow = MicroCompactor(
            micro.config,
            summarizer,
            micro.counter,
            session_id=micro.context.session_id,
            commit=record,
            clock=micro.clock,
            wall_clock=micro.wall_clock,
            policy=micro.policy,
            state=job.state if job.state is not None else copy.deepcopy(micro.state),
            refusal=micro.refusal,
            defrag=micro.defrag,
        )
        for fold in folds:
            job.results += shadow.catch_up(snapshot, fold)
        job.state = shadow.state
        job.largest_pass_tokens = max(job.largest_pass_tokens, shadow.largest_pass_tokens)
        job.summarizer_ms += shadow.summarizer_ms_total
        job.seconds += max(0.0, micro.clock() - t0)
        job.removed_tokens += max(0, before - snapshot.total)
        job.offline = offline
        if offline:
            for result in job.results[first:]:
                result.record["summarizer_input_tokens"] = result.record["summarizer_output_tokens"] = 0
        return job

    def adoptable(self, ledger: Ledger, job: FoldJob) -> bool:
        """True when switching to ``job`` now keeps a tail: it applies, and a fold that may have absorbed its
        snapshot's newest message has messages after it (a retry of the same request waits)."""
        return self.micro.applies(ledger, job) and (not job.open_end or len(ledger.messages) > job.covered)

    def pays(self, ledger: Ledger, job: FoldJob) -> bool:
        """Whether the schedule would switch the view to ``job`` now."""
        return self.micro.policy.adoption_pays(self.micro.moment(ledger), job.removed_tokens, job.caught_up)

    def extension(self, ledger: Ledger) -> tuple[Fold, ...]:
        """The passes that extend a held fold over what came since, with a tail as for a fold adopted a
        request later (empty: a schedule that plans no such extension)."""
        return tuple(self.micro.policy.folds_to_run(self.micro.moment(ledger), 1))

    def keeps_up(self) -> bool:
        """The summarizer folds a request's growth faster than requests come."""
        return self.micro.policy.keeps_up()

    def planned(self) -> FoldPlan:
        """The fold the schedule planned for the worker, taken once."""
        return self.micro.policy.take_planned()

    def timed(self, job: FoldJob) -> None:
        """Tell the schedule how long a finished fold's passes took for what they removed (it plans how far
        ahead to start the next one by it); a job run offline says nothing of the summarizer."""
        if not job.offline and job.removed_tokens > 0:
            self.micro.policy.fold_timed(job.seconds, job.removed_tokens)
