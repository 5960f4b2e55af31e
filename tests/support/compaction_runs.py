"""Helpers for the rule tests: run real micro passes (extractive summarizer) on a generated transcript, in
both modes (after a turn, and before a model request, which absorbs pieces across user messages), and keep
each before/after pair with the window the pass worked in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from microcompact.config import Config, parse_config
from microcompact.micro import MicroCompactor
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import Window, WindowBudget

Message = dict[str, Any]


@dataclass
class Step:
    before: list[Message]
    after: list[Message]
    window: Window  # of ``before``, as the pass computed it


def run_passes(messages: list[Message], config_data: dict[str, Any], passes: int = 6) -> list[Step]:
    """``passes`` hook calls in a row on one engine, alternating turn-end and before-request passes."""
    config: Config = parse_config(config_data)
    counter = TokenCounter(EstimateCounter())
    engine = MicroCompactor(config, ExtractiveSummarizer(), counter)
    ledger = Ledger(counter, messages)
    steps: list[Step] = []
    for k in range(passes):
        before = [dict(m) for m in ledger.messages]
        window = Window.of(ledger.messages, ledger.tokens, WindowBudget.of(config))
        if k % 2:
            engine.before_request(ledger)
        else:
            engine.finalize_turn(ledger)
        steps.append(Step(before, [dict(m) for m in ledger.messages], window))
    return steps
