"""Choosing what the next pass absorbs: boundaries every rule of the contract allows.

The rules live in :mod:`microcompact.properties`: iterations end where :data:`TOOL_PAIRING` allows a cut
(after all of a call's results), user messages are kept (:data:`USER_MESSAGES`), markers and instructions
are never absorbed (:func:`absorbable`), and nothing crosses the :class:`~microcompact.window.Window`'s
head or tail (:class:`Head`, :class:`Tail`). The functions here are pure: they read the transcript, its
token counts, the window and the rolling state, and return a :class:`Span` or the reason there is none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import replace

from ..config import Config
from ..events import Outcome, Span
from ..messages import Message, tool_call_ids
from ..properties import TOOL_PAIRING, USER_MESSAGES, Tail, absorbable
from ..render import content_text
from ..window import Window, bounded_exchange, exchange_start, iteration_end
from .in_use_spans import keep_in_use
from .state import RollingSummary

# How many spans wholly in use a pass looks past before it gives up (bounded work per pass).
MAX_KEPT_SPANS = 64


def span_key(messages: Sequence[Message], start: int) -> str:
    """A stable name for the exchange starting at ``start``: a digest of its first message, which does not
    change when earlier splices move it (so skip memory survives restarts)."""
    m = messages[start]
    digest = hashlib.sha1((content_text(m) + "|".join(tool_call_ids(m))).encode("utf-8", "replace")).hexdigest()
    return digest[:16]


def piece_budget(config: Config, window: Window) -> int:
    """Tokens one pass may absorb; with a reclaim gate, enough to meet it with room for the summary."""
    return max(window.piece_budget, 2 * config.compression.micro_compact_min_reclaim_tokens)


def runs_into_tail(msgs: Sequence[Message], end: int, limit: int) -> bool:
    """True when an exchange reaching the tail's start goes on inside it (its turn has not ended)."""
    return end == limit and limit < len(msgs) and USER_MESSAGES.may_absorb(msgs[limit])


def select_span(
    msgs: Sequence[Message],
    tokens: Sequence[int],
    window: Window,
    state: RollingSummary,
    config: Config,
    mode: str,
    *,
    keep: Collection[int] | None = None,
) -> tuple[Span | None, str]:
    """The span the next pass would absorb, or (None, reason): :func:`oldest_span`, and with ``keep`` (the
    starts of the iterations still in use, :mod:`.working_set`) those left in place and what the kept zone
    no longer keeps absorbed (:func:`.in_use_spans.keep_in_use`). Without ``keep``, by age alone."""
    span, reason = oldest_span(msgs, tokens, window, state, config, mode)
    if span is None or keep is None:
        return span, reason
    first = span.start
    for _ in range(MAX_KEPT_SPANS):
        whole = Span(first, span.end, span.tokens, span.kept, span.partial)
        kept, reason = keep_in_use(msgs, tokens, whole, keep, state.marker_index, window.head)
        if kept is not None:
            return kept, ""
        # All of it in use: it stays in place, and the pass looks on past it (what is in use never blocks
        # the fold of what follows).
        span, _ = oldest_span(msgs, tokens, window, replace(state, cursor=span.end), config, mode)
        if span is None:
            break
    return None, reason


def oldest_span(
    msgs: Sequence[Message], tokens: Sequence[int], window: Window, state: RollingSummary, config: Config, mode: str
) -> tuple[Span | None, str]:
    """The span the next pass would absorb by age, or (None, reason).

    At the end of a turn (``mode="turn"``) that is the oldest whole exchange, or, when it is larger than
    the piece budget, its oldest completed iterations up to that budget. Before a model request
    (``mode="request"``) it is the oldest completed iterations outside the tail, across turns, once at
    least that budget of them has piled up: this keeps a turn still in progress (80-270 messages in real
    coding sessions) from ever reaching the threshold, while each pass stays small.
    """
    h, t = window.head, window.tail
    assert state.cursor is not None
    start = exchange_start(msgs, max(state.cursor, h), t)
    while start is not None and state.skipped and span_key(msgs, start) in state.skipped:
        # Skipped after repeated failures (remembered across restarts): leave it for batch compaction.
        end, _ = bounded_exchange(msgs, tokens, start, t, 1 << 62)
        start = exchange_start(msgs, end, t)
    if start is None:
        return None, "nothing in the middle"
    budget = piece_budget(config, window)
    if mode in ("request", "drain"):  # drain: a fold's request pass, whatever has piled up (no minimum)
        minimum = budget if mode == "request" else 0
        span, reason = piece(msgs, tokens, start, t, budget, across_turns=True, minimum=minimum)
        floor = state.gate_floor
        if span and floor and floor[0] == span_key(msgs, span.start) and span.tokens <= floor[1]:
            return None, "reclaim gate: waiting for more"
        return span, reason
    end, size = bounded_exchange(msgs, tokens, start, t, budget)
    if size > budget:
        return piece(msgs, tokens, start, t, budget, across_turns=False, minimum=0)
    if runs_into_tail(msgs, end, t):
        return None, "exchange runs into the tail"
    span = Span(start, end, size)
    gate = config.compression.micro_compact_min_reclaim_tokens
    if gate and state.marker_index is not None:
        return grow_for_gate(msgs, tokens, span, t, budget, gate, state.gate_floor)
    return span, ""


