"""Batch compaction at the threshold: the long pause micro-compaction postpones, kept for when it is due.

Two phases, cheapest first:

1. **Prune** (no model): old tool outputs in the middle become one-line stubs, identical older outputs
   are de-duplicated, oversized tool-call arguments are shortened while staying valid JSON. If that alone
   frees enough, stop.
2. **Summarize**, in time order: the middle is split at its kept user messages into runs of work; each run
   (with the earlier markers in it as its previous summary) becomes its own batch marker (the same marker
   format as micro-compaction) at the run's place, one summarizer call per run, at most
   ``batch_max_calls`` (older runs: the deterministic extractive summary). User messages stay verbatim and
   individual. Only when they (with a marker frame per run, and earlier markers kept as they are) exceed
   ``batch_user_floor_ratio`` of the threshold are the oldest folded into the run they sit in, and the
   outcome says so (``user_floor_exceeded``).

Failures never change the transcript. A failing summarizer backs off (longer after repeated timeouts,
shorter after malformed output, never retried on authentication or quota errors); when the transcript is
at risk of overflowing the context window, the deterministic extractive summary is used instead so the
session can go on. Two compactions in a row that free too little pause automatic compaction until the
transcript has grown meaningfully.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..events import (
    BATCH_CHANGED,
    BATCH_COMPACTIONS,
    BatchCompact,
    CommitHook,
    Outcome,
    Prune,
    apply_event,
    commit_or_log,
)
from ..messages import (
    META_KEY,
    Message,
    content_text,
    is_marker,
    marker_body,
    marker_kind,
    render_marker,
)
from ..redact import redact_text
from ..summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerRateLimited,
    SummarizerTimeout,
    clean_summary,
    describe_tool_result,
    prepare_exchange,
    render_exchange,
    shorten_summary,
)
from ..telemetry import emit, occupancy_pct
from ..tokens import Ledger, TokenCounter
from ..window import Window

log = logging.getLogger("microcompact")

# Room assumed for a batch summary's growth when predicting what a compaction would free.
SUMMARY_ALLOWANCE_TOKENS = 200
# Once the user floor is exceeded, the oldest user messages are folded until what stays verbatim is this share
# of the floor: kept markers accumulate between batches, and folding just under the floor would fold again
# at every batch.
FOLD_TARGET = 0.6
FALLBACK_NOTE = "- {count} earlier messages ({tokens:,} tokens) compacted; no facts could be extracted from them."
OMITTED_MESSAGES = (
    "[... {count} messages ({tokens:,} tokens) omitted by microcompact: the summarizer's input limit ...]"
)


# ---------------------------------------------------------------------------------------------- events


# ---------------------------------------------------------------------------------------------- prune


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


def _is_stub(message: Message) -> bool:
    meta = message.get(META_KEY)
    return isinstance(meta, dict) and bool(meta.get("stub"))


def shorten_arguments(arguments: str, max_chars: int) -> str | None:
    """Tool-call arguments with long string values cut head-and-tail, still valid JSON; None if not JSON."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    keep = max(40, max_chars // 4)

    def cut(v: Any) -> Any:
        if isinstance(v, str) and len(v) > keep * 2:
            return f"{v[:keep]}[... {len(v) - 2 * keep:,} characters omitted by microcompact ...]{v[-keep:]}"
        if isinstance(v, dict):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v

    return json.dumps(cut(value), ensure_ascii=False)


