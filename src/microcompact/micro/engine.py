"""Micro-compaction: after each completed turn, fold the oldest not-yet-summarized exchange into one
rolling summary, kept as a single assistant-role marker message.

The moving parts, all in this module:

- :class:`RollingSummary` is the state: summary text, cursor (first message not yet processed), where the
  micro marker sits, failure counts, running totals. It can always be recovered from the transcript.
- A pass *plans* an event (:class:`Absorb` or :class:`Rewrite`), hands it to the caller's ``commit``
  callback (the session store writes it in one transaction), and only then *applies* it to the in-memory
  transcript. A failing commit leaves memory exactly as it was.
- :class:`MicroCompactor` decides when to run (cadence, long turns, reclaim gate, defrag) and never raises
  into the caller.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..messages import (
    Message,
    content_text,
    is_marker,
    marker_body,
    marker_kind,
    render_micro_marker,
    tool_call_ids,
)
from ..summarizers import (
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    clean_summary,
    prepare_exchange,
    shorten_summary,
)
from ..telemetry import emit, occupancy_pct
from ..tokens import TOKENS_KEY, Ledger, TokenCounter, make_text_counter
from ..events import Absorb, CommitHook, Event, Outcome, Rewrite, Span, apply_event
from ..window import bounded_exchange, exchange_start, head_end, iteration_end, protected_head, protected_tail

log = logging.getLogger("microcompact")

# Cache-aware catch-up: at most this many passes when a deferred cache break finally happens.
MAX_CATCH_UP_PASSES = 64

# Defrag output must be at most this fraction of its input to count as "clearly shorter".
DEFRAG_MAX_RATIO = 0.8


@dataclass
class RollingSummary:
    """Everything micro-compaction remembers between passes; recoverable from the last marker."""

    text: str = ""
    text_tokens: int = 0
    cursor: int | None = None
    marker_index: int | None = None
    failures: dict[str, int] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    gate_floor: tuple[str, int] | None = None  # (span key, tokens) of the last span the reclaim gate refused
    turns: int = 0
    passes_total: int = 0
    tokens_saved_total: int = 0


def commit_or_log(commit: Callable[[Any, list[Message]], None] | None, event: Any, msgs: list[Message],
                  failure: str) -> bool:
    """Hand ``event`` to the caller's commit hook (the store); a failure is logged and reported, not raised."""
    if commit is None:
        return True
    try:
        commit(event, msgs)
        return True
    except Exception as exc:
        log.error("%s (%s: %s)", failure, type(exc).__name__, exc)
        return False


def span_key(messages: list[Message], start: int) -> str:
    """A stable name for the exchange starting at ``start``: a digest of its first message, which does not
    change when earlier splices move it (so skip memory survives restarts)."""
    m = messages[start]
    digest = hashlib.sha1((content_text(m) + "|".join(tool_call_ids(m))).encode("utf-8", "replace")).hexdigest()
    return digest[:16]


@dataclass
class Planned:
    """A pass whose summarizer call is done (or failed) but that has not touched the transcript yet."""

    mode: str
    span: Span
    absorbed: tuple[int, ...]
    key: str
    t0: float
    read: int
    base_summary: str
    marker_index: int | None
    identity: tuple[Message, ...]  # the span's message objects when planned, to detect a changed transcript
    summary: str | None = None
    error: Exception | None = None
    summarizer_ms: float = 0.0


@dataclass
class Condensed:
    """A defrag result computed ahead of the rewrite (in background mode, on the worker thread)."""

    text: str
    old_tokens: int
    new: str | None = None
    outcome: str = Outcome.DEFRAG
    method: str = "model"
    error: str | None = None
    summarizer_ms: float = 0.0


@dataclass
class PassResult:
    outcome: str
    record: dict[str, Any]