def _iteration_units(
    msgs: Sequence[Message], tokens: Sequence[int], start: int, limit: int, want: int, *, across_turns: bool
) -> tuple[list[tuple[int, int, bool]], int]:
    """Completed iterations (and, ``across_turns``, the user messages between them) from ``start`` until
    ``want`` tokens of iterations are found or the tail is reached: ``[(start, end, is_user)]``, tokens."""
    tail = Tail(limit)
    units: list[tuple[int, int, bool]] = []
    available = 0
    i = start
    while i < limit and available < want:
        m = msgs[i]
        if across_turns and not USER_MESSAGES.may_absorb(m):
            units.append((i, i + 1, True))  # a user message stays where it is (Span.kept)
            i += 1
            continue
        if m.get("role") != "assistant" or not absorbable(m):
            break
        end = iteration_end(msgs, i)
        if end is None:
            # Results missing: if the turn went on after it (an interrupted tool in a recording), the
            # iteration is finished and absorbing it repairs the pairing; at the end it is in progress.
            end = TOOL_PAIRING.forward(msgs, i + 1)
            if not tail.may_absorb(end):
                break
        if not tail.allows_cut(msgs, end):
            break
        units.append((i, end, False))
        available += sum(tokens[i:end])
        i = end
    return units, available


def piece(
    msgs: Sequence[Message],
    tokens: Sequence[int],
    start: int,
    limit: int,
    budget: int,
    *,
    across_turns: bool,
    minimum: int,
) -> tuple[Span | None, str]:
    """The oldest completed iterations from ``start`` up to ``budget`` tokens (at least one).

    With ``across_turns`` the piece may pass user messages, which stay where they are (``Span.kept``).
    Nothing is returned unless at least ``minimum`` tokens of iterations are available before ``limit``.
    """
    units, available = _iteration_units(msgs, tokens, start, limit, max(minimum, budget + 1), across_turns=across_turns)
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
        if total and total + cost > budget:
            break
        kept += pending_users
        pending_users = []
        total += cost
        end = e
    return Span(start, end, total, tuple(kept), partial=True), ""


def grow_for_gate(
    msgs: Sequence[Message],
    tokens: Sequence[int],
    span: Span,
    limit: int,
    cap: int,
    need: int,
    gate_floor: tuple[str, int] | None,
) -> tuple[Span | None, str]:
    """Extend the span with following whole exchanges (passing the user messages between them, which stay)
    until it can meet the reclaim gate ``need`` and beats the last span the gate refused."""
    key = span_key(msgs, span.start)
    refused = gate_floor[1] if gate_floor and gate_floor[0] == key else -1
    start, end, total, kept = span.start, span.end, span.tokens, list(span.kept)
    while total < need or total <= refused:
        users = []
        i = end
        while i < limit and not USER_MESSAGES.may_absorb(msgs[i]):
            users.append(i)
            i += 1
        nxt = exchange_start(msgs, i, limit)
        if nxt != i:
            break
        nend, add = bounded_exchange(msgs, tokens, nxt, limit, cap)
        if add > cap or runs_into_tail(msgs, nend, limit) or (total + add > cap and total >= need):
            break
        kept += users
        end, total = nend, total + add
    if total < need or total <= refused:
        return None, Outcome.NO_RECLAIM
    return Span(start, end, total, tuple(kept)), ""
