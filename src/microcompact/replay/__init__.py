"""Replay a recorded transcript through a :class:`Session`, as the agent would have lived it.

Messages are appended in order. Before each assistant message (a model request) ``before_request`` runs
and the prompt size is sampled; a turn ends before each user message and at the end, where
``finalize_turn`` runs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsoninput
from ..events import BATCH_COMPACTIONS, Outcome
from ..identity import digest
from ..keys import META_KEY, ROW_KEY, SRC_KEY, TS_KEY
from ..messages import (
    Message,
    TranscriptError,
    message_shape_errors,
    validate_message,
)
from ..properties import check_tool_pairing
from ..session import Session
from ..store.codec import stored_form

REPAIR_HINT = (
    "replay --repair drops orphan tool results, adds a result for interrupted calls and renames "
    "duplicate tool-call ids, reporting each"
)


def iter_located(path: str | Path) -> Iterator[tuple[str, Message]]:
    """(where, message) for each message: ``FILE:LINE`` (1-based) for JSONL, ``FILE: element I`` for a JSON
    array or an object with a ``messages`` list (what ``import --from openai`` accepts). Each message is
    strict JSON (no NaN/Infinity, no lone surrogates, bounded nesting) and well-formed (role, content parts,
    tool calls); a problem raises TranscriptError naming the place."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"cannot read transcript {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for where, m in jsoninput.message_values(text, str(p)):
        yield _checked(m, where)


def _checked(m: Any, where: str) -> tuple[str, Message]:
    if isinstance(m, dict) and "role" not in m:  # most likely a recorded session in its agent's own format
        keys = ", ".join(sorted(m)) or "none"
        raise TranscriptError(
            f"{where}: message has no 'role' (keys: {keys}); to replay an agent's recorded session, convert it "
            "first: microcompact import FILE --out FILE.jsonl"
        )
    validate_message(m, where)
    problems = message_shape_errors(m)
    if problems:
        raise TranscriptError(f"{where}: {problems[0]}")
    jsoninput.field_types(m, where)
    jsoninput.library_keys(m, where)
    return where, {k: v for k, v in m.items() if v is not None or k == "content"}


def read_transcript(path: str | Path, *, repair: bool = False) -> tuple[list[Message], list[str]]:
    """The messages of ``path`` and one line per repair made (with ``repair``; naming its line), plus one
    note when client-history keys were dropped (see :mod:`microcompact.jsoninput`).

    Without ``repair`` a defect (orphan tool result, call with no result, duplicate tool-call id) raises
    TranscriptError naming the first one's line and saying that ``--repair`` exists. An empty file is an
    error either way.
    """
    located = list(iter_located(path))
    if not located:
        raise TranscriptError(f"{path}: no messages in the file")
    wheres = [w for w, _ in located]
    read = [jsoninput.without_history_keys(m) for _, m in located]
    dropped = sum(1 for (_, m), kept in zip(located, read, strict=True) if kept is not m)
    messages, defects = check_tool_pairing(read)
    if defects and not repair:
        i, problem, _action = defects[0]
        more = f" (and {len(defects) - 1} more defect(s))" if len(defects) > 1 else ""
        raise TranscriptError(f"{wheres[i]}: {problem}{more}; {REPAIR_HINT}")
    notes = [f"repaired {wheres[i]}: {problem}: {action}" for i, problem, action in defects]
    if dropped:
        notes.append(
            f"note: {path}: dropped the client-history keys ({', '.join(jsoninput.HISTORY_KEYS)}) of {dropped} "
            "message(s): they index a proxy's or an Agents SDK's history, which a replay does not have"
        )
    return messages, notes


def load_transcript(path: str | Path, *, repair: bool = False) -> list[Message]:
    """The messages of ``path`` (see :func:`read_transcript`)."""
    return read_transcript(path, repair=repair)[0]


@dataclass
class ReplayStats:
    messages_in: int = 0
    turns: int = 0
    model_requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    samples: list[int] = field(default_factory=list)  # prompt tokens at every model request
    raw_samples: list[int] = field(default_factory=list)  # the same without any compaction
    raw_final: int = 0
    occupancy: list[float] = field(default_factory=list)
    passes: list[dict[str, Any]] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)
    batch_outcomes: Counter[str] = field(default_factory=Counter)

    def record(self, results: list[Any]) -> None:
        for r in results:
            if r.record.get("event") == "batch_compaction":
                self.batch_outcomes[r.outcome] += 1
                self.batches.append(r.record)
            else:
                self.outcomes[r.outcome] += 1
                self.passes.append(r.record)


