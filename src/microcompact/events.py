"""The event vocabulary: how history is changed, and what a pass can report.

Engines (micro and batch) *plan* events; the session store *commits* them in one transaction; only then
are they *applied* to the in-memory transcript. This module sits at the bottom of the package (it imports
only :mod:`microcompact.messages`), so the store consumes events without importing the engines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from .messages import Message

if TYPE_CHECKING:
    from collections.abc import Sequence


class Outcome(StrEnum):
    """What a pass did, as telemetry, reports and results name it (a ``str``: ``Outcome.ABSORBED == "absorbed"``)."""

    # micro passes
    ABSORBED = "absorbed"
    # absorbed too, but by the deterministic summary: the model's answer failed the checks (never "absorbed")
    MODEL_REJECTED = "model_rejected"
    DEFRAG = "defrag"
    DEFRAG_FAILED = "defrag_failed"
    NO_RECLAIM = "no_reclaim"
    SUMMARIZE_FAILED = "summarize_failed"
    EXCHANGE_SKIPPED = "exchange_skipped"
    AUTH_FAILED = "auth_failed"
    STORE_FAILED = "store_failed"
    # batch compaction
    PRUNED = "pruned"
    COMPACTED = "compacted"
    USER_FLOOR_EXCEEDED = "user_floor_exceeded"
    FALLBACK = "fallback"
    TRUNCATED = "truncated"
    LOW_YIELD = "low_yield"
    NOTHING_TO_COMPACT = "nothing_to_compact"
    COOLDOWN = "cooldown"
    ERROR = "error"


# Micro outcomes that changed the transcript (defrag_failed still rewrites: the deterministic shortening).
MICRO_COMMITTED = frozenset({Outcome.ABSORBED, Outcome.MODEL_REJECTED, Outcome.DEFRAG, Outcome.DEFRAG_FAILED})
# Micro outcomes of a pass that folded an exchange into the rolling summary.
MICRO_ABSORBS = frozenset({Outcome.ABSORBED, Outcome.MODEL_REJECTED})
MICRO_FAILURES = frozenset(
    {
        Outcome.SUMMARIZE_FAILED,
        Outcome.EXCHANGE_SKIPPED,
        Outcome.DEFRAG_FAILED,
        Outcome.STORE_FAILED,
        Outcome.AUTH_FAILED,
    }
)
# Batch outcomes that summarized the middle into a batch marker (a prune or a last-resort cut is not one).
BATCH_COMPACTIONS = frozenset({Outcome.COMPACTED, Outcome.USER_FLOOR_EXCEEDED, Outcome.FALLBACK})
BATCH_CHANGED = BATCH_COMPACTIONS | {Outcome.PRUNED, Outcome.TRUNCATED}


@dataclass(frozen=True)
class Span:
    """A contiguous run of messages a pass absorbs; ``start``/``end`` index the transcript, end exclusive.

    ``kept`` holds user messages inside the span (a span may cover several exchanges when the reclaim gate
    asks for more) and the iterations the agent still uses (``micro/in_use_spans.py``); they stay in the
    transcript, verbatim, in order. A span that reaches back into the kept zone holds the old micro marker,
    which is neither kept nor absorbed: the pass replaces it.
    """

    start: int
    end: int
    tokens: int
    kept: tuple[int, ...] = ()
    partial: bool = False  # a piece of a long exchange rather than whole exchanges

    def absorbed_indexes(self, marker_index: int | None) -> tuple[int, ...]:
        """The indexes a pass summarizes: the span less what it keeps and less the old marker, which a span
        reaching back into the kept zone holds (it is replaced, never summarized)."""
        kept = set(self.kept)
        return tuple(i for i in range(self.start, self.end) if i not in kept and i != marker_index)


@dataclass(frozen=True)
class Absorb:
    """Micro: replace ``span`` by ``marker`` (keeping the user messages inside it) and drop the old micro marker."""

    span: Span
    removed_marker: int | None
    marker: Message
    summary: str
    absorbed: tuple[int, ...]  # indexes of the messages that are summarized away

    @property
    def removes_marker_inside(self) -> bool:
        """True when the old marker lies inside the span (it reached back into the kept zone)."""
        return self.removed_marker is not None and self.span.start <= self.removed_marker < self.span.end

    @property
    def marker_index_after(self) -> int:
        idx = self.span.start + len(self.span.kept)
        before = self.removed_marker is not None and self.removed_marker < self.span.start
        return idx - 1 if before else idx


@dataclass(frozen=True)
class Rewrite:
    """Micro defrag: the marker at ``index`` is rewritten in place; nothing moves."""

    index: int
    marker: Message
    summary: str


@dataclass(frozen=True)
class Prune:
    """Batch: replace single messages in place (tool outputs by stubs, calls by shortened arguments, a
    last-resort head-and-tail cut)."""

    replacements: tuple[tuple[int, Message], ...]


@dataclass(frozen=True)
class BatchCompact:
    """Batch: replace the middle ``[start, end)`` by ``new``, in chronological order.

    ``new`` interleaves the messages the batch keeps (user messages, an earlier batch marker with nothing
    new around it: the very same message dicts) with the new batch markers, one per run of work between two
    kept messages, each where its run was. ``sources[j]`` holds the indexes ``new[j]`` stands for: ``(i,)``
    for a kept message (``i`` in ``kept``), the indexes it summarizes for a new marker. Concatenated, the
    sources are exactly ``start .. end - 1`` in order, so nothing is lost, doubled or moved across a kept one.
    """

    start: int
    end: int
    new: tuple[Message, ...]
    sources: tuple[tuple[int, ...], ...]
    kept: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.new):
            raise ValueError("BatchCompact: one sources entry per new message")
        if [i for src in self.sources for i in src] != list(range(self.start, self.end)):
            raise ValueError("BatchCompact: sources must cover the middle once, in order")
        kept = set(self.kept)
        if not kept <= {src[0] for src in self.sources if len(src) == 1}:
            raise ValueError("BatchCompact: a kept index must stand alone in sources")

    @property
    def markers(self) -> list[tuple[Message, tuple[int, ...]]]:
        """(new marker, indexes it absorbs) for every message of ``new`` that is not kept, in order."""
        kept = set(self.kept)
        return [
            (m, src) for m, src in zip(self.new, self.sources, strict=False) if not (len(src) == 1 and src[0] in kept)
        ]

    @property
    def absorbed(self) -> tuple[int, ...]:
        """Indexes summarized away (into one of the new markers)."""
        return tuple(i for _, src in self.markers for i in src)


MicroEvent = Absorb | Rewrite
BatchEvent = Prune | BatchCompact
Event = Absorb | Rewrite | Prune | BatchCompact
# The caller's commit hook (the session store): writes an event in one transaction, or raises.
CommitHook = Callable[[Event, list[Message]], None]


class Splicer(Protocol):
    """What applying an event needs of a transcript (:class:`microcompact.tokens.Ledger` is one)."""

    messages: list[Message]

    def splice(self, start: int, end: int, replacement: Sequence[Message]) -> None: ...


def apply_event(transcript: Splicer, event: Event) -> None:
    """Apply a committed event to the in-memory transcript."""
    if isinstance(event, Rewrite):
        transcript.splice(event.index, event.index + 1, [event.marker])
    elif isinstance(event, Prune):
        for index, message in event.replacements:
            transcript.splice(index, index + 1, [message])
    elif isinstance(event, BatchCompact):
        transcript.splice(event.start, event.end, list(event.new))
    else:  # Absorb: the span's kept messages stay, in order, before the new marker
        kept = [transcript.messages[i] for i in event.span.kept]
        transcript.splice(event.span.start, event.span.end, [*kept, event.marker])
        if event.removed_marker is not None and not event.removes_marker_inside:
            transcript.splice(event.removed_marker, event.removed_marker + 1, [])


def commit_or_log(commit: CommitHook | None, event: Event, msgs: list[Message], failure: str) -> bool:
    """Hand ``event`` to the caller's commit hook (the store); a failure is logged and reported, not raised:
    the engine then leaves its in-memory transcript as it was."""
    if commit is None:
        return True
    try:
        commit(event, msgs)
        return True
    except Exception as exc:
        logging.getLogger("microcompact").error("%s (%s: %s)", failure, type(exc).__name__, exc)
        return False
