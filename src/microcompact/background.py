"""Background micro-compaction: the summarizer call runs on a worker thread, off the turn's critical path.

``finalize_turn`` only snapshots the transcript and hands the slow half of the pass (span choice and the
summarizer call, plus a defrag if the new summary needs one) to one worker thread, then returns. The
result is applied at the next ``finalize_turn``, ``before_request`` or ``messages`` read, and only if the
span it summarized is still exactly what the transcript holds (messages appended at the end do not
conflict); otherwise it is discarded and the pass is tried again on the current transcript. Commit and
apply happen on the caller's thread, so the store and the transcript are never touched concurrently.

A *fold* (mode ``"fold"``: the policy's ``take_planned()``, several passes down to a low-water mark, as the
price policy asks) runs every pass of it on the worker, on a shadow of the engine (its own copy of the
rolling state, a commit hook that only records the events) over a snapshot; ``collect`` then commits and
applies the recorded events in order and takes the shadow's state, so the view switches once, however many
passes the fold took, and only if nothing but new messages at the end changed meanwhile.

**Fold ahead** (mode ``"ahead"``: the policy expects a fold soon, or the turn is over and an idle gap may
follow): the same shadow fold, started before it is due and *held* when it finishes (the view does not
change); a later ``"ahead"`` extends the held shadow over the messages added since, and ``"fold"`` (the
policy says fold now) adopts it at that very request. A held shadow that no longer applies (something
other than new trailing messages changed) is dropped and the fold starts as without it.

A due fold is adopted only when switching the view to it *as it is* pays by the price policy's rule
(``adoption_pays``: its summarizer calls are spent, only the cache counts). One that lags the transcript (a
slow fold on a fast loop: several steps came while it ran, and it would keep them all after its new
marker, rewriting them to remove little) is held and extended over what came since, and decided on again
when that lands, so the view switches once, low, and not to a fold that rewrites much to remove little. A
slow summarizer's fold that never catches up is extended until it pays, or the batch threshold (the hard
limit) takes over. No request waits for the worker either way.

Not thread-safe by itself: :class:`~microcompact.session.Session` calls ``submit`` and ``collect`` under its
lock. ``wait`` needs no lock (it only waits for the running job), so a thread can wait without holding
the session up; the worker never takes the session's lock, so waiting under it cannot deadlock either.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from .micro import Condensed, Fold, FoldJob, MicroCompactor, PassResult, Planned, ahead
from .tokens import Ledger

log = logging.getLogger("microcompact")


Job = tuple[Planned | PassResult | None, Condensed | None] | FoldJob

# Set on a fold's pass once it was handed to the caller (adopted) or to ``take_spent`` (discarded): an
# extension carries its prior fold's passes, which are billed once.
ACCOUNTED = "microcompact_accounted"


class BackgroundPasses:
    def __init__(self, micro: MicroCompactor) -> None:
        self.micro = micro
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microcompact-pass")
        self._job: Future[Job] | None = None
        self._due = 0
        self.discarded = 0
        self.ready: FoldJob | None = None  # a fold computed ahead, held until the policy says fold
        self._adopt_running = False  # the running ahead job is due already: adopt it when it finishes
        self._drop_running = False  # the running job extends a shadow that was adopted or dropped meanwhile
        self._running_ahead = False  # the running job is a fold computed ahead
        self._extends_ready = False  # the running job extends the held shadow (a due fold catching up)
        self.adopted_ahead = 0  # folds adopted at the request that decided them (telemetry, tests)
        self._untimed: set[int] = set()  # jobs extended offline: their time is not the summarizer's
        self.spent: list[PassResult] = []  # passes of discarded folds not taken yet (``take_spent``)
        self.caught_up = 0  # due folds extended over what came since, as switching to them did not pay

    @property
    def busy(self) -> bool:
        return self._job is not None

    def submit(self, ledger: Ledger, mode: str = "turn") -> list[PassResult]:
        """Start a pass on a snapshot; if one is running, remember that a turn pass is due. ``"fold"``
        adopts a shadow computed ahead at once (its results are returned: the view switched now)."""
        if mode == "fold" and self.ready is not None:
            adopted = self._due_ready(ledger)
            if adopted is not None:
                return adopted
        if self._job is not None:
            if mode == "turn":
                self._due += 1
            elif mode == "fold" and self._running_ahead:
                self._adopt_running = True  # the fold is due: the shadow being computed lands when done
            return []
        self.micro.sync(ledger)
        if mode in ("fold", "ahead"):
            folds = self.micro.planned_folds()
            if folds:
                job = self.micro.fold_job(ledger, self.ready, ahead=mode == "ahead")
                if self.ready is not None and job.base is not self.ready.base:
                    self._drop_ready("it no longer applies")
                self._running_ahead = job.ahead
                run = self._fold_offline if ahead.runs_offline(self.micro) else self._fold
                self._job = self._pool.submit(contextvars.copy_context().run, run, ledger.snapshot(), folds, job)
            return []
        self._job = self._pool.submit(contextvars.copy_context().run, self._work, ledger.snapshot(), mode)
        return []

    def _adopt_ready(self, ledger: Ledger) -> list[PassResult] | None:
        """Adopt the held shadow now (None: it no longer applies, dropped). A running extension of it is
        dropped when it finishes: the view it would extend has just been switched."""
        ready, self.ready = self.ready, None
        assert ready is not None
        results = self.micro.adopt_fold(ledger, ready)
        if self._job is not None and (self._running_ahead or self._extends_ready):
            self._drop_running = True
        if results is None:
            self.discarded += 1
            self._spend(ready)
            log.info("Micro-compaction: a fold computed ahead no longer applies; folding as usual")
            return None
        self.adopted_ahead += 1
        return self._applied(ready, results)

    def adopt_held(self, ledger: Ledger) -> list[PassResult]:
        """Adopt the held shadow now, whatever the price says (the batch threshold is crossed: a switch is
        due anyway); [] when there is none or it no longer applies (dropped)."""
        if self.ready is None or not self._adoptable_or_stale(ledger, self.ready):
            return []
        return self._adopt_ready(ledger) or []

    def _adoptable_or_stale(self, ledger: Ledger, job: FoldJob) -> bool:
        """False while ``job`` applies but must wait for messages after its snapshot (it is held)."""
        return self.micro.adoptable(ledger, job) or not self.micro.applies(ledger, job)

    def _due_ready(self, ledger: Ledger) -> list[PassResult] | None:
        """The fold is due and a shadow is held: adopt it when switching to it now pays (its results), or
        extend it over what came since and decide again when that lands ([]); None: it no longer applies
        (dropped), the fold starts as without it."""
        ready = self.ready
        assert ready is not None
        if not self.micro.applies(ledger, ready):
            self._adopt_ready(ledger)  # counts the drop, drops a running extension of it
            return None
        if not self.micro.adoptable(ledger, ready):
            return []  # the same request again: its tail is yet to come
        if self._pays(ledger, ready):
            return self._adopt_ready(ledger)
        if self._job is not None:
            if self._running_ahead:
                self._adopt_running = True  # the extension running now is decided on when it lands
            return []
        self._catch_up(ledger, ready)
        return []

    def _pays(self, ledger: Ledger, job: FoldJob) -> bool:
        """Whether the policy would switch the view to ``job`` now (a policy that does not price: always)."""
        return ahead.adoption_pays(self.micro, ledger, job)

    def _catch_up(self, ledger: Ledger, ready: FoldJob) -> bool:
        """Extend the held ``ready`` fold (due, but lagging the transcript) over the messages that came
        since, with a tail as for a fold adopted a request later; decided on again when it lands (False:
        nothing to extend with, it stays held)."""
        self.micro.sync(ledger)
        self.micro.planned_folds()  # the plan made for this request keeps a whole tail: replaced
        folds = ahead.catch_up_folds(self.micro, ledger)
        if not folds:
            return False
        job = self.micro.fold_job(ledger, ready)
        job.caught_up = True
        self._running_ahead = False
        self._extends_ready = True
        self.caught_up += 1
        run = self._fold if ahead.keeps_up(self.micro) else self._fold_offline
        self._job = self._pool.submit(contextvars.copy_context().run, run, ledger.snapshot(), folds, job)
        return True

    def _fold_offline(self, snapshot: Ledger, folds: tuple[Fold, ...], job: FoldJob) -> Job:
        """Extend ``job`` with the offline summarizer: the summarizer cannot keep up with the session (it
        would lag as much again, and the batch threshold would prune the tool outputs instead), so what it
        could not reach in time gets the deterministic summary, in the same rolling summary and the same
        one switch of the view. Those passes cost nothing, and their time is not the summarizer's."""
        before = len(job.results)
        ahead.offline_engine(self.micro).shadow_fold(snapshot, folds, job)
        for result in job.results[before:]:
            result.record["summarizer_input_tokens"] = result.record["summarizer_output_tokens"] = 0
        self._untimed.add(id(job))
        return job

    def _drop_ready(self, why: str) -> None:
        if self.ready is not None:
            self._spend(self.ready)
        self.ready = None
        self.discarded += 1
        log.info("Micro-compaction: a fold computed ahead was dropped (%s)", why)

    def _fold(self, snapshot: Ledger, folds: tuple[Fold, ...], job: FoldJob) -> Job:
        return self.micro.shadow_fold(snapshot, folds, job)

    def _finished_fold(self, ledger: Ledger, job: FoldJob) -> list[PassResult]:
        """A fold job finished: drop it (its base was switched meanwhile), hold it (ahead, not due yet),
        or apply it (the transcript changed under it: none, the policy decides again)."""
        drop, adopt = self._drop_running, self._adopt_running or not job.ahead
        self._drop_running = self._adopt_running = self._running_ahead = self._extends_ready = False
        if id(job) in self._untimed:
            self._untimed.discard(id(job))
        else:
            self.micro.fold_timed(job)
        if drop:
            self.discarded += 1
            self._spend(job)
            return []
        if not self.micro.applies(ledger, job):
            self.discarded += 1
            self._spend(job)
            log.info("Micro-compaction: background fold discarded, the transcript changed under it")
            return []
        if not adopt or not self.micro.adoptable(ledger, job) or not self._pays(ledger, job):
            self.ready = job  # held: a later request adopts it, or extends it first (``_due_ready``)
            return []
        return self._applied(job, self.micro.adopt_fold(ledger, job) or [])

    def _applied(self, job: FoldJob, results: list[PassResult]) -> list[PassResult]:
        """``job`` was adopted: its passes are the caller's to bill (none: the store refused them, spent)."""
        if not results:
            self._spend(job)
        for result in results:
            setattr(result, ACCOUNTED, True)
        return results

    def _spend(self, job: FoldJob) -> None:
        """``job`` is discarded: its passes' summarizer calls were made all the same (``take_spent``); a
        pass an extension carries over from the fold it extended is counted once."""
        for result in job.results:
            if not getattr(result, ACCOUNTED, False):
                setattr(result, ACCOUNTED, True)
                self.spent.append(result)

    def take_spent(self) -> list[PassResult]:
        """The passes of folds discarded since the last call: never applied, but their summarizer calls
        were made, so whoever bills the summarizer (the proxy's ``SessionBill``) counts them too."""
        spent, self.spent = self.spent, []
        return spent

    def _work(self, snapshot: Ledger, mode: str) -> Job:
        planned = self.micro.plan(snapshot, mode)
        condensed = None
        if (
            isinstance(planned, Planned)
            and planned.summary is not None
            and self.micro.needs_defrag(self.micro.counter.count_text(planned.summary))
        ):
            condensed = self.micro.condense(planned.summary)
        return planned, condensed

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
        self._job = None
        results: list[PassResult] = []
        try:
            done = job.result()
            if isinstance(done, FoldJob):
                return self._finished_fold(ledger, done)
            planned, condensed = done
            if isinstance(planned, PassResult):
                results.append(planned)
            elif isinstance(planned, Planned):
                if self.micro.still_valid(ledger, planned):
                    results.append(self.micro.commit_planned(ledger, planned))
                    defrag = self.micro.maybe_defrag(ledger, condensed)
                    if defrag is not None:
                        results.append(defrag)
                else:
                    self.discarded += 1
                    self._due += 1
                    log.info(
                        "Micro-compaction: background pass discarded, the transcript changed under it; "
                        "retrying on the current transcript"
                    )
        except Exception:
            log.exception("Micro-compaction: background pass failed unexpectedly; transcript left as it was")
        if self._due:
            self._due -= 1
            self.submit(ledger)
        return results

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