def plan_prune(
    msgs: list[Message], tokens: list[int], start: int, end: int, *, min_tool_tokens: int, max_argument_tokens: int
) -> Prune | None:
    """Stubs for tool outputs in ``[start, end)``, newest copy of duplicate outputs kept whole."""
    calls: dict[str, dict[str, Any]] = {}
    for i in range(start, end):
        for tc in msgs[i].get("tool_calls") or ():
            calls[str(tc.get("id"))] = tc
    replacements: list[tuple[int, Message]] = []
    newest: set[str] = set()  # digests of outputs seen later in the transcript
    whole: set[str] = set()  # ... whose newest copy stays whole
    for i in range(end - 1, start - 1, -1):
        m = msgs[i]
        if m.get("role") == "tool" and not _is_stub(m):
            text = content_text(m)
            call = calls.get(str(m.get("tool_call_id")))
            key = _digest(text)
            if key in newest and tokens[i] > 20:
                note = "kept there" if key in whole else "also shortened"
                stub = f"{describe_tool_result(call, text)} [identical to a later output, {note}]"
            elif tokens[i] > min_tool_tokens:
                stub = describe_tool_result(call, text)
            else:
                if key not in newest:
                    whole.add(key)
                newest.add(key)
                continue
            newest.add(key)
            if len(stub) >= len(text):  # a stub that is not shorter saves nothing and loses the detail
                continue
            replacements.append(
                (
                    i,
                    {
                        "role": "tool",
                        "tool_call_id": m.get("tool_call_id"),
                        "content": stub,
                        META_KEY: {"stub": True, "original_tokens": tokens[i]},
                    },
                )
            )
        elif m.get("role") == "assistant" and m.get("tool_calls") and tokens[i] > max_argument_tokens:
            new_calls, changed = [], False
            for tc in m["tool_calls"]:
                fn = dict(tc.get("function") or {})
                args = fn.get("arguments")
                short = shorten_arguments(args, max_argument_tokens * 4) if isinstance(args, str) else None
                if short is not None and isinstance(args, str) and len(short) < len(args):
                    fn["arguments"], changed = short, True
                new_calls.append({**tc, "function": fn})
            if changed:
                replacements.append(
                    (
                        i,
                        {
                            **{k: v for k, v in m.items() if not k.startswith("_")},
                            "tool_calls": new_calls,
                            META_KEY: {**(m.get(META_KEY) or {}), "shortened": True},
                        },
                    )
                )
    if not replacements:
        return None
    return Prune(tuple(sorted(replacements, key=lambda r: r[0])))


# ---------------------------------------------------------------------------------------------- last resort

CUT_NOTE = (
    "\n[... {chars:,} characters (about {tokens:,} tokens) omitted by microcompact: the request was over the "
    "context window; the original is kept in the session store ...]\n"
)
CUT_MIN_TOKENS = 1024  # smaller messages are never cut
CUT_KEEP_TOKENS = 512  # a cut message keeps at least this much of its start and end together
CUT_NOTE_TOKENS = 40
CUT_MARGIN_SHARE = 0.02  # cuts aim this far under the window (token estimates are estimates)
CUT_MARGIN_MIN_TOKENS = 256
_STORE_ONLY_KEYS = ("_tokens", "_row", "_pos")


def _cuttable(message: Message) -> bool:
    """Tool outputs and assistant texts; never user or system messages, markers, or earlier cuts."""
    meta = message.get(META_KEY)
    if isinstance(meta, dict) and meta.get("cut"):
        return False
    return message.get("role") in ("tool", "assistant") and not is_marker(message) and bool(content_text(message))


