"""Which earlier tool results the agent is still using: the working set a fold keeps verbatim.

An *iteration* is an assistant message that calls tools plus the results that follow it. Reading the
transcript only (no model), an iteration is **in use** now when

- **the agent's recent replies mention what it holds**: an identifier (:mod:`microcompact.identifiers`,
  the same rule the recall measure counts) in its call's argument values or its results is mentioned by
  one of the last :data:`RECENT_REPLIES` assistant messages (their text and argument values) that came
  after its call, and it is the *newest* iteration holding that identifier (one source in front of the
  model is enough; the newest is the freshest: a re-run's output, the file after the last read); a
  command's output only while :data:`COMMAND_USES` of those replies use it (a value quoted once was taken:
  the reply holds it);
- **the file the agent is editing was read there**: a recent editing call names a path, and this is the
  newest read of that path (the agent needs the text it edits).
- **the agent has not used its output yet**: the newest iterations whose results hold identifiers no reply
  after them mentions, back to (not including) the newest one a reply used, at most :data:`PENDING` before
  the newest (:attr:`WorkingSet.pending`); only when there is such a used one, so an agent that never quotes
  its outputs (a scripted loop) keeps nothing this way. The agent works from them: a re-run of a command
  whose output a fold took comes after the step it was working on, which no reply has quoted yet; folding
  that step away makes the next reply re-run it too (the cascade of issue 26). A fold keeps them whatever
  its budget.

Identifiers that stay in front of the model whatever a fold does (in user and system messages and in
markers) make nothing in use. An iteration that is not in use is **stale** when the model would be misled
or served twice by it: a read of a path edited since, or a call re-run since with the same arguments.

Why the last 12 replies (:data:`RECENT_REPLIES`): the identifiers the next reply takes from tool results
are mostly the ones the agent spoke of in its last few steps (``bench/working_set_recall.py`` prints the
sweep on the shared Claude Code sessions). Since a command's output quoted once no longer counts, the
reads and outputs the agent comes back to over a longer stretch do: replayed through ``serve``
(``bench/recall.py``, Anthropic route), 8 replies kept 96.7% of what the agent used next at a 17.4K mean
prompt, 12 kept 97.3% at 18.7K, and the reactive agent's bill was the same.

Cost: a proxy asks this before each request of a 150K-token history. Each message is read once:
:class:`FactsCache` remembers a message's identifiers by the message object itself (the engine's ledger
keeps the same dicts from request to request), so a call costs set operations over the iterations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..identifiers import argument_values, identifiers
from ..messages import Message, is_marker
from ..render import content_text
from ..summarizers.facts_extract import parse_call, tool_kind
from ..summarizers.facts_model import ToolKind

RECENT_REPLIES = 12
# How many recent replies must use a command's output for it to stay in use. A value an agent quotes once
# from a command it ran (a key, an id, a count) was taken: the reply that quoted it holds it verbatim, and
# the marker's findings when that reply is folded; keeping the output too rewrites it at every fold and
# reads it at every request. An output the agent goes back to (two replies or more) is in use. Reads,
# searches and edits stay in use from one mention: they are the text the agent works against. Under a model
# summarizer an engine asks for one use (``micro/in_use.py``, ``command_uses``).
COMMAND_USES = 2
# The most of the working set's budget one iteration may take. A fold rewrites what it keeps (the cache writes
# it again), so one large output the agent quoted a value from (a 24 KB log: ~12K tokens of a 16K budget)
# would be the whole set, rewritten at every fold, and would put the fold off (the price rule sees a large
# rewrite). Measured through serve (docs/cost-and-cache.md, "Fold by use"): the reactive agent's 48 x 24 KB
# task went from 0.72x to 0.62x of direct with as many re-fetches, at two points of recall.
ITEM_SHARE = 0.5
# How many iterations before the newest a fold keeps because no reply has used their output yet: a re-fetch
# after the step the agent works on, and a second one (the reactive agent re-runs up to two lost values a step).
PENDING = 2
_FIXED_ROLES = ("user", "system", "developer")


@dataclass(frozen=True)
class Call:
    """One tool call as the working set sees it."""

    kind: ToolKind
    signature: str  # name and arguments as sent: equal signatures are a re-run
    paths: frozenset[str]  # identifiers with a ``/`` among its argument values


@dataclass(frozen=True)
class Facts:
    """What one message holds: its identifiers (content and argument values) and its calls."""

    idents: frozenset[str]
    calls: tuple[Call, ...] = ()


def _call_of(call: Mapping[str, Any]) -> tuple[Call, frozenset[str]]:
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    raw = function.get("arguments", "")
    found: set[str] = set()
    for value in argument_values(raw):
        found |= identifiers(value)
    name = str(function.get("name") or "")
    signature = f"{name}\x00{raw if isinstance(raw, str) else repr(raw)}"
    paths = frozenset(x for x in found if "/" in x)
    return Call(tool_kind(parse_call(dict(call))), signature, paths), frozenset(found)


def facts_of(message: Message) -> Facts:
    """The :class:`Facts` of one message (uncached: see :class:`FactsCache`)."""
    found = set(identifiers(content_text(message)))
    calls: list[Call] = []
    if message.get("role") == "assistant":
        for raw in message.get("tool_calls") or ():
            if isinstance(raw, Mapping):
                call, idents = _call_of(raw)
                calls.append(call)
                found |= idents
    return Facts(frozenset(found), tuple(calls))


class FactsCache:
    """:func:`facts_of` by message identity: each message of a growing transcript is read once.

    It holds the messages it has seen (so an identity is never reused by another dict); :meth:`retain`
    forgets those no longer in the transcript, which :func:`working_set` does once the cache holds twice
    the transcript (folds drop messages, and a splice copies those it keeps): memory stays the
    transcript's size. One cache per engine; it is not shared across threads.
    """

    def __init__(self) -> None:
        self._facts: dict[int, tuple[Message, Facts]] = {}

    def __call__(self, message: Message) -> Facts:
        hit = self._facts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        facts = facts_of(message)
        self._facts[id(message)] = (message, facts)
        return facts

    def retain(self, messages: Iterable[Message]) -> None:
        keep = {id(m) for m in messages}
        self._facts = {k: v for k, v in self._facts.items() if k in keep}

    def __len__(self) -> int:
        return len(self._facts)


@dataclass(frozen=True)
class WorkingSet:
    """The iterations of a transcript and which of them are in use or stale, by their first index."""

    iterations: Mapping[int, int]  # start -> end (exclusive) of every tool-calling iteration
    in_use: frozenset[int] = frozenset()
    stale: frozenset[int] = frozenset()
    last_use: Mapping[int, int] = field(default_factory=dict)  # in-use start -> index of the newest reply using it
    mentioned: frozenset[str] = frozenset()  # identifiers the recent replies use that only tools showed
    pending: frozenset[int] = frozenset()  # the newest iterations whose output no reply used yet (the newest too)

    def tokens(self, tokens: Sequence[int], starts: Iterable[int] | None = None) -> int:
        """Tokens of the in-use iterations (or of ``starts``)."""
        chosen = self.in_use if starts is None else starts
        return sum(sum(tokens[s : self.iterations[s]]) for s in chosen)

    def keep_within(self, tokens: Sequence[int], budget: int, before: int | None = None) -> frozenset[int]:
        """The in-use iterations a fold keeps within ``budget`` tokens: the most recently used first (what
        nobody referenced for a while goes first), none over :data:`ITEM_SHARE` of the budget; only those
        starting before ``before`` count (the rest sit in the tail, which no fold touches). The pending ones
        (:attr:`pending`) come first, whatever their size: the agent is working from them."""
        chosen = [s for s in self.pending if before is None or s < before]
        spent = self.tokens(tokens, chosen)
        ranked = sorted(
            (s for s in self.in_use if (before is None or s < before) and s not in self.pending),
            key=lambda s: (self.last_use.get(s, s), s),
        )
        for s in reversed(ranked):
            cost = sum(tokens[s : self.iterations[s]])
            if cost <= ITEM_SHARE * budget and spent + cost <= budget:
                chosen.append(s)
                spent += cost
        return frozenset(chosen)

    def dropped(self, keep: Iterable[int], tokens: Sequence[int], before: int | None = None) -> tuple[int, int]:
        """(count, tokens) of the in-use iterations a fold keeping ``keep`` would drop, those starting before
        ``before`` (the tail's start): the re-fetches a price quote names (``FoldQuote.refetches``,
        ``refetched_tokens``)."""
        kept = set(keep)
        gone = [s for s in self.in_use if s not in kept and (before is None or s < before)]
        return len(gone), self.tokens(tokens, gone)


def iterations_of(messages: Sequence[Message]) -> dict[int, int]:
    """start -> end of every assistant message with tool calls and the tool results right after it."""
    found: dict[int, int] = {}
    n = len(messages)
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls") and not is_marker(m):
            end = i + 1
            while end < n and messages[end].get("role") == "tool":
                end += 1
            found[i] = end
    return found


def working_set(
    messages: Sequence[Message],
    *,
    recent_replies: int = RECENT_REPLIES,
    facts: FactsCache | None = None,
    command_uses: int = COMMAND_USES,
) -> WorkingSet:
    """The :class:`WorkingSet` of ``messages`` now (see the module docstring for the rule); ``command_uses``:
    how many recent replies must use a command's output for it to be in use."""
    read = facts if facts is not None else FactsCache()
    all_facts = [read(m) for m in messages]
    if len(read) > 2 * len(messages) + 64:  # folds dropped messages (and splices copied kept ones): forget them
        read.retain(messages)
    iterations = iterations_of(messages)
    fixed: set[str] = set()
    for m, f in zip(messages, all_facts, strict=True):
        if m.get("role") in _FIXED_ROLES or is_marker(m):
            fixed |= f.idents
    replies = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and not is_marker(m)]
    recent = replies[-recent_replies:] if recent_replies > 0 else []
    mentioned_by: dict[str, list[int]] = {}
    for r in recent:
        for x in all_facts[r].idents - fixed:
            mentioned_by.setdefault(x, []).append(r)
    in_use, last_use = _claims(iterations, all_facts, mentioned_by, command_uses)
    _editing(iterations, all_facts, recent, in_use, last_use)
    stale = _stale(iterations, all_facts, in_use)
    pending = _pending(messages, iterations, all_facts, fixed)
    return WorkingSet(iterations, frozenset(in_use), stale, last_use, frozenset(mentioned_by), pending)


