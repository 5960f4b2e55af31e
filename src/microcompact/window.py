"""Head, middle and tail of a transcript, and the units a pass may absorb.

- The **head** (system prompt plus the first ``protect_first_n`` messages) and the token-budgeted **tail**
  are never rewritten; passes only work on the middle between them.
- An **iteration** is one assistant message with all results of its tool calls. It is the smallest unit
  that can be absorbed without splitting a tool call from its result.
- An **exchange** is a whole agent turn: consecutive iterations up to (not including) the next user
  message. User messages are never part of one.

All functions here are pure and cost time proportional to the part of the transcript they look at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .events import Span  # noqa: F401  (re-exported: the unit window functions describe)
from .messages import Message, is_marker, tool_call_ids
from .properties import TOOL_PAIRING, USER_MESSAGES, absorbable

if TYPE_CHECKING:
    from .config import Config


def head_end(
    messages: Sequence[Message], protect_first_n: int, tokens: Sequence[int] | None = None, budget: int | None = None
) -> int:
    """Index of the first message after the protected head.

    The head is the leading system/developer message(s) plus ``protect_first_n`` messages, extended so it
    never ends between a tool call and its results. With ``tokens`` and ``budget``, it also ends before the
    first assistant message (with its results) that would take the head's non-user messages over
    ``budget``: a huge early tool output is not pinned forever. It never holds a marker, so once a
    pass absorbed what left it, it stays where it is.
    """
    n = len(messages)
    i = 0
    while i < n and messages[i].get("role") in ("system", "developer"):
        i += 1
    end = TOOL_PAIRING.forward(messages, min(n, i + protect_first_n))
    if tokens is None or budget is None:
        return end
    spent, k = 0, i
    while k < end:
        m = messages[k]
        if is_marker(m):
            return k
        unit = k + 1
        while unit < end and messages[unit].get("role") == "tool":
            unit += 1
        if USER_MESSAGES.may_absorb(m):  # user messages are never absorbed: they cost the head nothing
            spent += sum(tokens[k:unit])
            if spent > budget:
                return k
        k = unit
    return end


@dataclass(frozen=True)
class WindowBudget:
    """What a window is computed from: the protected head (``protect_first_n`` messages within
    ``head_tokens`` of non-user ones), the protected tail (``tail_tokens``, at least ``tail_messages``
    messages) and one pass's piece. A fold narrows the tail (:meth:`narrowed`); nothing else does."""

    protect_first_n: int
    head_tokens: int
    tail_tokens: int
    tail_messages: int
    piece_tokens: int

    @classmethod
    def of(cls, config: Config) -> WindowBudget:
        """The budgets ``config`` sets (or derives)."""
        return cls(
            protect_first_n=config.compression.protect_first_n,
            head_tokens=config.head_budget_tokens(),
            tail_tokens=config.tail_budget_tokens(),
            tail_messages=config.tail_min_messages(),
            piece_tokens=config.piece_budget_tokens(),
        )

    def narrowed(self, tail_tokens: int | None, tail_messages: int | None) -> WindowBudget:
        """This budget with its tail shrunk to ``tail_tokens`` and to ``tail_messages`` messages (never grown;
        None: as it is). ``tail_messages=0`` allows an empty tail: a fold computed ahead."""
        tokens = self.tail_tokens if tail_tokens is None else min(self.tail_tokens, max(0, tail_tokens))
        messages = self.tail_messages if tail_messages is None else min(self.tail_messages, max(0, tail_messages))
        if (tokens, messages) == (self.tail_tokens, self.tail_messages):
            return self
        return replace(self, tail_tokens=tokens, tail_messages=messages)


def protected_head(messages: Sequence[Message], tokens: Sequence[int], config: Config | WindowBudget) -> int:
    """:func:`head_end` as the engines use it: ``protect_first_n`` within the head budget."""
    budget = config if isinstance(config, WindowBudget) else WindowBudget.of(config)
    return head_end(messages, budget.protect_first_n, tokens, budget.head_tokens)


def protected_tail(messages: Sequence[Message], tokens: Sequence[int], config: Config | WindowBudget, head: int) -> int:
    """:func:`tail_start` as the engines use it."""
    budget = config if isinstance(config, WindowBudget) else WindowBudget.of(config)
    return tail_start(messages, tokens, budget.tail_tokens, min_messages=budget.tail_messages, floor=head)


