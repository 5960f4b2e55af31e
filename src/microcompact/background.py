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

Not thread-safe by itself: :class:`~microcompact.session.Session` calls ``submit`` and ``collect`` under its
lock. ``wait`` needs no lock (it only waits for the running job), so a thread can wait without holding
the session up; the worker never takes the session's lock, so waiting under it cannot deadlock either.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from .micro import Condensed, Fold, FoldJob, MicroCompactor, PassResult, Planned
from .tokens import Ledger

log = logging.getLogger("microcompact")


Job = tuple[Planned | PassResult | None, Condensed | None] | FoldJob


class BackgroundPasses:
    def __init__(self, micro: MicroCompactor) -> None:
        self.micro = micro
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microcompact-pass")
        self._job: Future[Job] | None = None
        self._due = 0
        self.discarded = 0

    @property
    def busy(self) -> bool:
        return self._job is not None

    def submit(self, ledger: Ledger, mode: str = "turn") -> None:
        """Start a pass on a snapshot; if one is running, remember that a turn pass is due."""
        if self._job is not None:
            if mode == "turn":
                self._due += 1
            return
        self.micro.sync(ledger)
        if mode == "fold":
            folds = self.micro.planned_folds()
            if folds:
                self._job = self._pool.submit(contextvars.copy_context().run, self._fold, ledger.snapshot(), folds)
            return
        self._job = self._pool.submit(contextvars.copy_context().run, self._work, ledger.snapshot(), mode)

    def _fold(self, snapshot: Ledger, folds: tuple[Fold, ...]) -> Job:
        return self.micro.shadow_fold(snapshot, folds)

    def _apply_fold(self, ledger: Ledger, job: FoldJob) -> list[PassResult]:
        """The fold's results, or none when the transcript changed under it (the policy decides again)."""
        results = self.micro.adopt_fold(ledger, job)
        if results is None:
            self.discarded += 1
            log.info("Micro-compaction: background fold discarded, the transcript changed under it")
            return []
        return results

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
                return self._apply_fold(ledger, done)
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