class SimClock:
    """Simulated wall clock for replays: the time of the model request being replayed."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def request_times(messages: list[Message], assumed_gap_seconds: float) -> tuple[list[float], bool]:
    """Time of each message: its ``_ts`` where recorded, else ``assumed_gap_seconds`` after the previous
    model request. Returns (times, whether any recorded timestamp was used)."""
    times: list[float] = []
    now, recorded = 0.0, False
    for m in messages:
        ts = m.get(TS_KEY)
        if isinstance(ts, (int, float)):
            now, recorded = float(ts), True
        elif m.get("role") == "assistant":
            now += assumed_gap_seconds
        times.append(now)
    return times, recorded


def resume_point(session: Session) -> int:
    """How many messages of the recorded transcript a stored session already holds (replay tags each
    appended message with its index as ``_src``; the tail, never rewritten, keeps the latest ones)."""
    return max((m[SRC_KEY] for m in session.ledger.messages if isinstance(m.get(SRC_KEY), int)), default=-1) + 1


class ResumeMismatch(TranscriptError):
    """The stored session was not made from this transcript: resuming would mix two conversations."""


def transcript_digest(messages: list[Message]) -> str:
    """A digest of a whole transcript, to name the session a replay stores it in (see
    :func:`default_session_id`).

    Those names are in users' stores (``replay --db`` finds its session again by them), so these bytes never
    change: each message's API form (keys starting with ``_`` left out) as sorted, compact JSON text (lone
    surrogates as the ``?`` the store keeps), SHA-256 hex, chained with SHA-256. It names a transcript; it
    is not a message's identity, which is :func:`microcompact.identity.digest` (a different encoding:
    ``1e-05`` is ``0.00001`` there, and integers past 64 bits take another path).
    """
    h = hashlib.sha256()
    for m in messages:
        api = {k: v for k, v in m.items() if not k.startswith("_")}
        text = json.dumps(api, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
        h.update(hashlib.sha256(text.encode("utf-8", "replace")).hexdigest().encode("ascii"))
    return h.hexdigest()


def default_session_id(path: str | Path, messages: list[Message]) -> str:
    """The file's stem plus a short digest of its content: two different transcripts never share a stored
    session, even with the same file name; the same transcript finds its session again."""
    return f"{Path(path).stem}-{transcript_digest(messages)[:12]}"


def resume_start(session: Session, messages: list[Message], source: str = "this transcript") -> int:
    """Where a replay of ``messages`` into a stored session resumes: the number of recorded messages the
    store holds, once they are checked to be exactly ``messages``' first ones, in order (a digest per
    message, :func:`microcompact.identity.digest`, of each message as the store would hand it back). Raises
    :class:`ResumeMismatch` naming the first message that differs. O(stored rows), once."""
    store = session.store
    if store is None:
        return 0
    where = f"session {session.session_id!r} in {store.describe() if hasattr(store, 'describe') else 'the store'}"
    originals: dict[int, Message] = {}
    other = 0
    for m in store.export(session.session_id, include_absorbed=True):
        src = m.get(SRC_KEY)
        if not isinstance(src, int) or isinstance(src, bool):
            other += 1
        elif _rewritten(m):
            continue  # a prune's copy of a recorded message (the original row is kept, absorbed)
        elif src in originals:
            raise ResumeMismatch(
                f"{where} holds recorded message {src} twice (two replays wrote it at once, "
                "or it is damaged); replay into a new session (--session NAME)"
            )
        else:
            originals[src] = m
    if not originals:
        if other:
            raise ResumeMismatch(
                f"{where} holds {other} message(s) that no replay wrote; replay into another "
                "session (--session NAME) instead of mixing the two"
            )
        return 0
    count = len(originals)
    if sorted(originals) != list(range(count)):
        missing = next(i for i in range(count) if i not in originals)
        raise ResumeMismatch(
            f"{where} is missing recorded message {missing}; replay into a new session (--session NAME)"
        )
    if count > len(messages):
        raise ResumeMismatch(
            f"{where} holds {count} recorded messages but {source} has only {len(messages)}: "
            "the session was made from another transcript; replay into another session "
            "(--session NAME)"
        )
    for i in range(count):
        if digest(originals[i]) != digest(stored_form(messages[i])):
            raise ResumeMismatch(
                f"{where} was made from another transcript: its message {i} (counting from 0, "
                f"role {originals[i].get('role')}) differs from message {i} of {source} "
                f"(role {messages[i].get('role')}); replay into another session (--session "
                "NAME) instead of mixing the two"
            )
    return count


# What batch pruning marks on the copy it writes of a message it shortened, cut or stubbed; the copy keeps the
# original's ``_src`` (it stands in the same place), the original stays in the store, absorbed.
REWRITE_FLAGS = ("cut", "shortened", "stub")


def _rewritten(message: Message) -> bool:
    meta = message.get(META_KEY)
    return isinstance(meta, dict) and any(meta.get(flag) for flag in REWRITE_FLAGS)


def replay(
    messages: list[Message],
    session: Session,
    on_message: Callable[[int], None] | None = None,
    *,
    clock: SimClock | None = None,
    times: list[float] | None = None,
    on_request: Callable[[int, Session], None] | None = None,
    start: int = 0,
) -> ReplayStats:
    """Drive ``session`` over ``messages[start:]`` (``start`` > 0 resumes a stored session). With ``clock``
    and ``times``, the simulated wall clock is set to each message's time first; ``on_request(i, session)``
    sees the prompt of every model request."""
    stats = ReplayStats(messages_in=len(messages))
    last_user = max((i for i in range(start) if messages[i].get("role") == "user"), default=-1)
    in_turn = any(messages[i].get("role") == "assistant" for i in range(last_user + 1, start))
    if (
        in_turn
        and start
        and session.ledger.messages
        and session.ledger.messages[-1].get(ROW_KEY) == session.finalized_row
    ):
        in_turn = False  # the interrupted run finalized this turn already: running it again would add a pass
    raw_total = 0
    for i in range(start, len(messages)):
        m = messages[i]
        role = m.get("role")
        if clock is not None and times is not None:
            clock.now = times[i]
        if role == "user" and in_turn:
            stats.turns += 1
            stats.record(session.finalize_turn())
            in_turn = False
        if role == "assistant":
            stats.record(session.before_request())
            if on_request:
                on_request(i, session)
            stats.model_requests += 1
            stats.samples.append(session.tokens)
            stats.raw_samples.append(raw_total)
            occ = session.occupancy_pct()
            if occ is not None:
                stats.occupancy.append(occ)
            in_turn = True
        session.append({**m, SRC_KEY: i} if session.store is not None else m)
        raw_total += session.ledger.tokens[-1]
        if on_message:
            on_message(i)
    if in_turn:
        stats.turns += 1
        stats.record(session.finalize_turn())
    stats.record(session.drain())
    stats.raw_final = raw_total
    return stats


# Batch outcomes that rewrote the transcript by summarizing (a prune only stubs old tool outputs).
COMPACTED = BATCH_COMPACTIONS


def batch_freed(batches: list[dict[str, Any]], outcomes: Collection[str]) -> int:
    """Tokens the batch events with these outcomes removed (before minus after, summed)."""
    return sum(
        max(0, int(b.get("tokens_before", 0)) - int(b.get("tokens_after", 0)))
        for b in batches
        if b.get("outcome") in outcomes
    )


def summary_json(stats: ReplayStats, session: Session) -> dict[str, Any]:
    """The machine-readable summary ``replay --json`` prints.

    ``tokens_saved_total`` is what micro passes saved (their own counter); ``tokens_freed_by_batch`` and
    ``tokens_freed_by_prunes`` what batch compactions and prunes removed; ``tokens_saved`` is the whole
    difference between the uncompacted and the final transcript, whatever did it.
    """
    micro, batch = session.micro.stats(), session.batch.stats()
    occ = stats.occupancy
    final_occ = session.occupancy_pct()
    return {
        "session_id": session.session_id,
        "messages_in": stats.messages_in,
        "messages_out": len(session.ledger),
        "turns": stats.turns,
        "model_requests": stats.model_requests,
        "passes": micro.passes_total,
        "outcomes": dict(sorted(stats.outcomes.items())),
        "occupancy": {
            "min": min(occ) if occ else None,
            "median": round(statistics.median(occ), 1) if occ else None,
            "max": max(occ) if occ else None,
            "final": final_occ,
        },
        "peak_tokens": max([*stats.samples, session.tokens]),
        "uncompacted_tokens": stats.raw_final,
        "final_tokens": session.tokens,
        "tokens_saved_total": micro.tokens_saved_total,
        "tokens_saved": stats.raw_final - session.tokens,
        "batch_compactions": batch.compactions,
        "batch_prunes": stats.batch_outcomes.get("pruned", 0),
        "tokens_freed_by_batch": batch_freed(stats.batches, COMPACTED),
        "tokens_freed_by_prunes": batch_freed(stats.batches, {Outcome.PRUNED}),
        "batch_outcomes": dict(sorted(stats.batch_outcomes.items())),
        "micro_passes_per_batch": [b.get("micro_passes_since_last") for b in stats.batches if b["outcome"] in COMPACTED]
        if session.micro.active
        else None,
        "largest_batch_input_tokens": batch.largest_input_tokens,
        "largest_pass_tokens": micro.largest_pass_tokens,
        "summarizer_ms_total": round(micro.summarizer_ms_total + batch.summarizer_ms_total, 1),
        "threshold_tokens": session.config.threshold_tokens(),
        "context_limit": session.config.model.context_length,
        "micro_compact": session.micro.active,
        "summarizer": getattr(session.summarizer, "name", "?"),
        "tokenizer": session.counter.name,
    }