@dataclass(frozen=True)
class Window:
    """Where a pass may work, computed once per pass and handed down: ``head`` is the first message after
    the protected head, ``tail`` the first message of the protected tail (``head <= tail``); the budgets
    are the token budgets those ends and one pass's piece were computed from."""

    head: int
    tail: int
    head_budget: int
    tail_budget: int
    piece_budget: int

    @classmethod
    def of(cls, messages: Sequence[Message], tokens: Sequence[int], budget: WindowBudget) -> Window:
        """The window of ``messages`` (with their token counts) under ``budget``."""
        h = protected_head(messages, tokens, budget)
        return cls(
            head=h,
            tail=protected_tail(messages, tokens, budget, h),
            head_budget=budget.head_tokens,
            tail_budget=budget.tail_tokens,
            piece_budget=budget.piece_tokens,
        )

    def in_tail(self, index: int) -> bool:
        """True when ``messages[index]`` is in the protected tail (never rewritten there)."""
        return index >= self.tail


def tail_start(
    messages: Sequence[Message], tokens: Sequence[int], budget: int, *, min_messages: int = 3, floor: int = 0
) -> int:
    """Index of the first message of the protected tail.

    Walks back from the end while the token budget lasts, always keeping at least ``min_messages`` and never
    starting the tail on a tool result (the call that produced it comes along), nor on what the client said
    right after one (user or system messages: the iteration they answer comes along). ``floor`` (the head's end) is
    the lowest index the tail may reach. The last user message is never absorbed by any pass, so it needs no
    positional protection here: a long turn's early iterations can leave the tail while its user message stays.
    An empty tail (``min_messages=0``: a fold computed ahead) still keeps a tool call at the end whose results
    have not all come: they come after it, never after a marker.
    """
    n = len(messages)
    start = n
    spent = 0
    while start > floor:
        cost = tokens[start - 1]
        if n - start >= min_messages and spent + cost > budget:
            break
        spent += cost
        start -= 1
    start = TOOL_PAIRING.backward(messages, start, floor)
    said = _said_from(messages, start, floor)
    if floor < said < n and messages[said - 1].get("role") == "tool":
        # The newest message holds tool results and text (Anthropic's tool_result blocks beside a reminder or a
        # notification, split into tool and user or system messages): the iteration it answers stays with it,
        # so it goes out whole.
        start = TOOL_PAIRING.backward(messages, said - 1, floor)
    if start == n > floor:
        call = TOOL_PAIRING.backward(messages, n - 1, floor)
        if messages[call].get("role") == "assistant" and iteration_end(messages, call) is None:
            return call
    return start


_CALLS_AND_RESULTS = ("assistant", "tool")  # roles of an iteration; any other is what the client said


def _said_from(messages: Sequence[Message], start: int, floor: int) -> int:
    """Where the run of messages ending the transcript that are neither calls nor results begins (what the client
    said after the newest iteration: user text, a notification as a system message), when ``messages[start:]``
    lies in it (above ``floor``); ``len(messages)`` otherwise."""
    n = len(messages)
    if start >= n or any(m.get("role") in _CALLS_AND_RESULTS for m in messages[start:]):
        return n
    while start > floor and messages[start - 1].get("role") not in _CALLS_AND_RESULTS:
        start -= 1
    return start


def iteration_end(messages: Sequence[Message], start: int) -> int | None:
    """End (exclusive) of the iteration starting at ``start``, or None when it is not complete.

    Complete means every tool call of the assistant message has its result right after it.
    """
    n = len(messages)
    msg = messages[start]
    if msg.get("role") != "assistant":
        return None
    pending = set(tool_call_ids(msg))
    end = start + 1
    while end < n and messages[end].get("role") == "tool":
        pending.discard(str(messages[end].get("tool_call_id")))
        end += 1
    return end if not pending else None


def bounded_exchange(
    messages: Sequence[Message], tokens: Sequence[int], start: int, limit: int, budget: int
) -> tuple[int, int]:
    """(end, tokens) of the exchange at ``start``, looking no further than ``limit`` (the tail's start)
    and no further than needed to know it exceeds ``budget``: a pass never walks a long turn to its end.
    """
    end, size = start, 0
    while end < limit and size <= budget:
        m = messages[end]
        # The exchange ends at a message that stays (user, instruction) or, past its first, a marker.
        if not absorbable(m) and (end > start or not is_marker(m)):
            break
        size += tokens[end]
        end += 1
    return end, size


def exchange_start(messages: Sequence[Message], cursor: int, limit: int) -> int | None:
    """First assistant message at or after ``cursor`` and before ``limit`` that starts an exchange.

    User messages (never absorbed) and markers (already summaries) are skipped.
    """
    i = cursor
    while i < limit:
        m = messages[i]
        if m.get("role") == "assistant" and absorbable(m):
            return i
        i += 1
    return None
