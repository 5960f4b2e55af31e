"""Folding with the working set kept, as the engine will once it is wired in: select the span with
``keep``, absorb it (a fixed summary: these tests are about placement, not wording), apply the event and
move the marker and cursor exactly as ``MicroCompactor.land`` does."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from microcompact.config import Config
from microcompact.events import Absorb, CommitHook, Span, apply_event
from microcompact.messages import render_micro_marker
from microcompact.micro.spans import select_span
from microcompact.micro.state import RollingSummary
from microcompact.tokens import Ledger
from microcompact.window import Window, WindowBudget

Message = dict[str, Any]
SUMMARY = "folded steps"


@dataclass
class Fold:
    before: list[Message]
    after: list[Message]
    window: Window  # of ``before``
    span: Span
    event: Absorb


def fold_once(
    ledger: Ledger,
    state: RollingSummary,
    config: Config,
    keep: Collection[int] | None,
    mode: str,
    commit: CommitHook | None = None,
) -> Fold | None:
    """One pass keeping ``keep`` (iteration starts; None: by age); None when there is nothing to absorb.
    ``commit`` (a store's ``archive_and_compact``) writes the event before it is applied."""
    window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(config))
    if state.cursor is None:
        state.cursor = window.head
    span, _ = select_span(ledger.messages, ledger.tokens, window, state, config, mode, keep=keep)
    if span is None:
        return None
    before = list(ledger.messages)
    marker = render_micro_marker(SUMMARY)
    event = Absorb(span, state.marker_index, marker, SUMMARY, span.absorbed_indexes(state.marker_index))
    if commit is not None:
        commit(event, ledger.messages)
    apply_event(ledger, event)
    state.marker_index = event.marker_index_after
    state.cursor = state.marker_index + 1
    return Fold(before, list(ledger.messages), window, span, event)


__all__ = ["SUMMARY", "Fold", "fold_once"]