class MicroCompactor:
    """Runs micro-compaction passes over a :class:`Ledger` (the transcript it owns)."""

    def __init__(self, config: Config, summarizer: Summarizer, counter: TokenCounter, *, session_id: str = "",
                 commit: CommitHook | None = None, clock: Callable[[], float] = time.perf_counter,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.cfg = config.compression
        self.summarizer = summarizer
        self.counter = counter
        self.session_id = session_id
        self.commit = commit
        self.clock = clock
        self.state = RollingSummary()
        self.summarizer_ms_total = 0.0
        self.largest_pass_tokens = 0
        # Set by a SummarizerAuthError (rejected key, exhausted quota): retrying cannot help, so no more calls.
        self.auth_error: str | None = None
        # Cache-aware scheduling: wall-clock time of the last model request, and turn passes deferred.
        self.wall_clock = wall_clock
        self.last_request_at: float | None = None
        self.deferred = 0

    @property
    def active(self) -> bool:
        return bool(self.cfg.enabled and self.cfg.micro_compact)

    @property
    def cache_aware(self) -> bool:
        return self.cfg.micro_compact_cache_ttl_seconds is not None

    # ------------------------------------------------------------------ entry points (never raise)

    def finalize_turn(self, ledger: Ledger, completed: bool = True) -> list[PassResult]:
        """After a turn: advance the cadence counter and, when due, run one pass (plus defrag if needed)."""
        if not self.active:
            return []
        if not self.turn_due(ledger, completed):
            return []
        return self._guarded(ledger, "turn")

    def turn_due(self, ledger: Ledger, completed: bool = True) -> bool:
        """Advance the cadence counter; True when a turn pass should run now."""
        self.state.turns += 1
        if not completed or self.state.turns % max(1, self.cfg.micro_compact_every_n_turns):
            return False
        if self.cache_aware and self._cache_warm() and not self._worth_a_cache_break(ledger):
            self.deferred += 1  # runs when the cache has gone cold anyway (see before_request)
            return False
        return True

    def before_request(self, ledger: Ledger) -> list[PassResult]:
        """Before a model request: absorb a piece of a long turn whose iterations have left the tail.

        With cache-aware scheduling, this is also where deferred turn passes run: when the provider's cache
        has gone cold since the last request (rewriting history then costs nothing extra), or when occupancy
        or the reclaim gate says waiting is no longer worth it.
        """
        if not self.active:
            return []
        results: list[PassResult] = []
        if self.cache_aware:
            if not self._cache_warm() or self._worth_a_cache_break(ledger):
                # The prefix breaks now (cold cache, or waiting is no longer worth it): make the break count
                # by absorbing everything that is due, so breaks stay rare and large.
                results += self._catch_up(ledger, "turn", self.deferred)
                self.deferred = 0
                results += self._catch_up(ledger, "request", MAX_CATCH_UP_PASSES)
        else:
            results += self._guarded(ledger, "request")
        self.last_request_at = self.wall_clock()
        return results

    def _catch_up(self, ledger: Ledger, mode: str, passes: int) -> list[PassResult]:
        results: list[PassResult] = []
        for _ in range(min(passes, MAX_CATCH_UP_PASSES)):
            done = self._guarded(ledger, mode)
            results += done
            if not any(r.outcome == Outcome.ABSORBED for r in done):
                break
        return results

    def _cache_warm(self) -> bool:
        ttl = self.cfg.micro_compact_cache_ttl_seconds
        return (ttl is not None and self.last_request_at is not None
                and self.wall_clock() - self.last_request_at <= ttl)

    def _worth_a_cache_break(self, ledger: Ledger) -> bool:
        """Occupancy past ``micro_compact_max_occupancy_pct``, or a pending span that meets the reclaim gate."""
        occupancy = occupancy_pct(self.counter.estimate_prompt(ledger.total), self.config.threshold_tokens())
        if occupancy is not None and occupancy >= self.cfg.micro_compact_max_occupancy_pct:
            return True
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate:
            self.sync(ledger)
            span, _ = self.select_span(ledger, "turn")
            return span is not None and span.tokens >= gate
        return False

    def _guarded(self, ledger: Ledger, mode: str) -> list[PassResult]:
        try:
            results = []
            res = self._pass(ledger, mode)
            if res is not None:
                results.append(res)
            defrag = self._maybe_defrag(ledger)
            if defrag is not None:
                results.append(defrag)
            return results
        except Exception:  # a pass degrades the feature, never the session
            log.exception("Micro-compaction pass failed unexpectedly; transcript left as it was")
            return []

    # ------------------------------------------------------------------ cursor and recovery

    def sync(self, ledger: Ledger) -> None:
        """Make the cursor valid for ``ledger``; recover it (and the summary) from the last marker if not.

        The check is O(1); the scan only runs when the state is lost or does not fit the transcript.
        """
        msgs = ledger.messages
        st = self.state
        h = self._head(msgs)
        ok = st.cursor is not None and h <= st.cursor <= len(msgs)
        if ok and st.marker_index is not None:
            mi = st.marker_index
            ok = mi < st.cursor and mi < len(msgs) and marker_kind(msgs[mi]) == "micro"
        if not ok:
            self.recover(msgs)

    def recover(self, msgs: list[Message]) -> None:
        """Cursor just after the last marker; rolling summary from the last micro marker's body."""
        st = self.state
        h = self._head(msgs)
        last_any = last_micro = None
        for i in range(len(msgs) - 1, h - 1, -1):
            kind = marker_kind(msgs[i])
            if kind is None:
                continue
            if last_any is None:
                last_any = i
            if kind == "micro":
                last_micro = i
                break
        st.cursor = max(h, last_any + 1) if last_any is not None else h
        st.marker_index = last_micro
        self._set_summary(marker_body(msgs[last_micro]) if last_micro is not None else "")
        st.failures.clear()
        st.gate_floor = None

    def _head(self, msgs: list[Message]) -> int:
        """The protected head's end; counts come from the messages' cached counts (a few head messages)."""
        plain = head_end(msgs, self.cfg.protect_first_n)
        return head_end(msgs, self.cfg.protect_first_n, [self.counter.count_message(m) for m in msgs[:plain]],
                        self.config.head_budget_tokens())

    def _set_summary(self, text: str) -> None:
        self.state.text = text
        self.state.text_tokens = self.counter.count_text(text)

    # ------------------------------------------------------------------ choosing what to absorb

    def select_span(self, ledger: Ledger, mode: str) -> tuple[Span | None, str]:
        """The span the next pass would absorb, or (None, reason).

        At the end of a turn (``mode="turn"``) that is the oldest whole exchange, or, when it is larger than
        ``micro_compact_max_exchange_tokens``, its oldest completed iterations up to that budget. Before a model
        request (``mode="request"``) it is the oldest completed iterations outside the tail, across turns,
        once at least that budget of them has piled up: this keeps a turn still in progress (80-270 messages
        in real coding sessions) from ever reaching the threshold, while each pass stays small.
        """
        msgs, tokens = ledger.messages, ledger.tokens
        cfg = self.cfg
        h = protected_head(msgs, tokens, self.config)
        t = protected_tail(msgs, tokens, self.config, h)
        assert self.state.cursor is not None
        start = exchange_start(msgs, max(self.state.cursor, h), t)
        while start is not None and self.state.skipped and span_key(msgs, start) in self.state.skipped:
            # Skipped after repeated failures (remembered across restarts): leave it for batch compaction.
            end, _ = bounded_exchange(msgs, tokens, start, t, 1 << 62)
            start = exchange_start(msgs, end, t)
        if start is None:
            return None, "nothing in the middle"
        max_ex = self._piece_budget()
        if mode == "request":
            span, reason = self._piece(msgs, tokens, start, t, across_turns=True, minimum=max_ex)
            floor = self.state.gate_floor
            if span and floor and floor[0] == span_key(msgs, span.start) and span.tokens <= floor[1]:
                return None, "reclaim gate: waiting for more"
            return span, reason
        end, size = bounded_exchange(msgs, tokens, start, t, max_ex)
        if size > max_ex:
            return self._piece(msgs, tokens, start, t, across_turns=False, minimum=0)
        if end == t and t < len(msgs) and msgs[t].get("role") != "user":
            return None, "exchange runs into the tail"
        span = Span(start, end, size)
        if cfg.micro_compact_min_reclaim_tokens and self.state.marker_index is not None:
            return self._grow_for_gate(msgs, tokens, span, t)
        return span, ""

    def _piece_budget(self) -> int:
        """Tokens one pass may absorb; with a reclaim gate, enough to meet it with room for the summary."""
        return max(self.config.piece_budget_tokens(), 2 * self.cfg.micro_compact_min_reclaim_tokens)

    def _piece(self, msgs: list[Message], tokens: list[int], start: int, limit: int, *, across_turns: bool,
               minimum: int) -> tuple[Span | None, str]:
        """The oldest completed iterations from ``start`` up to the exchange budget (at least one).

        With ``across_turns`` the piece may pass user messages, which stay where they are (``Span.kept``).
        Nothing is returned unless at least ``minimum`` tokens of iterations are available before ``limit``.
        """
        max_ex = self._piece_budget()
        units: list[tuple[int, int, bool]] = []  # (start, end, is_user)
        available = 0
        i = start
        while i < limit and available < max(minimum, max_ex + 1):
            m = msgs[i]
            if m.get("role") == "user" and across_turns:
                units.append((i, i + 1, True))
                i += 1
                continue
            if m.get("role") != "assistant" or is_marker(m):
                break
            end = iteration_end(msgs, i)
            if end is None:
                # Results missing: if the turn went on after it (an interrupted tool in a recording), the
                # iteration is finished and absorbing it repairs the pairing; at the end it is in progress.
                end = i + 1
                while end < limit and msgs[end].get("role") == "tool":
                    end += 1
                if end >= limit:
                    break
            if end > limit:
                break
            units.append((i, end, False))
            available += sum(tokens[i:end])
            i = end
        if available == 0:
            return None, "no completed iteration outside the tail"
        if available < minimum:
            return None, "not enough outside the tail yet"
        total, end, kept = 0, start, []
        pending_users: list[int] = []
        for s, e, is_user in units:
            if is_user:
                pending_users.append(s)
                continue
            cost = sum(tokens[s:e])
            if total and total + cost > max_ex:
                break
            kept += pending_users
            pending_users = []
            total += cost
            end = e
        return Span(start, end, total, tuple(kept), partial=True), ""

    def _grow_for_gate(self, msgs: list[Message], tokens: list[int], span: Span, limit: int
                       ) -> tuple[Span | None, str]:
        """Extend the span with following whole exchanges until it can meet the reclaim gate."""
        need = self.cfg.micro_compact_min_reclaim_tokens
        floor = self.state.gate_floor
        key = span_key(msgs, span.start)
        refused = floor[1] if floor and floor[0] == key else -1
        cap = self._piece_budget()
        start, end, total, kept = span.start, span.end, span.tokens, list(span.kept)
        while total < need or total <= refused:
            users = []
            i = end
            while i < limit and msgs[i].get("role") == "user":
                users.append(i)
                i += 1
            nxt = exchange_start(msgs, i, limit)
            if nxt != i:
                break
            nend, add = bounded_exchange(msgs, tokens, nxt, limit, cap)
            runs_into_tail = nend == limit and limit < len(msgs) and msgs[limit].get("role") != "user"
            if add > cap or runs_into_tail or (total + add > cap and total >= need):
                break
            kept += users
            end, total = nend, total + add
        if total < need or total <= refused:
            return None, Outcome.NO_RECLAIM
        return Span(start, end, total, tuple(kept)), ""

    # ------------------------------------------------------------------ the pass

    def _pass(self, ledger: Ledger, mode: str) -> PassResult | None:
        self.sync(ledger)
        planned = self.plan(ledger, mode)
        return planned if not isinstance(planned, Planned) else self.commit_planned(ledger, planned)

    def plan(self, ledger: Ledger, mode: str) -> Planned | PassResult | None:
        """The slow half of a pass: choose the span and call the summarizer. Changes nothing.

        Safe to run on a snapshot in another thread (background mode); :meth:`commit_planned` then checks
        that the span is unchanged before anything is written.
        """
        t0 = self.clock()
        st = self.state
        msgs = ledger.messages
        span, reason = self.select_span(ledger, mode)
        if span is None:
            if reason == Outcome.NO_RECLAIM:
                return self._finish(ledger, Outcome.NO_RECLAIM, t0, 0.0, exchange_tokens=0, mode=mode,
                                    tokens_before=ledger.total, messages_before=len(msgs))
            return None
        if self.auth_error is not None:
            return None  # credentials or quota were refused earlier in this session: never retried
        kept = set(span.kept)
        absorbed = tuple(i for i in range(span.start, span.end) if i not in kept)
        prepared = prepare_exchange([msgs[i] for i in absorbed], self.config.piece_budget_tokens(),
                                    self.counter.count_text)
        # What the summarizer reads: the exchange as bounded by prepare_exchange, plus the running summary.
        read = min(span.tokens, self.config.piece_budget_tokens()) + st.text_tokens
        planned = Planned(mode=mode, span=span, absorbed=absorbed, key=span_key(msgs, span.start), t0=t0,
                          read=read, base_summary=st.text, marker_index=st.marker_index,
                          identity=tuple(msgs[i] for i in range(span.start, span.end)))
        s0 = self.clock()
        try:
            planned.summary = self._clean(self.summarizer.merge(st.text, prepared),
                                          limit=st.text_tokens + span.tokens + 256)
        except Exception as exc:
            planned.error = exc
        planned.summarizer_ms = (self.clock() - s0) * 1000
        return planned

    def still_valid(self, ledger: Ledger, planned: Planned) -> bool:
        """True when the span and the summary the plan was made from are still what the transcript holds."""
        msgs = ledger.messages
        span = planned.span
        if span.end > len(msgs) or planned.base_summary != self.state.text:
            return False
        if planned.marker_index != self.state.marker_index:
            return False
        return all(msgs[i] is original for i, original in zip(range(span.start, span.end), planned.identity))

    def commit_planned(self, ledger: Ledger, planned: Planned) -> PassResult:
        """The quick half: write the event through the store, then apply it and update the state."""
        st, span, mode, t0 = self.state, planned.span, planned.mode, planned.t0
        self.largest_pass_tokens = max(self.largest_pass_tokens, planned.read)
        if planned.error is not None or planned.summary is None:
            return self._failed(ledger, planned.key, span, planned.error or SummarizerBadOutput("no summary"), t0,
                                planned.summarizer_ms, mode, planned.read)
        summary, summarizer_ms = planned.summary, planned.summarizer_ms
        tokens_before, messages_before = ledger.total, len(ledger.messages)
        st.failures.pop(planned.key, None)
        marker = render_micro_marker(summary)
        event = Absorb(span, st.marker_index, marker, summary, planned.absorbed)
        call = {"summarizer_input_tokens": planned.read, "summarizer_output_tokens": self.counter.count_text(summary)}
        old_marker_tokens = ledger.tokens[st.marker_index] if st.marker_index is not None else 0
        tokens_after = tokens_before - span.tokens - old_marker_tokens + self.counter.count_message(marker)
        gate = self.cfg.micro_compact_min_reclaim_tokens
        if gate and st.marker_index is not None and tokens_before - tokens_after < gate:
            st.gate_floor = (planned.key, span.tokens)
            return self._finish(ledger, Outcome.NO_RECLAIM, t0, summarizer_ms, exchange_tokens=span.tokens, mode=mode,
                                tokens_before=tokens_before, messages_before=messages_before, **call)
        if not self._commit(event, ledger.messages):
            return self._finish(ledger, Outcome.STORE_FAILED, t0, summarizer_ms, exchange_tokens=span.tokens, mode=mode,
                                tokens_before=tokens_before, messages_before=messages_before, **call)
        apply_event(ledger, event)
        st.marker_index = event.marker_index_after
        st.cursor = st.marker_index + 1
        self._set_summary(summary)
        st.gate_floor = None
        st.passes_total += 1
        st.tokens_saved_total += tokens_before - ledger.total
        log.info("Micro-compaction: %d -> %d messages", messages_before, len(ledger.messages))
        return self._finish(ledger, Outcome.ABSORBED, t0, summarizer_ms, exchange_tokens=span.tokens, mode=mode,
                            tokens_before=tokens_before, messages_before=messages_before, partial=span.partial, **call)

    def _failed(self, ledger: Ledger, key: str, span: Span, exc: Exception, t0: float, summarizer_ms: float,
                mode: str, read: int) -> PassResult:
        st = self.state
        if isinstance(exc, SummarizerAuthError):
            self.auth_error = str(exc)[:200]
            log.error("Micro-compaction: summarizer refused credentials or quota (%s); no further summarizer "
                      "calls in this session", self.auth_error)
            return self._finish(ledger, Outcome.AUTH_FAILED, t0, summarizer_ms, exchange_tokens=span.tokens, mode=mode,
                                tokens_before=ledger.total, messages_before=len(ledger.messages),
                                error=type(exc).__name__, summarizer_input_tokens=read, summarizer_output_tokens=0)
        st.failures[key] = st.failures.get(key, 0) + 1
        outcome = Outcome.SUMMARIZE_FAILED
        log.warning("Micro-compaction: summarizer failed on exchange at cursor %d (%s: %s)", span.start,
                    type(exc).__name__, str(exc)[:200])
        if st.failures[key] >= self.cfg.micro_compact_max_failures:
            log.info("Micro-compaction: skipping exchange at cursor %d after %d consecutive failures",
                     span.start, st.failures[key])
            st.failures.pop(key, None)
            st.skipped.add(key)
            st.cursor = span.end
            outcome = Outcome.EXCHANGE_SKIPPED
        return self._finish(ledger, outcome, t0, summarizer_ms, exchange_tokens=span.tokens, mode=mode,
                            tokens_before=ledger.total, messages_before=len(ledger.messages),
                            error=type(exc).__name__, summarizer_input_tokens=read, summarizer_output_tokens=0)

    def _commit(self, event: Event, msgs: list[Message]) -> bool:
        return commit_or_log(self.commit, event, msgs, "Micro-compaction: store commit failed, pass rolled back "
                                                      "in memory")

    def _clean(self, text: str, limit: int) -> str:
        return clean_summary(text, limit, self.counter.count_text)

    # ------------------------------------------------------------------ defrag

    def needs_defrag(self, text_tokens: int) -> bool:
        return text_tokens > self.cfg.micro_compact_defrag_threshold_tokens

    def condense(self, text: str) -> Condensed:
        """The slow half of defrag: a clearly shorter summary, from the model or, failing that, deterministic."""
        old_tokens = self.counter.count_text(text)
        target = self.cfg.micro_compact_defrag_threshold_tokens // 2
        result = Condensed(text=text, old_tokens=old_tokens)
        s0 = self.clock()
        try:
            if self.auth_error is not None:
                raise SummarizerAuthError(self.auth_error)  # not retried: the deterministic shortening follows
            result.new = self._clean(self.summarizer.condense(text, target), limit=old_tokens)
        except Exception as exc:
            if isinstance(exc, SummarizerAuthError) and self.auth_error is None:
                self.auth_error = str(exc)[:200]
            result.outcome, result.error = Outcome.DEFRAG_FAILED, type(exc).__name__
            log.warning("Micro-compaction defrag: summarizer failed (%s: %s)", type(exc).__name__, str(exc)[:200])
        result.summarizer_ms = (self.clock() - s0) * 1000
        if result.new is None or self.counter.count_text(result.new) > DEFRAG_MAX_RATIO * old_tokens:
            # Not clearly shorter (an echoing model, say): a deterministic shortening takes over, so defrag
            # cannot run every turn forever.
            result.new, result.method = shorten_summary(text, target, self.counter.count_text), "deterministic"
        return result

    def _maybe_defrag(self, ledger: Ledger, ready: Condensed | None = None) -> PassResult | None:
        """Re-summarize a rolling summary over the defrag threshold and rewrite the marker in place."""
        st = self.state
        if st.marker_index is None or not st.text or not self.needs_defrag(st.text_tokens):
            return None
        msgs, h = ledger.messages, protected_head(ledger.messages, ledger.tokens, self.config)
        if st.marker_index >= protected_tail(msgs, ledger.tokens, self.config, h):
            return None  # the marker is in the protected tail: never rewritten there; later, once it left
        t0 = self.clock()
        done = ready if ready is not None and ready.text == st.text else self.condense(st.text)
        tokens_before, messages_before = ledger.total, len(ledger.messages)
        new = done.new or ""
        event = Rewrite(st.marker_index, render_micro_marker(new), new)
        if not self._commit(event, ledger.messages):
            return self._finish(ledger, Outcome.STORE_FAILED, t0, done.summarizer_ms, exchange_tokens=0, mode="defrag",
                                tokens_before=tokens_before, messages_before=messages_before)
        apply_event(ledger, event)
        self._set_summary(new)
        st.passes_total += 1
        st.tokens_saved_total += tokens_before - ledger.total
        log.info("Micro-compaction defrag: rolling summary re-summarized (%d -> %d tokens, %s)",
                 done.old_tokens, st.text_tokens, done.method)
        return self._finish(ledger, done.outcome, t0, done.summarizer_ms, exchange_tokens=0, mode="defrag",
                            tokens_before=tokens_before, messages_before=messages_before,
                            defrag_method=done.method, summary_tokens_before=done.old_tokens, error=done.error,
                            summarizer_input_tokens=done.old_tokens,
                            summarizer_output_tokens=st.text_tokens if done.method == "model" else 0)

    # ------------------------------------------------------------------ telemetry

    def _finish(self, ledger: Ledger, outcome: str, t0: float, summarizer_ms: float, *, exchange_tokens: int,
                mode: str, tokens_before: int, messages_before: int, **extra: Any) -> PassResult:
        st = self.state
        self.summarizer_ms_total += summarizer_ms
        duration_ms = (self.clock() - t0) * 1000
        threshold = self.config.threshold_tokens()
        tokens_after = ledger.total
        record: dict[str, Any] = {
            "event": "micro_compaction",
            "session_id": self.session_id,
            "outcome": outcome,
            "mode": mode,
            "messages_before": messages_before,
            "messages_after": len(ledger.messages),
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "tokens_delta": tokens_after - tokens_before,
            "exchange_tokens": exchange_tokens,
            "rolling_summary_tokens": st.text_tokens,
            "cursor": st.cursor,
            "passes_total": st.passes_total,
            "tokens_saved_total": st.tokens_saved_total,
            "duration_ms": round(duration_ms, 3),
            "summarizer_ms": round(summarizer_ms, 3),
            "engine_ms": round(max(0.0, duration_ms - summarizer_ms), 3),
            "threshold_tokens": threshold,
            "context_limit": self.config.model.context_length,
            "occupancy_pct": occupancy_pct(self.counter.estimate_prompt(tokens_after), threshold),
            "aux_model": getattr(self.summarizer, "name", type(self.summarizer).__name__),
        }
        record.update({k: v for k, v in extra.items() if v is not None})
        emit("micro", record)
        return PassResult(outcome, record)


def micro_compact(messages: list[Message], summarizer: Summarizer, *, config: Config | None = None,
                  state: RollingSummary | None = None, counter: TokenCounter | None = None) -> list[Message]:
    """One pass in the history-processor shape: a message list in, a new message list out.

    The caller's dicts are never changed. Pass the same ``state`` on every call to keep the cursor and
    summary between calls (without it they are recovered from the last marker). Counting the transcript
    costs O(n) per call here; long-running loops should use :class:`~microcompact.session.Session`, which
    counts each message once.
    """
    config = config or Config()
    if not config.compression.micro_compact:
        config = config.with_overrides(compression={"micro_compact": True})
    counter = counter or TokenCounter(make_text_counter(config.compression.tokenizer))
    ledger = Ledger(counter, [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in messages])
    engine = MicroCompactor(config, summarizer, counter)
    if state is not None:
        engine.state = state
    engine._guarded(ledger, "turn")
    # Markers keep their ``_mc`` metadata (so the next call recognises them); send ``to_api(result)``.
    return [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in ledger.messages]
