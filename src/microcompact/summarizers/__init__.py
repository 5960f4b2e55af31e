"""Summarizers: what turns an exchange into summary text, behind one small protocol.

Implementations: :class:`ExtractiveSummarizer` (deterministic, offline, no model), :class:`OpenAISummarizer`
(any OpenAI-compatible chat-completions endpoint), :func:`summarizer_from` (the caller's own OpenAI or
Anthropic client, sync or async, or a callable) and :class:`FallbackChain` (the first of several that
succeeds). What a summarizer reads is bounded and redacted by :func:`prepare_exchange`; what comes back
from a model is redacted again.

One module per job; each imports only those listed before it::

    base        the protocol, its errors, the section names
    sections    a summary's shape: ### headings and bullets, parsed and rendered
    facts       the file ledger, failing commands, test runs and what tools showed (facts_*)
    findings    findings, not narration: the sentences of prose worth keeping
    input       what a summarizer reads: redacted, bounded, rendered as text
    limits      a server's "does not fit my context" error, turned into an input budget
    prompts     the HTTP summarizer's prompts, rendered from templates/
    checks      is a model's answer a summary of its input? (echoes, unchanged, unknown paths, ...)
    validation  the usable text of a chat completion; deterministic shortening
    extractive  the offline summarizer
    http        the OpenAI-compatible client: notes from the model, checked, facts kept by code
    eventloop   running an async client's coroutines from the engine's threads
    backends    request and answer shapes of caller-owned clients (OpenAI, Anthropic, callables), their errors
    clients     summarizer_from: a caller-owned client as a summarizer
    chain       the fallback chain
    configured  summarizer_for: the summarizer a config describes; make_summarizer, one by kind
"""

from ..render import exchange_text as render_exchange
from .base import (
    BATCH_SECTIONS,
    MICRO_SECTIONS,
    PROSE_SECTIONS,
    CountText,
    Rejection,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerError,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
    SummaryRejected,
)
from .chain import FallbackChain
from .checks import CheckInput, check_summary
from .clients import ClientSummarizer, summarizer_from
from .configured import make_summarizer, summarizer_for
from .eventloop import bind_event_loop
from .extractive import ExtractiveSummarizer, describe_tool_result
from .facts import facts_block, ledger_budget, with_facts
from .http import FactsHook, OpenAISummarizer
from .input import OMISSION_NOTE, prepare_exchange
from .prompts import BATCH_PROMPT, CONDENSE_PROMPT, MERGE_PROMPT
from .validation import SHORTENED_NOTE, clean_summary, shorten_summary

__all__ = [
    "summarizer_for",
    "BATCH_PROMPT",
    "BATCH_SECTIONS",
    "CONDENSE_PROMPT",
    "MERGE_PROMPT",
    "MICRO_SECTIONS",
    "OMISSION_NOTE",
    "PROSE_SECTIONS",
    "SHORTENED_NOTE",
    "CheckInput",
    "ClientSummarizer",
    "CountText",
    "ExtractiveSummarizer",
    "FactsHook",
    "FallbackChain",
    "OpenAISummarizer",
    "Rejection",
    "Summarizer",
    "SummarizerAuthError",
    "SummarizerBadOutput",
    "SummarizerError",
    "SummarizerRateLimited",
    "SummarizerTimeout",
    "SummarizerUnavailable",
    "SummaryRejected",
    "bind_event_loop",
    "check_summary",
    "clean_summary",
    "describe_tool_result",
    "facts_block",
    "ledger_budget",
    "make_summarizer",
    "prepare_exchange",
    "render_exchange",
    "shorten_summary",
    "summarizer_from",
    "with_facts",
]
