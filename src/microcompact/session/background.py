"""Background micro-compaction: the summarizer call runs on a worker thread, off the turn's critical path.

``finalize_turn`` only snapshots the transcript and hands the slow half of the pass (span choice and the
summarizer call, plus a defrag if the new summary needs one) to one worker thread, then returns. The
result is applied at the next ``finalize_turn``, ``before_request`` or ``messages`` read, and only if the
span it summarized is still exactly what the transcript holds (messages appended at the end do not
conflict); otherwise it is discarded and the pass is tried again on the current transcript. Commit and
apply happen on the caller's thread, so the store and the transcript are never touched concurrently.

A *fold* (mode ``FOLD``: the policy's ``take_planned()``, several passes down to a low-water mark, as the
price policy asks) runs every pass of it on the worker, on a shadow of the engine (its own copy of the
rolling state, a commit hook that only records the events) over a snapshot; ``collect`` then commits and
applies the recorded events in order and takes the shadow's state, so the view switches once, however many
passes the fold took, and only if nothing but new messages at the end changed meanwhile.

**Fold ahead** (mode ``AHEAD``: the policy expects a fold soon, or the turn is over and an idle gap may
follow): the same shadow fold, started before it is due and *held* when it finishes (the view does not
change); a later ``AHEAD`` extends the held shadow over the messages added since, and ``FOLD`` (the
policy says fold now) adopts it at that very request. A held shadow that no longer applies (something
other than new trailing messages changed) is dropped and the fold starts as without it.

A due fold is adopted only when switching the view to it *as it is* pays by the price policy's rule
(``adoption_pays``: its summarizer calls are spent, only the cache counts). One that lags the transcript (a
slow fold on a fast loop: several steps came while it ran, and it would keep them all after its new
marker, rewriting them to remove little) is held and extended over what came since, and decided on again
when that lands, so the view switches once, low, and not to a fold that rewrites much to remove little. A
slow summarizer's fold that never catches up is extended until it pays, or the batch threshold (the hard
limit) takes over. No request waits for the worker either way. Where a fold is in that life is its
:class:`~microcompact.micro.fold_job.FoldStage`, which only this module changes.

Not thread-safe by itself: :class:`~microcompact.session.Session` calls ``submit`` and ``collect`` under its
lock. ``wait`` needs no lock (it only waits for the running job), so a thread can wait without holding
the session up; the worker never takes the session's lock, so waiting under it cannot deadlock either.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from ..micro import Condensed, Fold, FoldJob, FoldStage, MicroCompactor, PassMode, PassResult, Planned, WorkerMode
from ..micro.ahead import ShadowFolds
from ..tokens import Ledger

log = logging.getLogger("microcompact")


Job = tuple[Planned | PassResult | None, Condensed | None] | FoldJob


class BackgroundPasses:
    def __init__(self, micro: MicroCompactor) -> None:
        self.micro = micro
        self.shadows = ShadowFolds(micro)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microcompact-pass")
        self._job: Future[Job] | None = None
        self._running: FoldJob | None = None  # the fold on the worker (None: none, or a single pass)
        self._held: FoldJob | None = None  # a finished fold, held until the policy says fold
        self._turns_due = 0  # turn passes asked for while a job ran
        self.discarded = 0
        self.adopted_ahead = 0  # folds adopted at the request that decided them (telemetry, tests)
        self.spent: list[PassResult] = []  # passes of discarded folds not taken yet (``take_spent``)
        self.caught_up = 0  # due folds extended over what came since, as switching to them did not pay

    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def ready(self) -> FoldJob | None:
        """The fold held (computed ahead, not adopted yet), or None."""
        return self._held

    @property
    def holding(self) -> bool:
        """A fold is held: the batch threshold may adopt it (:meth:`adopt_held`) rather than compact."""
        return self._held is not None

    def submit(self, ledger: Ledger, mode: WorkerMode = WorkerMode.TURN) -> list[PassResult]:
        """Start a pass on a snapshot; if one is running, remember that a turn pass is due. ``FOLD``
        adopts a shadow computed ahead at once (its results are returned: the view switched now)."""
        if mode == WorkerMode.FOLD and self._held is not None:
            adopted = self._due_held(ledger)
            if adopted is not None:
                return adopted
        if self._job is not None:
            if mode == WorkerMode.TURN:
                self._turns_due += 1
            elif mode == WorkerMode.FOLD:
                self._running_is_due()  # the fold is due: the shadow being computed lands when done
            return []
        self.micro.sync(ledger)
        if mode in (WorkerMode.FOLD, WorkerMode.AHEAD):
            plan = self.shadows.planned()
            if plan.folds:
                stage = FoldStage.RUNNING_AHEAD if mode == WorkerMode.AHEAD else FoldStage.DUE
                job = self.micro.fold_job(ledger, self._held, stage)
                if self._held is not None and job.base is not self._held.base:
                    self._drop_held("it no longer applies")
                self._start(ledger, plan.folds, job, offline=plan.offline)
            return []
        self._job = self._pool.submit(contextvars.copy_context().run, self._work, ledger.snapshot(), mode)
        return []

    def _start(self, ledger: Ledger, folds: tuple[Fold, ...], job: FoldJob, *, offline: bool) -> None:
        """Run ``job`` over ``folds`` on the worker, on a snapshot of ``ledger``. ``offline``: the summarizer
        cannot keep up with the session (it would lag as much again, and the batch threshold would prune the
        tool outputs instead), so what it could not reach in time gets the deterministic summary, in the same
        rolling summary and the same one switch of the view."""
        self._running = job
        run = functools.partial(self.shadows.run, offline=offline)
        self._job = self._pool.submit(contextvars.copy_context().run, run, ledger.snapshot(), folds, job)

    def _running_is_due(self) -> None:
        """The policy says fold while a fold computed ahead runs: adopt it when it lands."""
        if self._running is not None and self._running.stage is FoldStage.RUNNING_AHEAD:
            self._running.stage = FoldStage.DUE

    def _adopt_held_now(self, ledger: Ledger) -> list[PassResult] | None:
        """Adopt the held shadow now (None: it no longer applies, dropped). A running extension of it is
        dropped when it finishes: the view it would extend has just been switched."""
        held, self._held = self._held, None
        assert held is not None
        results = self.micro.adopt_fold(ledger, held)
        if self._running is not None:
            self._running.stage = FoldStage.DROPPED
        if results is None:
            self.discarded += 1
            self._spend(held)
            log.info("Micro-compaction: a fold computed ahead no longer applies; folding as usual")
            return None
        self.adopted_ahead += 1
        return self._applied(held, results)

    def adopt_held(self, ledger: Ledger) -> list[PassResult]:
        """Adopt the held shadow now, whatever the price says (the batch threshold is crossed: a switch is
        due anyway); [] when there is none or it no longer applies (dropped)."""
        held = self._held
        if held is None or not (self.shadows.adoptable(ledger, held) or not self.micro.applies(ledger, held)):
            return []  # it applies but must wait for messages after its snapshot: still held
        return self._adopt_held_now(ledger) or []

    def _due_held(self, ledger: Ledger) -> list[PassResult] | None:
        """The fold is due and a shadow is held: adopt it when switching to it now pays (its results), or
        extend it over what came since and decide again when that lands ([]); None: it no longer applies
        (dropped), the fold starts as without it."""
        held = self._held
        assert held is not None
        if not self.micro.applies(ledger, held):
            self._adopt_held_now(ledger)  # counts the drop, drops a running extension of it
            return None
        if not self.shadows.adoptable(ledger, held):
            return []  # the same request again: its tail is yet to come
        if self.shadows.pays(ledger, held):
            return self._adopt_held_now(ledger)
        if self._job is not None:
            self._running_is_due()  # the extension running now is decided on when it lands
            return []
        self._catch_up(ledger, held)
        return []

    def _catch_up(self, ledger: Ledger, held: FoldJob) -> bool:
        """Extend the held fold (due, but lagging the transcript) over the messages that came since, with a
        tail as for a fold adopted a request later; decided on again when it lands (False: nothing to
        extend with, it stays held)."""
        self.micro.sync(ledger)
        self.shadows.planned()  # the plan made for this request keeps a whole tail: replaced
        folds = self.shadows.extension(ledger)
        if not folds:
            return False
        job = self.micro.fold_job(ledger, held, FoldStage.EXTENDING)
        job.caught_up = True
        self.caught_up += 1
        self._start(ledger, folds, job, offline=not self.shadows.keeps_up())
        return True

    def _drop_held(self, why: str) -> None:
        if self._held is not None:
            self._spend(self._held)
        self._held = None
        self.discarded += 1
        log.info("Micro-compaction: a fold computed ahead was dropped (%s)", why)

    def _finished_fold(self, ledger: Ledger, job: FoldJob) -> list[PassResult]:
        """A fold job finished: drop it (its base was switched meanwhile), hold it (ahead, not due yet),
        or apply it (the transcript changed under it: none, the policy decides again)."""
        self.shadows.timed(job)
        if job.stage is FoldStage.DROPPED:
            self.discarded += 1
            self._spend(job)
            return []
        if not self.micro.applies(ledger, job):
            self.discarded += 1
            self._spend(job)
            log.info("Micro-compaction: background fold discarded, the transcript changed under it")
            return []
        adopt = job.stage.adopt_when_done and self.shadows.adoptable(ledger, job)
        if not adopt or not self.shadows.pays(ledger, job):
            job.stage = FoldStage.HELD
            self._held = job  # a later request adopts it, or extends it first (``_due_held``)
            return []
        return self._applied(job, self.micro.adopt_fold(ledger, job) or [])

    def _applied(self, job: FoldJob, results: list[PassResult]) -> list[PassResult]:
        """``job`` was adopted: its passes are the caller's to bill (none: the store refused them, spent)."""
        if not results:
            self._spend(job)
        for result in results:
            result.accounted = True
        return results

    def _spend(self, job: FoldJob) -> None:
        """``job`` is discarded: its passes' summarizer calls were made all the same (``take_spent``); a
        pass an extension carries over from the fold it extended is counted once."""
        for result in job.results:
            if not result.accounted:
                result.accounted = True
                self.spent.append(result)

    def take_spent(self) -> list[PassResult]:
        """The passes of folds discarded since the last call: never applied, but their summarizer calls
        were made, so whoever bills the summarizer (the proxy's ``SessionBill``) counts them too."""
        spent, self.spent = self.spent, []
        return spent

    def _work(self, snapshot: Ledger, mode: WorkerMode) -> Job:
        return self.micro.plan_ahead(snapshot, PassMode(mode))

    def wait(self, timeout: float) -> None:
        """Block until the running job (if any) finishes or ``timeout`` passes; applies nothing."""
        job = self._job
        if job is not None:
            with contextlib.suppress(Exception):  # a timeout, or the job's own failure (collect reports it)
                job.result(timeout=timeout)

    def collect(self, ledger: Ledger, *, wait: float | None = None) -> list[PassResult]:
        """Apply a finished pass (waiting up to ``wait`` seconds for it); never raises."""
        job = self._job
        if job is None:
            return []
        if wait is not None:
            with contextlib.suppress(Exception):
                job.result(timeout=wait)
        if not job.done():
            return []
        self._job = self._running = None
        results: list[PassResult] = []
        try:
            done = job.result()
            if isinstance(done, FoldJob):
                return self._finished_fold(ledger, done)
            planned, condensed = done
            if isinstance(planned, PassResult):
                results.append(planned)
            elif isinstance(planned, Planned):
                landed = self.micro.land(ledger, planned, condensed)
                if landed is not None:
                    results += landed
                else:
                    self.discarded += 1
                    self._turns_due += 1
                    log.info(
                        "Micro-compaction: background pass discarded, the transcript changed under it; "
                        "retrying on the current transcript"
                    )
        except Exception:
            log.exception("Micro-compaction: background pass failed unexpectedly; transcript left as it was")
        if self._turns_due:
            self._turns_due -= 1
            self.submit(ledger)
        return results

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
