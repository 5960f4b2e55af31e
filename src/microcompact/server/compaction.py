"""The engine side of one request, run on a worker thread (it syncs, compacts and reads the store).

Before the forward (:meth:`Compaction.prepare`): route the client's full history to its session, run
``before_request`` (inline batch compaction only when the hard limit forces it; micro passes go to the
session's background worker) and build the outgoing messages. After the response
(:meth:`Compaction.finish`): calibrate with the reported prompt tokens and, when a person spoke, end the
previous turn (``finalize_turn``), which starts that turn's pass in the background.

When the store or the engine fails, the request still goes out, uncompacted if need be, and the reason is
returned for the ``X-Microcompact-Degraded`` header; the failure is logged once per reason change.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import Outcome
from ..identity import DIGEST_KEY, digest, hid_of
from ..messages import Message, TranscriptError
from ..router import SessionRouter
from ..session import Session
from ..store import StoreError
from .errors import BadRequest
from .metrics import Metrics
from .provider import Provider
from .view import covered, outgoing_messages, spelled

log = logging.getLogger("microcompact")

SUMMARIZER_FAILURES = frozenset({Outcome.SUMMARIZE_FAILED, Outcome.AUTH_FAILED, Outcome.ERROR})
# Sessions remembered per key for count_tokens (which reads the last view and changes nothing).
RECENT_KEYS = 1024


@dataclass
class Prepared:
    """What the engine made of one request."""

    key: str
    messages: list[Message]  # the outgoing messages (the client's own when nothing changed)
    session: Session | None = None
    human: bool = False
    counted_tokens: int = 0  # the view's size as the session counts it (for calibration)
    occupancy_pct: float | None = None
    degraded: str | None = None
    outcomes: list[str] = field(default_factory=list)


class Compaction:
    def __init__(self, router: SessionRouter, metrics: Metrics) -> None:
        self.router = router
        self.metrics = metrics
        self._recent: OrderedDict[str, Session] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._last_failure: str | None = None

    def prepare(self, provider: Provider, body: dict[str, Any], key: str, history: list[Message]) -> Prepared:
        """Sync, compact and build the outgoing messages (raises BadRequest for a message the session
        refuses; any other failure forwards the client's messages with a degraded reason)."""
        try:
            with self.router.lock(key):
                routed = self.router.route(key, history, provider.convert)
                session = routed.session
                results = session.before_request()
                view = session.transcript
                prepared = Prepared(
                    key,
                    [],
                    session,
                    human=routed.sync.human and routed.sync.matched > 0,
                    counted_tokens=session.tokens,
                    occupancy_pct=session.occupancy_pct(),
                    outcomes=[str(r.outcome) for r in results],
                )
                if not session.flush():
                    prepared.degraded = "store-write-failed"
        except TranscriptError as exc:
            raise BadRequest(str(exc)) from None
        except StoreError as exc:
            return self._fall_back(key, history, "store-unavailable", exc)
        except Exception as exc:
            return self._fall_back(key, history, "engine-error", exc)
        if prepared.degraded is None and any(o in SUMMARIZER_FAILURES for o in prepared.outcomes):
            prepared.degraded = "summarizer-failed"
        try:
            prepared.messages = outgoing_messages(provider, body, history, view)
        except Exception as exc:
            return self._fall_back(key, history, "engine-error", exc)
        self._remember(key, session)
        self._succeeded()
        return prepared

    def finish(self, prepared: Prepared, prompt_tokens: int | None) -> None:
        """After the response: calibrate, and end the previous turn when a person spoke. Never raises."""
        session = prepared.session
        if session is None:
            return
        try:
            with self.router.lock(prepared.key):
                if prompt_tokens:
                    session.counter.calibrate(prepared.counted_tokens, prompt_tokens)
                outcomes = [str(r.outcome) for r in session.finalize_turn()] if prepared.human else []
            self.metrics.passes_done(outcomes)
        except Exception:
            log.exception("Proxy: the follow-up of a request to session %s failed", session.session_id)

    def view_for_count(
        self, provider: Provider, body: dict[str, Any], key: str, history: list[Message]
    ) -> list[Message]:
        """The messages a count_tokens request should count: the last compacted view of this conversation
        when ``history`` continues it, then its newer messages as they are. Changes no session."""
        with self._recent_lock:
            session = self._recent.get(key)
        if session is None:
            return history
        view = session.transcript
        upto = covered(view)
        if upto > len(history):
            return history
        for m in view:
            hid = hid_of(m)
            if hid is not None and m.get(DIGEST_KEY) != digest(history[hid]):
                return history
        return provider.normalize(body, spelled(provider, history, view) + list(history[upto:]))

    # ------------------------------------------------------------------ internals

    def _remember(self, key: str, session: Session) -> None:
        with self._recent_lock:
            self._recent[key] = session
            self._recent.move_to_end(key)
            while len(self._recent) > RECENT_KEYS:
                self._recent.popitem(last=False)

    def _fall_back(self, key: str, history: Sequence[Message], reason: str, exc: Exception) -> Prepared:
        failure = f"{reason}: {type(exc).__name__}: {exc}"
        if failure != self._last_failure:
            log.error("Proxy: forwarding session %s uncompacted (%s)", key, failure)
            self._last_failure = failure
        return Prepared(key, list(history), degraded=reason)

    def _succeeded(self) -> None:
        if self._last_failure is not None:
            log.warning("Proxy: compaction works again")
            self._last_failure = None
