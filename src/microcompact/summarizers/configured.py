"""The summarizer a config describes: ``auxiliary.compression`` names the offline extractive one (the default),
an OpenAI-compatible endpoint, which keeps the file ledger beside the model's prose, or ``upstream``: the
client's own model behind ``serve``, over its cached conversation, with the extractive one as fallback."""

from __future__ import annotations

import logging
from typing import Any

from ..config import Config, ConfigError, SummarizerKind
from ..tokens import TokenCounter
from .base import Summarizer
from .extractive import ExtractiveSummarizer
from .facts import facts_block
from .http import FactsHook, OpenAISummarizer

log = logging.getLogger("microcompact")


def make_summarizer(kind: str, **options: Any) -> Summarizer:
    """``"extractive"`` or ``"openai"``, constructed with ``options``. It lives here, above both
    implementations, because both import ``base`` for the protocol and the errors."""
    if kind == "extractive":
        return ExtractiveSummarizer(**options)
    if kind == "openai":
        return OpenAISummarizer(**options)
    raise ValueError(f"unknown summarizer kind {kind!r} (expected 'extractive' or 'openai')")


def summarizer_for(config: Config, counter: TokenCounter | None = None) -> Summarizer:
    """The summarizer ``auxiliary.compression`` describes (the offline extractive one by default)."""
    aux = config.auxiliary.compression
    extractive = make_summarizer(
        "extractive",
        count_text=counter.count_text if counter else None,
        ledger_budget_tokens=config.ledger_room_tokens(),
    )
    if aux.kind is SummarizerKind.EXTRACTIVE:
        return extractive
    if aux.kind is SummarizerKind.UPSTREAM:
        return _upstream(config, extractive, counter)
    if not aux.model:
        raise ConfigError(
            "auxiliary.compression.model: required when provider is "
            f"{aux.provider!r} (the model name the endpoint serves)"
        )
    timeout = aux.timeout_seconds()
    if aux.local and config.compression.micro_compact and not config.compression.micro_compact_background:
        log.warning(
            "Micro-compaction: the summarizer at %s is on this machine and background mode is off: a pass on a "
            "CPU model takes minutes and blocks finalize_turn (up to the %.0f s timeout); set "
            "compression.micro_compact_background: true",
            aux.base_url,
            timeout,
        )
    return make_summarizer(
        "openai",
        model=aux.model,
        base_url=aux.base_url,
        api_key_env=aux.api_key_env,
        timeout=timeout,
        max_output_tokens=config.summarizer_output_tokens(),
        temperature=aux.temperature,
        count_text=counter.count_text if counter else None,
        facts=_kept_facts(config, counter),
    )


def _upstream(config: Config, extractive: Summarizer, counter: TokenCounter | None) -> Summarizer:
    """The client's own model through ``serve`` (summarizers/upstream.py), the extractive one behind it."""
    from .upstream import UpstreamSummarizer

    return UpstreamSummarizer(
        extractive,
        timeout=config.auxiliary.compression.timeout_seconds(),
        max_output_tokens=config.summarizer_output_tokens(),
        count_text=counter.count_text if counter else None,
        facts=_kept_facts(config, counter),
    )


def _kept_facts(config: Config, counter: TokenCounter | None) -> FactsHook:
    """The file ledger and failing commands, kept by code beside a model's prose within the ledger's room:
    a model may rewrite or drop the prose, never the facts."""
    budget = config.ledger_room_tokens()
    count_text = counter.count_text if counter else None
    return lambda previous, messages: facts_block(previous, messages, budget, count_text)