def cut_message(message: Message, tokens: int, keep_tokens: int) -> Message:
    """``message`` with its text cut to about ``keep_tokens``: its start and its end, and a note between."""
    text = content_text(message)
    keep_chars = max(2, int(len(text) * keep_tokens / max(tokens, 1)))
    head, tail = text[: keep_chars // 2], text[len(text) - keep_chars // 2 :]
    omitted = len(text) - len(head) - len(tail)
    note = CUT_NOTE.format(chars=omitted, tokens=max(0, tokens - keep_tokens))
    out = {k: v for k, v in message.items() if k not in _STORE_ONLY_KEYS}
    out["content"] = head + note + tail
    out[META_KEY] = {**(message.get(META_KEY) or {}), "cut": True, "original_tokens": tokens}
    return out


# ---------------------------------------------------------------------------------------------- backoff


class Backoff:
    """When the summarizer may be called again after a failure."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.until = 0.0
        self.timeouts = 0
        self.auth_error: str | None = None

    def blocked(self) -> str | None:
        if self.auth_error:
            return f"summarizer refused credentials or quota ({self.auth_error}); not retried"
        if self.clock() < self.until:
            return f"summarizer cooling down for {self.until - self.clock():.0f} s"
        return None

    def failed(self, exc: Exception) -> None:
        now = self.clock()
        if isinstance(exc, SummarizerAuthError):
            self.auth_error = str(exc)[:200]
        elif isinstance(exc, SummarizerTimeout):
            self.timeouts += 1
            self.until = now + min(30.0 * 2 ** (self.timeouts - 1), 900.0)
        elif isinstance(exc, SummarizerRateLimited):
            self.until = now + 60.0
        elif isinstance(exc, SummarizerBadOutput):
            self.until = now + 10.0
        else:
            self.until = now + 30.0

    def succeeded(self) -> None:
        self.until, self.timeouts = 0.0, 0


# ---------------------------------------------------------------------------------------------- runs


def split_runs(msgs: list[Message], start: int, end: int, kept: set[int]) -> list[list[int]]:
    """``[start, end)`` split at the ``kept`` indexes (verbatim user messages) into the runs of work between
    them, oldest first; no run is empty."""
    runs: list[list[int]] = []
    current: list[int] = []
    for i in range(start, end):
        if i in kept:
            if current:
                runs.append(current)
            current = []
        else:
            current.append(i)
    if current:
        runs.append(current)
    return runs


class _Run:
    """One run of work between two kept user messages: what its batch marker summarizes, and the result."""

    def __init__(self, indexes: list[int], msgs: list[Message]) -> None:
        self.indexes = indexes
        self.material = [msgs[i] for i in indexes if not is_marker(msgs[i])]
        # Earlier markers in the run are its previous summary (batch ones first): they are in time here.
        markers = sorted((i for i in indexes if is_marker(msgs[i])), key=lambda i: marker_kind(msgs[i]) != "batch")
        self.previous = "\n\n".join(marker_body(msgs[i]) for i in markers)
        # An earlier batch marker with nothing new around it stays as it is: no call, no new row.
        self.untouched = len(indexes) == 1 and marker_kind(msgs[indexes[0]]) == "batch"
        self.summary: str | None = None
        self.outcome: str = Outcome.COMPACTED
        self.error: str | None = None
        self.used = ""  # the summarizer that wrote the summary ("" when old markers were kept as they are)
        self.capped = False  # beyond batch_max_calls: the deterministic summary, no model call
        self.input_tokens = 0


def chronological_event(msgs: list[Message], h: int, t: int, runs: list[_Run]) -> BatchCompact:
    """The middle rewritten in time order: kept messages where they were, each summarized run's marker at
    the place of its run."""
    first = {run.indexes[0]: run for run in runs if not run.untouched}
    covered = {i for run in first.values() for i in run.indexes}
    new: list[Message] = []
    sources: list[tuple[int, ...]] = []
    kept: list[int] = []
    for i in range(h, t):
        if i in first:
            run = first[i]
            assert run.summary is not None
            new.append(render_marker(run.summary, "batch"))
            sources.append(tuple(run.indexes))
        elif i not in covered:
            new.append(msgs[i])
            sources.append((i,))
            kept.append(i)
    return BatchCompact(h, t, tuple(new), tuple(sources), tuple(kept))


# ---------------------------------------------------------------------------------------------- engine


@dataclass
class BatchResult:
    outcome: str
    record: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.outcome in BATCH_CHANGED


class BatchCompactor:
    """Threshold-triggered compaction of the whole middle; shares the marker format with micro passes."""

    def __init__(
        self,
        config: Config,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        session_id: str = "",
        commit: CommitHook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.cfg = config.compression
        self.summarizer = summarizer
        self.counter = counter
        self.session_id = session_id
        self.commit = commit
        self.clock = clock
        self.backoff = Backoff(clock)
        self.fallback = ExtractiveSummarizer(counter.count_text)
        self.compactions = 0
        self.low_yield = 0
        self.paused_below: int | None = None  # automatic compaction paused until the transcript reaches this
        self.largest_input_tokens = 0
        self.summarizer_ms_total = 0.0
        self._extra: dict[str, Any] = {}
        self._risk = False

    # ------------------------------------------------------------------ when

    def prompt_tokens(self, ledger: Ledger, reported: int | None = None) -> int:
        return int(reported) if reported else self.counter.estimate_prompt(ledger.total)

    def should_compress(self, ledger: Ledger, prompt_tokens: int | None = None) -> bool:
        """True when the prompt (reported, else counted) reaches ``threshold_tokens``."""
        threshold = self.config.threshold_tokens()
        if not self.cfg.enabled or not threshold:
            return False
        tokens = self.prompt_tokens(ledger, prompt_tokens)
        if tokens < threshold:
            return False
        # The pause is in counted tokens (like paused_below), whatever figure triggered the check.
        # Near the limit the pause yields, unless compactions there keep freeing too little as well (a head or
        # tail that cannot shrink): then a summarizer call on every request would help nobody.
        return not (
            self.paused_below is not None
            and ledger.total < self.paused_below
            and not (self._at_risk(tokens) and self.low_yield < 3)
        )

    def _at_risk(self, tokens: int) -> bool:
        """Halfway from the threshold to the context limit: too close to wait for a cooling summarizer."""
        limit, threshold = self.config.model.context_length, self.config.threshold_tokens()
        if not limit or not threshold:
            return False
        return tokens >= (threshold + limit) / 2

    # ------------------------------------------------------------------ how

    def compact(
        self,
        ledger: Ledger,
        *,
        force: bool = False,
        focus: str | None = None,
        reason: str = "threshold",
        prompt_tokens: int | None = None,
        **extra: Any,
    ) -> BatchResult:
        """Run one batch compaction (prune first). Never raises; the result says what happened.

        ``extra`` goes into the telemetry line (e.g. how many micro passes ran since the last one).
        """
        t0 = self.clock()
        before_tokens, before_messages = ledger.total, len(ledger.messages)
        self._extra = extra
        self._risk = self._at_risk(self.prompt_tokens(ledger, prompt_tokens))
        try:
            return self._compact(ledger, force, focus, reason, t0)
        except Exception as exc:  # never into the caller
            log.exception("Batch compaction failed unexpectedly; transcript left as it was")
            return self._finish(
                ledger, Outcome.ERROR, t0, before_tokens, before_messages, reason=reason, error=type(exc).__name__
            )

    def _compact(self, ledger: Ledger, force: bool, focus: str | None, reason: str, t0: float) -> BatchResult:
        msgs, tokens = ledger.messages, ledger.tokens
        cfg = self.cfg
        before_tokens, before_messages = ledger.total, len(msgs)
        threshold = self.config.threshold_tokens() or 0
        window = Window.of(msgs, tokens, self.config)
        h, t = window.head, window.tail
        pruned = plan_prune(
            msgs,
            tokens,
            h,
            t,
            min_tool_tokens=cfg.prune_min_tool_tokens,
            max_argument_tokens=cfg.prune_max_argument_tokens,
        )
        if pruned is not None and not force and threshold:
            saved = sum(tokens[i] - self.counter.count_message(m) for i, m in pruned.replacements)
            if before_tokens - saved <= threshold - cfg.proactive_prune_min_reclaim_tokens:
                if not self._commit(pruned, msgs):
                    return self._finish(ledger, Outcome.STORE_FAILED, t0, before_tokens, before_messages, reason=reason)
                apply_event(ledger, pruned)
                log.info(
                    "Batch compaction: pruned %d old tool outputs, %d -> %d tokens",
                    len(pruned.replacements),
                    before_tokens,
                    ledger.total,
                )
                return self._done(
                    ledger,
                    Outcome.PRUNED,
                    t0,
                    before_tokens,
                    before_messages,
                    reason=reason,
                    pruned=len(pruned.replacements),
                )
        # Pruning alone is not enough: the summarizer reads the original outputs (bounded), which tell it
        # more than the stubs would, and the whole middle is replaced in one step (or not at all).
        return self._summarize(ledger, h, t, focus, reason, t0, before_tokens, before_messages)

    def _summarize(
        self,
        ledger: Ledger,
        h: int,
        t: int,
        focus: str | None,
        reason: str,
        t0: float,
        before_tokens: int,
        before_messages: int,
    ) -> BatchResult:
        msgs, tokens = ledger.messages, ledger.tokens
        users = [i for i in range(h, t) if msgs[i].get("role") == "user"]
        others = [i for i in range(h, t) if msgs[i].get("role") != "user"]
        if not any(not is_marker(msgs[i]) for i in others):
            return self._done(ledger, Outcome.NOTHING_TO_COMPACT, t0, before_tokens, before_messages, reason=reason)
        # The user floor: verbatim user messages, with the batch marker each gap between them needs to stay in
        # time order, must leave room to continue.
        folded: list[int] = []
        threshold = self.config.threshold_tokens()
        if threshold:
            floor = self.cfg.batch_user_floor_ratio * threshold
            last_user = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "user"), None)
            # Over the floor, fold down to FOLD_TARGET of it, so that the next batch does not fold again at once.
            limit = floor
            while (
                users and users[0] != last_user and self._kept_cost(msgs, tokens, h, t, users) > limit
            ):  # the current request stays verbatim
                folded.append(users.pop(0))
                limit = FOLD_TARGET * floor
            if folded:
                log.warning(
                    "Batch compaction: verbatim user messages exceed %.0f%% of the threshold (with one "
                    "marker per run of work between them); folding the oldest %d into the summary",
                    100 * self.cfg.batch_user_floor_ratio,
                    len(folded),
                )
        runs = [_Run(run, msgs) for run in split_runs(msgs, h, t, set(users))]
        todo = [run for run in runs if not run.untouched]
        absorbed = [i for run in todo for i in run.indexes]
        shortfall = self._shortfall(tokens, absorbed, sum(self.counter.count_text(r.previous) for r in todo), len(todo))
        if shortfall and reason != "on_demand":
            # Too little to summarize for the call to matter (the middle is mostly verbatim user messages, or
            # micro passes already did the work): wait until enough has piled up instead of re-batching.
            return self._done(
                ledger, Outcome.LOW_YIELD, t0, before_tokens, before_messages, reason=reason, pause_tokens=shortfall
            )
        calls, failed = self._summarize_runs(todo, focus)
        input_tokens = sum(r.input_tokens for r in todo)
        if failed is not None:
            outcome, error, used = failed
            return self._finish(
                ledger,
                outcome,
                t0,
                before_tokens,
                before_messages,
                reason=reason,
                error=error,
                summarizer=used,
                summarizer_input_tokens=input_tokens if error else 0,
                summarizer_output_tokens=0,
                runs=len(todo),
                summarizer_calls=calls,
            )
        fallback = any(r.outcome == Outcome.FALLBACK for r in todo)
        outcome = Outcome.FALLBACK if fallback else Outcome.COMPACTED
        if folded:  # every fold of user messages is reported as such, whichever summarizer wrote the summary
            outcome = Outcome.USER_FLOOR_EXCEEDED
        event = chronological_event(msgs, h, t, runs)
        if not self._commit(event, msgs):
            return self._finish(
                ledger,
                Outcome.STORE_FAILED,
                t0,
                before_tokens,
                before_messages,
                reason=reason,
                runs=len(todo),
                summarizer_calls=calls,
            )
        apply_event(ledger, event)
        self.compactions += 1
        log.info(
            "Batch compaction: %d -> %d messages, %d -> %d tokens, %d runs, %d summarizer calls (%s)",
            before_messages,
            len(ledger.messages),
            before_tokens,
            ledger.total,
            len(todo),
            calls,
            reason,
        )
        names = {r.used for r in todo if r.used and not r.capped} or {self.fallback.name}
        capped = sum(1 for r in todo if r.capped)
        return self._done(
            ledger,
            outcome,
            t0,
            before_tokens,
            before_messages,
            reason=reason,
            absorbed=len(absorbed),
            users_folded=len(folded),
            input_tokens=input_tokens,
            summarizer="+".join(sorted(names)),
            error=next((r.error for r in todo if r.error), None),
            summarizer_input_tokens=input_tokens,
            fallback=True if fallback else None,
            runs=len(todo),
            summarizer_calls=calls,
            capped_runs=capped or None,
            summarizer_output_tokens=sum(self.counter.count_text(r.summary or "") for r in todo),
        )

    def _summarize_runs(self, todo: list[_Run], focus: str | None) -> tuple[int, tuple[str, str | None, str] | None]:
        """A summary for every run, newest first: the newest ``batch_max_calls`` runs with new material by the
        summarizer, older ones (and runs of old markers only) deterministically, without a model call.

        The summarizer's input limit is shared by the runs in proportion to their size, so the calls read
        together no more than one call over the whole middle would. Returns (summarizer calls, failure): the
        failure is (outcome, error, summarizer) when a run got no summary; then nothing may be written.
        """
        budget = self.config.auxiliary.compression.max_input_tokens
        sizes = {id(r): self.counter.count_text(render_exchange(r.material)) for r in todo}
        called = [r for r in todo if r.material][-self.cfg.batch_max_calls :]
        total = sum(sizes[id(r)] for r in called)
        calls, capped = 0, 0
        for run in reversed(todo):
            if not run.material:  # old markers only (a micro marker, or several): kept as they are, as one
                run.summary = run.previous
                continue
            size = sizes[id(run)]
            share = (
                budget
                if total <= budget or run not in called
                else max(int(budget * size / total), min(size, budget // (2 * len(called))))
            )
            bounded = self.bound_input(run.material, share)
            run.input_tokens = self.counter.count_text(render_exchange(bounded)) + self.counter.count_text(run.previous)
            self.largest_input_tokens = max(self.largest_input_tokens, run.input_tokens)
            if calls >= self.cfg.batch_max_calls:
                run.summary = self._fallback_text(run.previous, bounded, focus, run.input_tokens)
                run.used, run.capped = self.fallback.name, True
                capped += 1
                continue
            summary, outcome, error, used = self._call(run.previous, bounded, focus, run.input_tokens)
            calls += 1
            if summary is None:
                return calls, (outcome, error, used)
            run.summary, run.outcome, run.error, run.used = summary, outcome, error, used
        if capped:
            log.info(
                "Batch compaction: %d older runs of work beyond batch_max_calls=%d summarized by the "
                "deterministic extractive summary",
                capped,
                self.cfg.batch_max_calls,
            )
        return calls, None

    def _kept_cost(self, msgs: list[Message], tokens: list[int], h: int, t: int, users: list[int]) -> int:
        """What the middle would still hold after a compaction keeping ``users`` verbatim, at least: the users,
        an earlier batch marker kept as it is, and for every other run of work the frame of its marker (what
        keeping time order costs; a chat of one-line turns would otherwise need more markers than it has text)."""
        frame = self.counter.count_message(render_marker("", "batch"))
        cost = sum(tokens[i] for i in users)
        for run in split_runs(msgs, h, t, set(users)):
            if len(run) == 1 and marker_kind(msgs[run[0]]) == "batch":
                cost += tokens[run[0]]
            else:
                cost += frame
        return cost

    def _shortfall(self, tokens: list[int], absorbed: list[int], previous_tokens: int, markers: int) -> int:
        """How many tokens short of ``batch_min_free_ratio`` of the threshold a compaction of ``absorbed``
        would free (0 when it frees enough). The new summaries are assumed to be as long as the previous ones
        plus a little (and each further marker its frame), so markers free nothing."""
        threshold = self.config.threshold_tokens()
        if not threshold:
            return 0
        need = int(self.cfg.batch_min_free_ratio * threshold)
        frames = max(0, markers - 1) * self.counter.count_message(render_marker("", "batch"))
        expected = sum(tokens[i] for i in absorbed) - previous_tokens - SUMMARY_ALLOWANCE_TOKENS - frames
        return max(0, need - expected)

    def bound_input(self, material: list[Message], budget: int | None = None) -> list[Message]:
        """Redacted copies within ``budget`` (the summarizer's input limit by default); whole messages cut
        head-and-tail with a note."""
        budget = budget or self.config.auxiliary.compression.max_input_tokens
        prepared = prepare_exchange(material, budget, self.counter.count_text)
        counts = [self.counter.count_text(render_exchange([m])) for m in prepared]
        if sum(counts) <= budget * 1.05:
            return prepared
        head: list[Message] = []
        tail: list[Message] = []
        spent = 0
        lo, hi = 0, len(prepared) - 1
        while lo <= hi:  # alternate oldest and newest so both ends survive
            side = lo if len(head) <= len(tail) else hi
            if spent + counts[side] > budget:
                break
            spent += counts[side]
            if side == lo:
                head.append(prepared[lo])
                lo += 1
            else:
                tail.append(prepared[hi])
                hi -= 1
        omitted = prepared[lo : hi + 1]
        note = {
            "role": "assistant",
            "content": OMITTED_MESSAGES.format(count=len(omitted), tokens=sum(counts[lo : hi + 1])),
        }
        return head + ([note] if omitted else []) + list(reversed(tail))

    def _call(
        self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int
    ) -> tuple[str | None, str, str | None, str]:
        """(summary, outcome, error, summarizer name): the configured model, else the fallback when at risk."""
        name = getattr(self.summarizer, "name", "?")
        blocked = self.backoff.blocked()
        error = None
        if blocked is None:
            s0 = self.clock()
            try:
                text = self._clean(self.summarizer.batch(previous, bounded, focus), input_tokens)
                self.summarizer_ms_total += (self.clock() - s0) * 1000
                self.backoff.succeeded()
                return text, Outcome.COMPACTED, None, name
            except Exception as exc:
                self.summarizer_ms_total += (self.clock() - s0) * 1000
                self.backoff.failed(exc)
                error = type(exc).__name__
                level = logging.ERROR if isinstance(exc, SummarizerAuthError) else logging.WARNING
                log.log(level, "Batch compaction: summarizer failed (%s: %s)", error, str(exc)[:200])
                blocked = self.backoff.blocked()
        # The model is unavailable. Keep the session alive with the deterministic summary when it matters.
        if self._risk:
            text = self._fallback_text(previous, bounded, focus, input_tokens)
            log.warning("Batch compaction: using the deterministic extractive summary (%s)", blocked or error)
            return text, Outcome.FALLBACK, error, self.fallback.name
        outcome = (
            Outcome.AUTH_FAILED
            if self.backoff.auth_error
            else (Outcome.COOLDOWN if error is None else Outcome.SUMMARIZE_FAILED)
        )
        return None, outcome, error or blocked, name

    def _fallback_text(self, previous: str, bounded: list[Message], focus: str | None, input_tokens: int) -> str:
        """The deterministic summary, always valid: never empty and never longer than what it summarizes.

        The extractive summary can come out empty (nothing extractable) or, on a small middle, longer than
        its input (section headings, a quoted previous summary); the session is near the context limit, so
        the fallback shortens it deterministically instead of failing.
        """
        limit = max(input_tokens, 200)
        try:
            text = redact_text(str(self.fallback.batch(previous, bounded, focus) or "")).strip()
        except Exception:
            log.exception("Batch compaction: the extractive summary failed; using a bare note")
            text = ""
        if not text:
            text = FALLBACK_NOTE.format(count=len(bounded), tokens=input_tokens)
        if self.counter.count_text(text) > limit:
            text = shorten_summary(text, limit, self.counter.count_text)
        return self._clean(text, input_tokens)

    def _clean(self, text: Any, input_tokens: int) -> str:
        return clean_summary(text, max(input_tokens, 200), self.counter.count_text)

    def _commit(self, event: Any, msgs: list[Message]) -> bool:
        return commit_or_log(
            self.commit, event, msgs, "Batch compaction: store commit failed, transcript left as it was"
        )

    # ------------------------------------------------------------------ last resort

    def last_resort(self, ledger: Ledger) -> BatchResult | None:
        """Cut the largest tool outputs and assistant texts head-and-tail until the prompt fits the window.

        Runs before a request, after batch and micro compaction did what they could: one iteration of large
        parallel reads, or a huge message in the head or the protected tail, can still take a small window
        over its limit. Each cut keeps the start and the end of the text with an explicit omission note; the
        original stays in the store (absorbed by its cut copy). User and system messages and markers are
        never cut, so only they alone can still exceed the window. Never raises.
        """
        limit = self.config.model.context_length
        if not limit or not self.cfg.enabled or self.counter.estimate_prompt(ledger.total) <= limit:
            return None
        t0 = self.clock()
        before_tokens, before_messages = ledger.total, len(ledger.messages)
        self._extra = {}
        try:
            event = self._plan_cuts(ledger, limit)
            if event is None:  # only user and system messages, markers and small messages are left
                log.warning(
                    "Request over the context window (%d tokens, limit %d) and nothing left to cut",
                    self.counter.estimate_prompt(ledger.total),
                    limit,
                )
                return None
            if not self._commit(event, ledger.messages):
                return self._finish(ledger, Outcome.STORE_FAILED, t0, before_tokens, before_messages, reason="window")
            apply_event(ledger, event)
        except Exception as exc:
            log.exception("Last-resort cut failed unexpectedly; transcript left as it was")
            return self._finish(
                ledger, Outcome.ERROR, t0, before_tokens, before_messages, reason="window", error=type(exc).__name__
            )
        log.warning(
            "Request over the context window: cut %d message(s) head-and-tail, %d -> %d tokens (the "
            "originals are kept in the store)",
            len(event.replacements),
            before_tokens,
            ledger.total,
        )
        return self._finish(
            ledger, Outcome.TRUNCATED, t0, before_tokens, before_messages, reason="window", cut=len(event.replacements)
        )

    def _plan_cuts(self, ledger: Ledger, limit: int) -> Prune | None:
        """Cuts, largest message first, that bring the prompt under ``limit`` minus a small margin."""
        msgs, tokens = ledger.messages, ledger.tokens
        target = limit - max(CUT_MARGIN_MIN_TOKENS, int(CUT_MARGIN_SHARE * limit))
        excess = self.counter.estimate_prompt(ledger.total) - target
        candidates = sorted(
            (i for i, m in enumerate(msgs) if _cuttable(m) and tokens[i] > CUT_MIN_TOKENS),
            key=lambda i: (-tokens[i], -i),
        )
        replacements: list[tuple[int, Message]] = []
        for i in candidates:
            if excess <= 0:
                break
            keep = max(CUT_KEEP_TOKENS, tokens[i] - excess - CUT_NOTE_TOKENS)
            if keep >= tokens[i] - CUT_NOTE_TOKENS:
                continue
            cut = cut_message(msgs[i], tokens[i], keep)
            saved = tokens[i] - self.counter.count_message(cut)
            if saved <= 0:
                continue
            replacements.append((i, cut))
            excess -= saved
        return Prune(tuple(sorted(replacements, key=lambda r: r[0]))) if replacements else None

    # ------------------------------------------------------------------ bookkeeping and telemetry

    def _done(
        self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
    ) -> BatchResult:
        """Anti-thrash: two compactions in a row that free too little pause automatic compaction."""
        threshold = self.config.threshold_tokens()
        freed = before_tokens - ledger.total
        min_free = int(self.cfg.batch_min_free_ratio * threshold) if threshold else 0
        pause = extra.pop("pause_tokens", 0)
        if threshold and freed < min_free:
            self.low_yield += 1
        else:
            self.low_yield = 0
            self.paused_below = None
        if threshold and self.low_yield >= 2:
            self.paused_below = ledger.total + min_free
            log.warning(
                "Batch compaction: freed under %.0f%% of the threshold twice in a row; automatic compaction "
                "paused until the transcript reaches %d tokens",
                100 * self.cfg.batch_min_free_ratio,
                self.paused_below,
            )
        elif threshold and freed >= min_free and ledger.total > threshold:
            # Converge: what stayed (head, tail, verbatim users) keeps it over the threshold, so compacting again
            # at the next request would free little; wait until the transcript has grown meaningfully.
            pause = max(pause, min_free)
        if pause:
            self.paused_below = max(self.paused_below or 0, ledger.total + pause)
        if self.paused_below is not None and (pause or self.low_yield >= 2):
            extra["paused_until_tokens"] = self.paused_below
        return self._finish(ledger, outcome, t0, before_tokens, before_messages, **extra)

    def _finish(
        self, ledger: Ledger, outcome: str, t0: float, before_tokens: int, before_messages: int, **extra: Any
    ) -> BatchResult:
        threshold = self.config.threshold_tokens()
        record: dict[str, Any] = {
            "event": "batch_compaction",
            "session_id": self.session_id,
            "outcome": outcome,
            "tokens_before": before_tokens,
            "tokens_after": ledger.total,
            "tokens_delta": ledger.total - before_tokens,
            "messages_before": before_messages,
            "messages_after": len(ledger.messages),
            "duration_ms": round((self.clock() - t0) * 1000, 3),
            "summarizer": getattr(self.summarizer, "name", "?"),
            "threshold_tokens": threshold,
            "context_limit": self.config.model.context_length,
            "occupancy_pct": occupancy_pct(self.counter.estimate_prompt(ledger.total), threshold),
            "compactions_total": self.compactions,
        }
        record.update({k: v for k, v in {**self._extra, **extra}.items() if v is not None})
        if record["tokens_after"] > (threshold or record["tokens_after"]) and outcome in (
            BATCH_COMPACTIONS | {Outcome.PRUNED}
        ):
            record["still_over_threshold"] = True
            # Why: what compaction may not touch (head and tail) and what it keeps verbatim (user messages).
            msgs, tokens = ledger.messages, ledger.tokens
            window = Window.of(msgs, tokens, self.config)
            h, t = window.head, window.tail
            record["head_tokens"] = sum(tokens[:h])
            record["tail_tokens"] = sum(tokens[t:])
            record["middle_user_tokens"] = sum(tokens[i] for i in range(h, t) if msgs[i].get("role") == "user")
        emit("batch", record)
        return BatchResult(outcome, record)
