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
import copy
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .events import Event, apply_event
from .messages import Message
from .micro import Condensed, Fold, MicroCompactor, PassResult, Planned, RollingSummary
from .tokens import Ledger

log = logging.getLogger("microcompact")


@dataclass
class FoldJob:
    """A whole fold computed on a shadow engine: the events to commit and apply, and the state after them."""

    base: list[Message]  # the transcript the fold ran on (its messages must still open the transcript)
    base_summary: str
    base_marker: int | None
    events: list[Event] = field(default_factory=list)
    results: list[PassResult] = field(default_factory=list)
    state: RollingSummary | None = None
    largest_pass_tokens: int = 0
    summarizer_ms: float = 0.0


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
            take = getattr(self.micro.policy, "take_planned", None)
            folds: tuple[Fold, ...] = take() if take is not None else ()
            if folds:
                self._job = self._pool.submit(self._fold, ledger.snapshot(), folds)
            return
        self._job = self._pool.submit(self._work, ledger.snapshot(), mode)

    def _fold(self, snapshot: Ledger, folds: tuple[Fold, ...]) -> Job:
        """Every pass of ``folds`` on a shadow engine over ``snapshot`` (the real one is untouched)."""
        st = self.micro.state
        job = FoldJob(list(snapshot.messages), st.text, st.marker_index)
        shadow = copy.copy(self.micro)
        shadow.state = copy.deepcopy(st)
        shadow.summarizer_ms_total = 0.0

        def record(event: Event, msgs: list[Message]) -> Any:
            job.events.append(event)

        shadow.commit = record
        for fold in folds:
            job.results += shadow.catch_up(snapshot, fold)
        job.state = shadow.state
        job.largest_pass_tokens = shadow.largest_pass_tokens
        job.summarizer_ms = shadow.summarizer_ms_total
        return job

    def _apply_fold(self, ledger: Ledger, job: FoldJob) -> list[PassResult]:
        """Commit and apply the fold's events, in order, if the transcript still opens with what the fold
        ran on and the rolling state is the one it started from; else drop it (the policy decides again)."""
        msgs = ledger.messages
        st = self.micro.state
        unchanged = len(msgs) >= len(job.base) and all(a is b for a, b in zip(msgs, job.base, strict=False))
        if not unchanged or st.text != job.base_summary or st.marker_index != job.base_marker:
            self.discarded += 1
            log.info("Micro-compaction: background fold discarded, the transcript changed under it")
            return []
        for event in job.events:
            if not self.micro.commit_event(event, ledger.messages):
                return []  # the store refused: memory stays as it was (the shadow's passes are lost)
            apply_event(ledger, event)
        if job.state is not None:
            job.state.turns = self.micro.state.turns  # turns ended meanwhile still count
            self.micro.state = job.state
        self.micro.largest_pass_tokens = max(self.micro.largest_pass_tokens, job.largest_pass_tokens)
        self.micro.summarizer_ms_total += job.summarizer_ms
        return job.results

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
