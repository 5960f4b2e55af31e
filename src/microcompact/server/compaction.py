"""The engine side of one request, run on a worker thread (it syncs, compacts and reads the store).

Before the forward (:meth:`Compaction.prepare`): route the client's full history to its session, run
``before_request`` (batch compaction only when the hard limit forces it; micro passes inline with the
extractive summarizer, on the session's background worker with a model one: ``server/run.py``,
``background_passes``) and build the outgoing messages. After the response: calibrate with the reported
prompt tokens and, when a person spoke, end the previous turn (``finalize_turn``), which runs that turn's
pass (or starts it on the worker). That follow-up is queued the moment the response ends
(:meth:`Compaction.answered`) and run on a worker thread (:meth:`Compaction.follow_up`), or first thing by
the conversation's next request if it comes sooner: a fast client never gets ahead of its turn's end. A
background pass that finished by then is applied there too (committed and applied to the session's
transcript: the next request's view shows it, one switch of the view as before), so that request does not
pay for its store writes.

When the store or the engine fails, the request still goes out, uncompacted if need be, and the reason is
returned for the ``X-Microcompact-Degraded`` header; the failure is logged once per reason change.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..bill.audit_bill import AuditLine
from ..bill.cache_usage import UsageReport
from ..bill.cost_line import CostLine
from ..bill.model_prices import unpriced
from ..bill.pricing import CachePricing
from ..bill.proxy_bills import ProxyBills
from ..config import Config
from ..events import Outcome
from ..identity import DIGEST_KEY, Forms, PrefixDigests, digest, digest_memo, hid_of
from ..messages import Message, TranscriptError
from ..recall.watch import RecallLine, RecallWatches
from ..recall_tools import RecallNotes
from ..redact import error_text
from ..router import SessionRouter
from ..session import Session
from ..store import StoreError, _SQLStore
from ..store.request_figures import RequestFigures
from ..telemetry import telemetry_log
from ..wire import Upstream, WireApi
from .audit import Audit, AuditStep
from .errors import BadRequest
from .fixed_blocks import FixedBlocks
from .metrics import Metrics
from .model_windows import ModelWindows
from .provider import Provider, identity_form
from .session_key import fingerprint_of
from .ui.record import RequestRecorder
from .view import covered, outgoing_messages, spelled, unchanged

log = logging.getLogger("microcompact")

MAX_SHAPES = 10_000  # keys whose last view shape is kept for fold detection (oldest dropped first)
SUMMARIZER_FAILURES = frozenset({Outcome.SUMMARIZE_FAILED, Outcome.AUTH_FAILED, Outcome.ERROR})


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
    folded: bool = False  # the view changed before its end since this key's last request (a fold)
    api: Upstream | None = None  # the provider's upstream: which prices apply
    wire: WireApi | None = None  # its request format: which summary wire (upstream_summary)
    model: str | None = None  # the request's model, and the client's user agent (set by the app): the page
    client: str | None = None
    audit: AuditStep | None = None  # serve --audit: the client's request went up, this is what it would have been
    streamed: bool = False  # the answer is a stream (its usage comes after its headers; set by the app)


@dataclass(frozen=True)
class Answered:
    """A prepared request whose response is over: what the upstream reported, queued for its follow-up."""

    prepared: Prepared
    prompt_tokens: int | None  # the prompt size the upstream reported
    usage: UsageReport | None  # what the upstream reported about its cache
    full_ratio: float  # the client's request over the forwarded one, in bytes (the counterfactual's scale)
    actual: UsageReport | None = None  # audited: the client's request's usage (``usage`` is the view's)
    line: CostLine | None = None  # its figures, as billed when its response ended
    audited: AuditLine | None = None  # audited: what went up and what its view would have been, billed


def stable(history: list[Message]) -> list[Message]:
    """The history as the session sees it: what each message says, however the client spelled it this time
    (text content without the whitespace around it: aider restores its history from a Markdown file,
    every message with a newline more or less than it sent)."""
    return [_stable(m) for m in history]


def _stable(message: Any) -> Any:
    return _trimmed(identity_form(message))


def _trimmed(message: Any) -> Any:
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        text = message["content"]
        if text != text.strip():
            return {**message, "content": text.strip()}
    return message


def new_parts(view: Sequence[Message], matched: int) -> list[Message]:
    """The messages of ``view`` that came with this request: those of client messages past ``matched``."""
    return [m for m in view if (hid := hid_of(m)) is not None and hid >= matched]


def _size(messages: Sequence[Message]) -> int | None:
    try:
        return len(orjson.dumps(list(messages)))
    except (TypeError, orjson.JSONEncodeError):
        return None


def larger(outgoing: Sequence[Message], history: Sequence[Message], client: int | None = None) -> bool:
    """True when the compacted messages would be larger than the client's own (a pass that replaced a
    3-character "Ok." by a marker of hundreds): then the client's are forwarded. ``client``: the size of
    ``history`` when it is known already."""
    out, client = _size(outgoing), client if client is not None else _size(history)
    return out is not None and client is not None and out > client


class Compaction:
    def __init__(self, router: SessionRouter, metrics: Metrics, audit: bool = False) -> None:
        self.router = router
        self.metrics = metrics
        self.audit = Audit(audit, metrics)  # serve --audit (server/audit.py)
        # The session each key's last request went to, for count_tokens; weak, so a session the router
        # closed and let go of is not kept alive here.
        self._recent: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._recent_lock = threading.Lock()
        self._last_failure: str | None = None
        self._pending: dict[str, list[Answered]] = {}  # answered requests whose follow-up has not run, by key
        self._pending_lock = threading.Lock()
        self._shapes: dict[str, list[str]] = {}  # each key's last view, one digest per message (fold detection)
        store = router.store  # the bills' totals count the cost lines it holds, whoever answered them
        self.bills = ProxyBills(RequestFigures(store) if isinstance(store, _SQLStore) else None)
        self._prices: dict[tuple[int, str | None, str | None], tuple[Config, CachePricing | None, str]] = {}
        self.windows = ModelWindows(router.config)  # the tokenizer, loaded now
        router.warm()  # and the summarizer's SDK and client: a conversation's first request waits for neither
        self.fixed_blocks = FixedBlocks()
        self.prefixes = PrefixDigests()  # each key's last history, hashed: a continuation digests its new part
        self.recall_notes = RecallNotes()  # markers name the recall tools when a request lists them
        self.recorder = RequestRecorder()  # each answered request's figures, in the store (server/ui)
        self.recall = RecallWatches()  # each reply's recall of what tools showed, read in the follow-up

    def prepare(
        self, provider: Provider, body: dict[str, Any], key: str, history: list[Message], model: str | None = None
    ) -> Prepared:
        """Sync, compact and build the outgoing messages (raises BadRequest for a message the session
        refuses; any other failure forwards the client's messages with a degraded reason). ``model``: the
        request's model where the body does not name it (Gemini's is in the path)."""
        if not history:  # nothing to compact; the upstream says what it thinks of an empty conversation
            return Prepared(key, [])
        if model is None and isinstance(body.get("model"), str):
            model = body["model"]
        with digest_memo():  # the key's digests and the sync's are of the same objects: computed once
            return self._prepare(provider, body, key, history, model)

    def _prepare(
        self, provider: Provider, body: dict[str, Any], key: str, history: list[Message], model: str | None
    ) -> Prepared:
        try:
            identity = Forms(history, _stable)  # each made when read: a continued history's known part is not
            asked = key
            owner = fingerprint_of(key) or ""
            incoming, client_size = self.prefixes.digests_and_size(asked, history, identity)
            key, order = self.fixed_blocks.resolve(key, incoming, owner)  # the conversation it continues
            with self.router.lock(key):
                self._run_pending(key)
                config = self.windows.config_for(provider.fixed_fields, body, history)
                routed = self.router.route(key, identity.reordered(order, incoming), provider.convert, config)
                session, matched = routed.session, routed.sync.matched
                self._refresh_bill(session.session_id)
                results = session.before_request()
                self._bill_summarizer(session, provider.name, model, results)
                view = self.recall_notes.annotate(body, session.store, session.session_id, session.transcript)
                prepared = Prepared(
                    key,
                    [],
                    session,
                    human=routed.sync.ends_turn,
                    counted_tokens=session.tokens,
                    occupancy_pct=session.occupancy_pct(),
                    outcomes=[str(r.outcome) for r in results],
                    api=provider.name,
                    wire=provider.wire,
                    model=model,
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
            prepared.messages = outgoing_messages(provider, body, history, view, order)
        except Exception as exc:
            return self._fall_back(key, history, "engine-error", exc)
        problem = None if unchanged(history, prepared.messages) else provider.view_problem(prepared.messages)
        if problem is not None:
            self._failed("view-invalid", key, ValueError(problem))
            prepared.messages, prepared.degraded = list(history), "view-invalid"
            self.recall.sent(session, view, new_parts(view, matched), whole=True)
            return prepared
        whole = not unchanged(history, prepared.messages) and larger(prepared.messages, history, client_size)
        if whole:
            prepared.messages = list(history)  # a pass never makes what is sent larger than what it replaces
        self.recall.sent(session, view, new_parts(view, matched), whole)
        prepared.folded = self._view_changed(key, view) and prepared.messages is not history
        self._remember(key, session)
        if asked != key:  # a count sent under the key the client's request had finds this conversation too
            self._remember(asked, session)
        self._succeeded()
        return prepared

    def answered(
        self,
        prepared: Prepared,
        prompt_tokens: int | None,
        usage: UsageReport | None = None,
        full_ratio: float = 1.0,
    ) -> CostLine | None:
        """The response to ``prepared`` is over: bill it (its figures count from now on: the headers of a
        response read whole before they go out carry them) and queue its follow-up (cheap; call it at once).
        ``full_ratio``: the client's request over the forwarded one, in bytes. Its cost line."""
        if prepared.session is None:
            return None
        actual = None
        if prepared.audit is not None:  # the session goes by what its view would have been reported with
            actual, full_ratio = usage, 1 / prepared.audit.ratio if prepared.audit.ratio > 0 else 1.0
            try:
                prompt_tokens, usage = self.audit.would_have(prepared.audit, prompt_tokens, usage)
            except Exception as exc:  # the answer is on its way to the client: nothing raises here
                self._failed("audit-error", prepared.key, exc)
                actual = prompt_tokens = usage = None
        line, audited = self._charge(prepared, usage, full_ratio, actual)
        with self._pending_lock:
            self._pending.setdefault(prepared.key, []).append(
                Answered(prepared, prompt_tokens, usage, full_ratio, actual, line, audited)
            )
        return line

    def pricing(self, prepared: Prepared) -> tuple[CachePricing | None, str]:
        """The prices of the request's model (None: unknown) and what names them; looked up once per config,
        API and model (this runs on the event loop, twice a request)."""
        assert prepared.session is not None
        config = prepared.session.config
        key = (id(config), prepared.api, prepared.model)
        known = self._prices.get(key)
        if known is not None and known[0] is config:
            return known[1], known[2]
        pricing = config.cache_pricing(prepared.api, prepared.model)
        label = pricing.name if pricing is not None else unpriced(prepared.model)
        if len(self._prices) >= MAX_SHAPES:
            self._prices.clear()
        self._prices[key] = (config, pricing, label)
        return pricing, label

    def _charge(
        self, prepared: Prepared, usage: UsageReport | None, full_ratio: float, actual: UsageReport | None
    ) -> tuple[CostLine, AuditLine | None]:
        """Price the answered request as the upstream reported it, against the uncompacted counterfactual
        (audited, ``actual``: the client's request as reported, and the view's would-have usage beside it);
        one cost line, logged, and counted in the metrics."""
        assert prepared.session is not None
        pricing, label = self.pricing(prepared)
        sid, audited = prepared.session.session_id, None
        if actual is not None and usage is not None and pricing is not None:
            line, audited = self.audit.charge(self.bills, sid, pricing, actual, usage, prepared.occupancy_pct)
        else:
            usage = actual if actual is not None else usage  # an unpriced audit: what went up, counted
            line = self.bills.charge_request(
                sid,
                pricing,
                label,
                usage,
                full_ratio if actual is None else 1.0,
                prepared.folded,
                prepared.occupancy_pct,
            )
        self.metrics.figures(line)
        telemetry_log.info("%s", line.text())
        return line, audited

    def follow_up(self, key: str) -> None:
        """Run the queued follow-ups of ``key`` (unless its next request already did). Never raises."""
        try:
            with self.router.lock(key):
                self._run_pending(key)
        except Exception as exc:  # the key could not be taken: the conversation's next request runs it
            log.warning("Proxy: the follow-up of session %s waits for its next request (%s)", key, type(exc).__name__)

    def _run_pending(self, key: str) -> None:
        """Under the key's lock: calibrate, and end the previous turn when a person spoke, for each answered
        request of ``key`` in order."""
        with self._pending_lock:
            queued = self._pending.pop(key, [])
        for answer in queued:
            prepared, usage = answer.prepared, answer.usage
            assert prepared.session is not None
            session = self.router.live(prepared.session)  # shared store: the object the lock left current
            try:
                if prepared.folded:
                    session.note_fold()  # before its usage: that tells whether the fold was paid for
                if answer.prompt_tokens:
                    session.record_usage(
                        answer.prompt_tokens,
                        prepared.counted_tokens,
                        cache_read_tokens=usage.cache_read_tokens if usage else None,
                        cache_write_tokens=usage.cache_write_tokens if usage else None,
                    )
                self._measure_recall(prepared.session, session.session_id)
                self._collected(session, prepared, session.drain(0))  # a pass done already: not next request's
                if prepared.human:
                    self._collected(session, prepared, session.finalize_turn())
                if usage is not None and usage.turn_over:
                    session.fold_ahead()  # an idle gap may follow: have the fold ready after it
                self.recorder.record(session, answer, answer.audited)
            except Exception:
                log.exception("Proxy: the follow-up of a request to session %s failed", session.session_id)

    def _collected(self, session: Session, prepared: Prepared, results: Sequence[Any]) -> None:
        """Count passes a follow-up applied (their summarizer calls billed)."""
        self._bill_summarizer(session, prepared.api, prepared.model, results)
        self.metrics.passes_done([str(r.outcome) for r in results])

    def view_for_count(
        self, provider: Provider, body: dict[str, Any], key: str, history: list[Message]
    ) -> list[Message]:
        """The messages a count_tokens request should count: the last compacted view of this conversation
        when ``history`` continues it, then its newer messages as they are. Changes no session."""
        with self._recent_lock:
            session = self._recent.get(key)
        if session is None or not self.audit.rewrites(session):  # audited: counted as it goes up
            return history
        view = session.transcript
        upto = covered(view)
        if upto > len(history):
            return history
        for m in view:
            hid = hid_of(m)
            if hid is not None and m.get(DIGEST_KEY) != digest(identity_form(history[hid])):
                return history
        return provider.normalize(body, spelled(provider, history, view) + list(history[upto:]))

    # ------------------------------------------------------------------ the provider's cache

    def _view_changed(self, key: str, view: Sequence[Message]) -> bool:
        """True when ``view`` differs from this key's previous view before that one's end: the prefix the
        provider cached was rewritten (a fold, a prune, a cut)."""
        shape = [str(m.get(DIGEST_KEY) or digest(m)) for m in view]
        with self._recent_lock:
            previous = self._shapes.get(key)
            if len(self._shapes) >= MAX_SHAPES and key not in self._shapes:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[key] = shape
        return previous is not None and shape[: len(previous)] != previous

    def _measure_recall(self, conversation: Session, session_id: str) -> None:
        """Log the recall of each reply that used what a tool showed (its counts only)."""
        for measured in self.recall.settle(conversation):
            if measured.targets:
                telemetry_log.info("%s", RecallLine.of(session_id, measured).text())

    def _bill_summarizer(self, session: Session, api: str | None, model: str | None, results: Sequence[Any]) -> None:
        """Count the summarizer calls of ``results`` (passes just applied) in the session's spent figure, and
        those of background folds discarded since (made all the same)."""
        self.recorder.passes(session, api, model, results)  # the applied ones, for the request's figures
        results = [*results, *session.take_spent()]
        records = [getattr(r, "record", None) or {} for r in results]
        tokens_in = sum(int(r.get("summarizer_input_tokens") or 0) for r in records)
        tokens_out = sum(int(r.get("summarizer_output_tokens") or 0) for r in records)
        if not tokens_in and not tokens_out:
            return
        pricing = session.config.cache_pricing(api, model)
        if pricing is not None:
            self.bills.charge_summarizer(session.session_id, pricing, tokens_in, tokens_out)

    # ------------------------------------------------------------------ internals

    def _refresh_bill(self, session_id: str) -> None:
        """Bring the conversation's totals up to the store (cost lines another process, or this one before
        a restart, stored); a store that cannot be read leaves them as they were (the next request reads on)."""
        try:
            self.bills.refresh(session_id)
        except StoreError as exc:
            log.warning("Proxy: the stored figures of session %s were not read (%s)", session_id, exc)

    def _remember(self, key: str, session: Session) -> None:
        with self._recent_lock:
            self._recent[key] = session

    def _fall_back(self, key: str, history: Sequence[Message], reason: str, exc: Exception) -> Prepared:
        """The client's messages as they came, with the reason."""
        self._failed(reason, key, exc)
        return Prepared(key, list(history), degraded=reason)

    def _failed(self, reason: str, key: str, exc: Exception) -> None:
        """One log line, until the failure changes."""
        failure = f"{reason}: {type(exc).__name__}: {error_text(exc, 500)}"
        if failure != self._last_failure:
            log.error("Proxy: forwarding session %s uncompacted (%s)", key, failure)
            self._last_failure = failure

    def _succeeded(self) -> None:
        if self._last_failure is not None:
            log.warning("Proxy: compaction works again")
            self._last_failure = None
