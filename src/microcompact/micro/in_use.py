"""Folding by use, as the engine asks it: which in-use iterations a fold keeps, and what a pass kept.

The rule is :mod:`.working_set`'s; this module binds it to one engine: one :class:`FactsCache` per engine
(each message read once), behind a lock, since a background pass plans on the worker thread
(:meth:`~microcompact.micro.engine.MicroCompactor.plan_ahead`) while the caller's thread estimates the
next fold. A shadow engine (:mod:`.ahead`) is an engine of its own, with its own cache.

The budget is the window's share for the working set less the fixed low-water mark
(:func:`~microcompact.bill.fold_price.keep_budget`): what a fold keeps verbatim is never more than
:data:`~microcompact.bill.fold_price.WORKING_SET_SHARE` of the window.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..bill.fold_price import keep_budget
from ..config import FALLBACK_CONTEXT_LIMIT, Config, SummarizerKind
from ..events import Span
from ..messages import Message
from ..window import Window
from .working_set import COMMAND_USES, FactsCache, WorkingSet, working_set


class InUse:
    """The working set of an engine's transcript and the iterations a fold keeps within its budget."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.facts = FactsCache()
        self._lock = threading.Lock()
        self.command_uses = command_uses(config)

    def budget(self) -> int:
        """Tokens of in-use iterations a fold may keep."""
        limit = self.config.model.context_length or FALLBACK_CONTEXT_LIMIT
        return keep_budget(self.config.low_water_tokens(), limit)

    def keep(self, msgs: Sequence[Message], tokens: Sequence[int], window: Window) -> tuple[WorkingSet, frozenset[int]]:
        """The working set now and the in-use iterations before ``window``'s tail a fold keeps (the most
        recently used first, within :meth:`budget`)."""
        with self._lock:
            ws = working_set(msgs, facts=self.facts, command_uses=self.command_uses)
        return ws, ws.keep_within(tokens, self.budget(), before=window.tail)


def command_uses(config: Config) -> int:
    """How many replies must use a command's output to keep it in use (:data:`.working_set.COMMAND_USES`)
    under ``config``'s summarizer. The extractive marker keeps a folded reply's findings in its own words,
    so the value a reply took from an output stays in front of the model after both are folded; a model's
    summary holds what the model chose to keep, so under a model summarizer one use keeps an output in use.
    Measured beside it (docs/cost-and-cache.md): with a 2 s model summarizer the reactive agent's folds came
    twice as often, the model fell behind, and the 48 x 24 KB task pruned three times and re-fetched seven."""
    return COMMAND_USES if config.auxiliary.compression.kind is SummarizerKind.EXTRACTIVE else 1


def kept_record(span: Span, msgs: Sequence[Message], tokens: Sequence[int]) -> dict[str, Any]:
    """The pass record's fields for what ``span`` kept because it was in use (the iterations left in place
    inside it; user messages it keeps are not counted): ``kept_in_use_iterations``, ``kept_in_use_tokens``."""
    kept = [i for i in span.kept if msgs[i].get("role") in ("assistant", "tool")]
    calls = sum(1 for i in kept if msgs[i].get("role") == "assistant")
    return {"kept_in_use_iterations": calls, "kept_in_use_tokens": sum(tokens[i] for i in kept)}


__all__ = ["InUse", "command_uses", "kept_record"]
