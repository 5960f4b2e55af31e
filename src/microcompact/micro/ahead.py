"""What the background worker asks of the engine about folds computed ahead: whether adopting one pays,
which passes extend one, whether the summarizer keeps up, and the offline engine that extends one when it
does not. Here, inside ``micro/``, so the worker reads none of the engine's collaborators itself."""

from __future__ import annotations

import copy
import dataclasses

from ..summarizers.extractive import ExtractiveSummarizer
from ..tokens import Ledger
from .engine import FoldJob, MicroCompactor
from .passes import Merging
from .policy import Fold


def runs_offline(micro: MicroCompactor) -> bool:
    """The policy asks for every fold to run with the offline summarizer (one that cannot keep up)."""
    return bool(getattr(micro.policy, "offline", False))


def adoption_pays(micro: MicroCompactor, ledger: Ledger, job: FoldJob) -> bool:
    """Whether the policy would switch the view to ``job`` now (a policy that does not price: always)."""
    pays = getattr(micro.policy, "adoption_pays", None)
    if pays is None:
        return True
    return bool(pays(micro.moment(ledger), job.removed_tokens, job.caught_up))


def catch_up_folds(micro: MicroCompactor, ledger: Ledger) -> tuple[Fold, ...]:
    """The passes that extend a held fold over what came since, with a tail as for a fold adopted a request
    later (empty: a policy that plans no such extension)."""
    plan = getattr(micro.policy, "folds_to_run", None)
    return tuple(plan(micro.moment(ledger), 1)) if plan is not None else ()


def keeps_up(micro: MicroCompactor) -> bool:
    """The summarizer folds a request's growth faster than requests come (a policy that does not
    measure: yes)."""
    measured = getattr(micro.policy, "keeps_up", None)
    return measured is None or bool(measured())


def offline_engine(micro: MicroCompactor) -> MicroCompactor:
    """A copy of ``micro`` that summarizes with the deterministic extractive summarizer: same config,
    counter, clock and rolling state."""
    offline = copy.copy(micro)
    extractive = ExtractiveSummarizer(count_text=micro.counter.count_text)
    offline.merging = Merging(micro.config, extractive, micro.counter, micro.clock)
    offline.context = dataclasses.replace(micro.context, summarizer=extractive)
    return offline