def _pending(
    messages: Sequence[Message], iterations: Mapping[int, int], all_facts: Sequence[Facts], fixed: set[str]
) -> frozenset[int]:
    """Newest first, the iterations whose results no later reply mentions, when the walk meets one a later
    reply used within the newest and :data:`PENDING` before it (an agent that works from its outputs); none
    when it meets first one whose results hold no identifier (nothing tells) or none at all (an agent that
    never quotes its outputs: a scripted loop, whose folds keep only their tail)."""
    later: set[str] = set()  # what the replies after the iteration at hand mention
    reply = len(messages)  # replies at or after this index are in ``later``
    found: list[int] = []
    for start in sorted(iterations, reverse=True)[: PENDING + 2]:
        end = iterations[start]
        for k in range(end, reply):
            if messages[k].get("role") == "assistant" and not is_marker(messages[k]):
                later |= all_facts[k].idents
        reply = end
        results = set().union(*(all_facts[k].idents for k in range(start + 1, end))) - fixed
        if not results:
            return frozenset()
        if results & later:
            return frozenset(found)
        found.append(start)
    return frozenset()


def _held(start: int, end: int, all_facts: Sequence[Facts]) -> frozenset[str]:
    held = all_facts[start].idents
    if end - start == 2:
        return held | all_facts[start + 1].idents
    return held.union(*(all_facts[k].idents for k in range(start + 1, end)))


