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
from typing import Any, Protocol

from ..config import Config
from ..telemetry import occupancy_pct

# Cache-aware catch-up: at most this many passes when a deferred cache break finally happens.
MAX_CATCH_UP_PASSES = 64


@dataclass(frozen=True)
class FoldEstimate:
    """What folding now would do (counted tokens), for a policy that prices it: everything before the
    ``change_point`` stays (the previous marker, else the first absorbable message, is where the rewrite
    starts); ``absorbable`` is what the passes could take outside a tail of the low-water mark;
    ``old_marker`` the rolling summary the fold replaces."""

    change_point: int
    absorbable: int
    old_marker: int


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

    mode: str
    passes: int = 1
    low_water: int | None = None
    tail_tokens: int | None = None  # the protected tail for these passes (None: the configured one)
    # The tail's minimum in messages for these passes (None: ``min_tail_messages``): a fold computed ahead
    # keeps fewer, since the messages added before it is adopted will be the tail of the view it switches to.
    tail_messages: int | None = None


class MicroPolicy(Protocol):
    """What a micro scheduling policy must implement (all of it cheap and never raising).

    - ``turn_ended(moment, completed)``: after each turn, whether one turn pass runs now.
    - ``before_request(moment)``: before a model request, the passes to run now, in order (empty: none).
    - ``background_mode(moment, busy)``: the same decision in background mode, where one pass at a time
      runs on a worker: the mode of the pass to start now, or None (``busy``: one is still running).
    - ``requested(at)``: a model request is being made now (after the passes ``before_request`` or
      ``background_mode`` asked for); ``at`` is the wall-clock time.
    - ``memory()`` / ``restore(memory)``: the policy's state as JSON values, carried to the next process
      that continues a stored session (``restore`` may raise TypeError/ValueError on a malformed value).
    """

    def turn_ended(self, moment: Moment, completed: bool) -> bool: ...

    def before_request(self, moment: Moment) -> tuple[Fold, ...]: ...

    def background_mode(self, moment: Moment, busy: bool) -> str | None: ...

    def requested(self, at: float) -> None: ...

    def memory(self) -> dict[str, Any]: ...

    def restore(self, memory: dict[str, Any]) -> None: ...


class CadencePolicy:
    """The default: every N turns, long turns before requests, cache-aware deferral when configured."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.cfg = config.compression
        self.last_request_at: float | None = None  # wall-clock time of the last model request
        self.deferred = 0  # turn passes deferred while the provider's cache was warm

    @property
    def cache_aware(self) -> bool:
        return self.cfg.micro_compact_cache_ttl_seconds is not None

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
            return (Fold("request"),)
        if self._cache_warm(moment.at) and not self._worth_a_cache_break(moment):
            return ()
        deferred, self.deferred = self.deferred, 0
        return Fold("turn", deferred), Fold("request", MAX_CATCH_UP_PASSES)

    def background_mode(self, moment: Moment, busy: bool) -> str | None:
        """The inline schedule, one pass at a time: a turn pass deferred meanwhile goes first once it may."""
        if busy:
            return None
        if not self.cache_aware:
            return "request"
        if self._cache_warm(moment.at) and not self._worth_a_cache_break(moment):
            return None
        mode = "turn" if self.deferred else "request"
        self.deferred = max(0, self.deferred - 1)
        return mode

    def requested(self, at: float) -> None:
        self.last_request_at = at

    def memory(self) -> dict[str, Any]:
        return {}  # the cache's warmth is not worth carrying: another process's request broke it anyway

    def restore(self, memory: dict[str, Any]) -> None:
        return None

    def _cache_warm(self, now: float) -> bool:
        """True while the provider's prompt cache still holds the last request (within the TTL)."""
        ttl = self.cfg.micro_compact_cache_ttl_seconds
        return ttl is not None and self.last_request_at is not None and now - self.last_request_at <= ttl

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
