"""When micro passes run and how far they go: one replaceable policy object per engine.

:class:`MicroPolicy` is the protocol; :class:`CadencePolicy` is the default (today's behaviour): a pass
every ``micro_compact_every_n_turns`` turns, long turns absorbed before model requests, and, with
``micro_compact_cache_ttl_seconds``, cache-aware deferral (history is rewritten when the provider's prompt
cache has gone cold anyway, or when waiting is no longer worth it, and then everything due is caught up).
A policy that folds by price replaces it by passing ``policy=`` to
:class:`~microcompact.micro.engine.MicroCompactor`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from ..config import Config
from ..telemetry import occupancy_pct

# Cache-aware catch-up: at most this many passes when a deferred cache break finally happens.
MAX_CATCH_UP_PASSES = 64


class PassMode(StrEnum):
    """What one pass absorbs: ``TURN`` whole exchanges; ``REQUEST`` the completed iterations of a long turn
    once a piece budget of them piled up; ``DRAIN`` the same without that minimum."""

    TURN = "turn"
    REQUEST = "request"
    DRAIN = "drain"


class WorkerMode(StrEnum):
    """What background mode hands the worker: one pass (``TURN``, ``REQUEST``), the fold the policy says is
    due now (``FOLD``), or that fold started before it is due and held until it is (``AHEAD``)."""

    TURN = "turn"
    REQUEST = "request"
    FOLD = "fold"
    AHEAD = "ahead"


@dataclass(frozen=True)
class FoldEstimate:
    """What folding now would do (counted tokens), for a policy that prices it: everything before the
    ``change_point`` stays (the previous marker, else the first absorbable message, is where the rewrite
    starts); ``absorbable`` is what the passes could take outside a tail of the low-water mark;
    ``old_marker`` the rolling summary the fold replaces. Folding by use: ``kept_in_use`` tokens of
    in-use iterations stay verbatim after the change point (not in ``absorbable``), and ``refetches``
    in-use iterations of ``refetched`` tokens are dropped (the working set's share of the window is full).
    """

    change_point: int
    absorbable: int
    old_marker: int
    kept_in_use: int = 0
    refetches: int = 0
    refetched: int = 0


def _no_estimate() -> FoldEstimate:
    return FoldEstimate(0, 0, 0)


@dataclass(frozen=True)
class Moment:
    """What a policy is given when asked: the transcript's size, the time, and what the session recorded.

    ``pending()`` is the size in tokens of the span the next turn pass would absorb (None: nothing to
    absorb); it is computed only when called (it syncs the engine's cursor and chooses the span)."""

    counted_tokens: int  # the transcript as counted offline (``Ledger.total``)
    prompt_tokens: int  # the calibrated estimate of the prompt the provider would bill
    at: float  # wall-clock time now (the engine's ``wall_clock``)
    turns: int  # turns ended so far in this session (this one included, at a turn's end)
    usage: tuple[tuple[int, int], ...]  # what the session recorded: (counted, provider-reported) per request
    pending: Callable[[], int | None]
    estimate: Callable[[], FoldEstimate] = _no_estimate  # computed only when called, like ``pending``


@dataclass(frozen=True)
class Fold:
    """Passes to run now: up to ``passes`` in a row of ``mode`` ("turn": whole exchanges; "request": the
    completed iterations of a long turn once a piece budget of them piled up; "drain": the same without
    that minimum), stopping at the first that absorbs nothing, or once the counted
    transcript is at most ``low_water`` tokens. ``passes=MAX_CATCH_UP_PASSES``: everything that is due.
    ``tail_tokens`` lets a fold reach into the configured tail, down to the policy's low-water mark."""

    mode: PassMode
    passes: int = 1
    low_water: int | None = None
    tail_tokens: int | None = None  # the protected tail for these passes (None: the configured one)
    # The tail's minimum in messages for these passes (None: ``min_tail_messages``): a fold computed ahead
    # keeps fewer, since the messages added before it is adopted will be the tail of the view it switches to.
    tail_messages: int | None = None


@dataclass(frozen=True)
class FoldPlan:
    """The fold a policy planned for the worker: its passes, and whether they run with the offline summarizer
    (the summarizer cannot keep up with the session). Empty: nothing planned."""

    folds: tuple[Fold, ...] = ()
    offline: bool = False


class MicroPolicy(Protocol):
    """What a micro schedule can tell the engine and the background worker (all of it cheap, never raising).
    :class:`CadencePolicy` answers all of it; a replacement may extend it and override what it decides.

    Inline and background:

    - ``turn_ended(moment, completed)``: after each turn, whether one turn pass runs now.
    - ``before_request(moment)``: before a model request, the passes to run now, in order (empty: none).
    - ``background_mode(moment, busy)``: the same decision in background mode, where one job at a time
      runs on a worker: what to start now, or None (``busy``: a job is still running).
    - ``requested(at)``: a model request is being made now (after the passes ``before_request`` or
      ``background_mode`` asked for); ``at`` is the wall-clock time.
    - ``memory()`` / ``restore(memory)``: the policy's state as JSON values, carried to the next process
      that continues a stored session (``restore`` may raise TypeError/ValueError on a malformed value).

    Folds computed on the worker (a policy that never answers ``FOLD`` or ``AHEAD`` keeps the defaults):

    - ``take_planned()``: the fold ``background_mode`` or ``idle_mode`` planned, taken once.
    - ``idle_mode(moment)``: the client's turn just ended; ``AHEAD`` to start a fold now, else None.
    - ``adoption_pays(moment, removed_counted, extended)``: switch the view now to a finished fold that
      removes ``removed_counted`` counted tokens (False: hold it, or extend it first).
    - ``folds_to_run(moment, ahead, keep)``: the passes of a fold adopted ``ahead`` requests from now.
    - ``fold_timed(seconds, removed_tokens)``: a fold's passes took that long for what they removed.
    - ``keeps_up()``: the summarizer folds a request's growth faster than requests come.
    - ``last_forced()``: the last decision was the hard limit's (a fold that must land now).

    What a fold keeps:

    - ``folds_by_use()``: a fold keeps the iterations the agent still uses verbatim
      (:mod:`.working_set`) and its low-water mark follows them; False: by age alone.
    """

    def turn_ended(self, moment: Moment, completed: bool) -> bool: ...

    def before_request(self, moment: Moment) -> tuple[Fold, ...]: ...

    def background_mode(self, moment: Moment, busy: bool) -> WorkerMode | None: ...

    def requested(self, at: float) -> None: ...

    def memory(self) -> dict[str, Any]: ...

    def restore(self, memory: dict[str, Any]) -> None: ...

    def take_planned(self) -> FoldPlan: ...

    def idle_mode(self, moment: Moment) -> WorkerMode | None: ...

    def adoption_pays(self, moment: Moment, removed_counted: int, extended: bool = False) -> bool: ...

    def folds_to_run(self, moment: Moment, ahead: int = 0, keep: int = 0) -> tuple[Fold, ...]: ...

    def fold_timed(self, seconds: float, removed_tokens: int) -> None: ...

    def keeps_up(self) -> bool: ...

    def last_forced(self) -> bool: ...

    def folds_by_use(self) -> bool: ...


class CadencePolicy:
    """The default: every N turns, long turns before requests, cache-aware deferral when configured."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.cfg = config.compression
        self.last_request_at: float | None = None  # wall-clock time of the last model request
        self.deferred = 0  # turn passes deferred while the provider's cache was warm

    @property
    def cache_aware(self) -> bool:
        return bool(self.cfg.micro_compact_cache_ttl_seconds)  # unset (None) or 0: off

    def turn_ended(self, moment: Moment, completed: bool) -> bool:
        if not completed or moment.turns % max(1, self.cfg.micro_compact_every_n_turns):
            return False
        if self.cache_aware and self._cache_warm(moment.at) and not self._worth_a_cache_break(moment):
            self.deferred += 1  # runs when the cache has gone cold anyway (see before_request)
            return False
        return True

    def before_request(self, moment: Moment) -> tuple[Fold, ...]:
        """Without cache awareness: one request pass. With it: nothing while the cache is warm; once the
        prefix breaks (cold cache, or waiting is no longer worth it), make the break count by absorbing
        everything that is due, so breaks stay rare and large."""
        if not self.cache_aware:
            return (Fold(PassMode.REQUEST),)
        if self._cache_warm(moment.at) and not self._worth_a_cache_break(moment):
            return ()
        deferred, self.deferred = self.deferred, 0
        return Fold(PassMode.TURN, deferred), Fold(PassMode.REQUEST, MAX_CATCH_UP_PASSES)

    def background_mode(self, moment: Moment, busy: bool) -> WorkerMode | None:
        """The inline schedule, one pass at a time: a turn pass deferred meanwhile goes first once it may."""
        if busy:
            return None
        if not self.cache_aware:
            return WorkerMode.REQUEST
        if self._cache_warm(moment.at) and not self._worth_a_cache_break(moment):
            return None
        mode = WorkerMode.TURN if self.deferred else WorkerMode.REQUEST
        self.deferred = max(0, self.deferred - 1)
        return mode

    def requested(self, at: float) -> None:
        self.last_request_at = at

    def memory(self) -> dict[str, Any]:
        return {}  # the cache's warmth is not worth carrying: another process's request broke it anyway

    def restore(self, memory: dict[str, Any]) -> None:
        return None

    # ------------------------------------------------------------------ folds on the worker: none planned

    def take_planned(self) -> FoldPlan:
        return FoldPlan()

    def idle_mode(self, moment: Moment) -> WorkerMode | None:
        return None

    def adoption_pays(self, moment: Moment, removed_counted: int, extended: bool = False) -> bool:
        return True  # a schedule that does not price: a finished fold is always worth switching to

    def folds_to_run(self, moment: Moment, ahead: int = 0, keep: int = 0) -> tuple[Fold, ...]:
        return ()

    def fold_timed(self, seconds: float, removed_tokens: int) -> None:
        return None

    def keeps_up(self) -> bool:
        return True  # a schedule that does not measure the summarizer: it keeps up

    def last_forced(self) -> bool:
        return False

    def folds_by_use(self) -> bool:
        """By age alone: the cadence schedule absorbs whole exchanges as they leave the tail."""
        return False

    def _cache_warm(self, now: float) -> bool:
        """True while the provider's prompt cache still holds the last request (within the TTL)."""
        ttl = self.cfg.micro_compact_cache_ttl_seconds
        return ttl is not None and ttl > 0 and self.last_request_at is not None and now - self.last_request_at <= ttl

    def _worth_a_cache_break(self, moment: Moment) -> bool:
        """Occupancy past ``micro_compact_max_occupancy_pct``, or a pending span that meets the reclaim gate."""
        occupancy = occupancy_pct(moment.prompt_tokens, self.config.threshold_tokens())
        if occupancy is not None and occupancy >= self.cfg.micro_compact_max_occupancy_pct:
            return True
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate:
            pending = moment.pending()
            return pending is not None and pending >= gate
        return False