def _claims(
    iterations: Mapping[int, int],
    all_facts: Sequence[Facts],
    mentioned_by: Mapping[str, list[int]],
    command_uses: int,
) -> tuple[set[int], dict[int, int]]:
    """Newest first, each iteration claims the mentioned identifiers it holds that no newer one claimed and
    a reply after its call mentions (its own call, or a reply before it, is no use of what it returned). A
    command's output claims only when ``command_uses`` replies used it (:func:`_taken`); otherwise an older
    source of the same identifiers may still claim them."""
    remaining = set(mentioned_by)
    in_use: set[int] = set()
    last_use: dict[int, int] = {}
    for start in sorted(iterations, reverse=True):
        if not remaining:
            break
        held = _held(start, iterations[start], all_facts) & remaining
        hits = {x for x in held if mentioned_by[x][-1] > start}
        if hits and not _taken(start, hits, all_facts, mentioned_by, command_uses):
            in_use.add(start)
            last_use[start] = max(mentioned_by[x][-1] for x in hits)
            remaining -= hits
    return in_use, last_use


def _taken(
    start: int, hits: set[str], all_facts: Sequence[Facts], mentioned_by: Mapping[str, list[int]], uses: int
) -> bool:
    """Whether the iteration at ``start`` is a command whose output fewer than ``uses`` replies after it
    used: the value was taken, and the reply that took it holds it."""
    calls = all_facts[start].calls
    if not calls or any(c.kind is not ToolKind.COMMAND for c in calls):
        return False
    replies = {r for x in hits for r in mentioned_by[x] if r > start}
    return len(replies) < uses


def _editing(
    iterations: Mapping[int, int],
    all_facts: Sequence[Facts],
    recent: Sequence[int],
    in_use: set[int],
    last_use: dict[int, int],
) -> None:
    """The newest read of each path a recent call edits is in use."""
    editing: dict[str, int] = {}
    for r in recent:
        for call in all_facts[r].calls:
            if call.kind is ToolKind.EDIT:
                for p in call.paths:
                    editing[p] = max(editing.get(p, r), r)
    for start in sorted(iterations, reverse=True):
        if not editing:
            break
        for call in all_facts[start].calls:
            if call.kind is not ToolKind.READ:
                continue
            for p in call.paths & editing.keys():
                in_use.add(start)
                last_use[start] = max(last_use.get(start, 0), editing.pop(p))


def _stale(iterations: Mapping[int, int], all_facts: Sequence[Facts], in_use: set[int]) -> frozenset[int]:
    """Not in use, and either a read of a path edited since or a call re-run since (same arguments)."""
    edited: set[str] = set()
    signatures: set[str] = set()
    stale: set[int] = set()
    for start in sorted(iterations, reverse=True):
        calls = all_facts[start].calls
        superseded = any(c.signature in signatures for c in calls)
        outdated = any(c.kind is ToolKind.READ and c.paths & edited for c in calls)
        if (superseded or outdated) and start not in in_use:
            stale.add(start)
        for c in calls:
            signatures.add(c.signature)
            if c.kind is ToolKind.EDIT:
                edited |= c.paths
    return frozenset(stale)


__all__ = [
    "COMMAND_USES",
    "ITEM_SHARE",
    "PENDING",
    "RECENT_REPLIES",
    "Call",
    "Facts",
    "FactsCache",
    "WorkingSet",
    "facts_of",
    "iterations_of",
    "working_set",
]
