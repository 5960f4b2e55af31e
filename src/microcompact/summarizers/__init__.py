"""Summarizers (being split into one module per job: see the modules of this package)."""

from .extractive import (
    BATCH_PROMPT,
    BATCH_SECTIONS,
    CONDENSE_PROMPT,
    MERGE_PROMPT,
    MICRO_SECTIONS,
    OMISSION_NOTE,
    SHORTENED_NOTE,
    CountText,
    ExtractiveSummarizer,
    OpenAISummarizer,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerError,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
    clean_summary,
    describe_tool_result,
    make_summarizer,
    prepare_exchange,
    render_exchange,
    shorten_summary,
)

__all__ = [
    "BATCH_PROMPT", "BATCH_SECTIONS", "CONDENSE_PROMPT", "MERGE_PROMPT", "MICRO_SECTIONS", "OMISSION_NOTE",
    "SHORTENED_NOTE", "CountText", "ExtractiveSummarizer", "OpenAISummarizer", "Summarizer",
    "SummarizerAuthError", "SummarizerBadOutput", "SummarizerError", "SummarizerRateLimited",
    "SummarizerTimeout", "SummarizerUnavailable", "clean_summary", "describe_tool_result", "make_summarizer",
    "prepare_exchange", "render_exchange", "shorten_summary",
]
