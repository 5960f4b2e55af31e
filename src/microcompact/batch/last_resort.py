"""The last resort before a request: cut the largest tool outputs and assistant texts head-and-tail until
the prompt fits the context window (the originals stay in the store).

:func:`plan_cuts` plans the :class:`~microcompact.events.Prune`; the engine's ``last_resort`` commits it.
"""

from __future__ import annotations

from ..events import Prune
from ..messages import Message
from ..tokens import Ledger, TokenCounter
from .prune import cut_message, cuttable

CUT_MIN_TOKENS = 1024  # smaller messages are never cut
CUT_KEEP_TOKENS = 512  # a cut message keeps at least this much of its start and end together
CUT_NOTE_TOKENS = 40
CUT_MARGIN_SHARE = 0.02  # cuts aim this far under the window (token estimates are estimates)
CUT_MARGIN_MIN_TOKENS = 256


def plan_cuts(counter: TokenCounter, ledger: Ledger, limit: int) -> Prune | None:
    """Cuts, largest message first, that bring the prompt under ``limit`` minus a small margin."""
    msgs, tokens = ledger.messages, ledger.tokens
    target = limit - max(CUT_MARGIN_MIN_TOKENS, int(CUT_MARGIN_SHARE * limit))
    excess = counter.estimate_prompt(ledger.total) - target
    candidates = sorted(
        (i for i, m in enumerate(msgs) if cuttable(m) and tokens[i] > CUT_MIN_TOKENS),
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
        saved = tokens[i] - counter.count_message(cut)
        if saved <= 0:
            continue
        replacements.append((i, cut))
        excess -= saved
    return Prune(tuple(sorted(replacements, key=lambda r: r[0]))) if replacements else None
