"""A Gemini request's fixed part includes its ``systemInstruction`` (issue 19): a Gemini agent whose system
instruction alone is above the batch threshold gets the moved threshold and the one warning, as a chat or
Anthropic agent with the same system prompt does."""

from __future__ import annotations

import logging

import pytest

from microcompact.server.gemini_format import GeminiFormat
from microcompact.server.model_windows import ModelWindows, fixed_text
from microcompact.server.run import proxy_config

FIELDS = GeminiFormat().fixed_fields

WINDOW = 32_000
INSTRUCTION = " ".join(["Follow the house rules exactly."] * 3_000)  # far above 16K tokens


def test_the_system_instruction_counts_as_fixed() -> None:
    body = {"systemInstruction": {"parts": [{"text": "Be brief."}]}, "contents": []}
    assert "Be brief." in fixed_text(FIELDS, body, [])


def test_a_system_instruction_above_the_threshold_moves_it(caplog: pytest.LogCaptureFixture) -> None:
    config = proxy_config(None, WINDOW)
    windows = ModelWindows(config)
    body = {"systemInstruction": {"parts": [{"text": INSTRUCTION}]}, "contents": []}
    fixed = windows.counter.count_text(INSTRUCTION)
    assert fixed > (config.threshold_tokens() or 0)
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        moved = windows.config_for(FIELDS, {"model": "gemini-e2e", **body}, [])
    assert (moved.threshold_tokens() or 0) > fixed, "the threshold sits above what no compaction can shorten"
    reports = [r for r in caplog.records if "no compaction can shorten" in r.getMessage()]
    assert len(reports) == 1 and "gemini-e2e" in reports[0].getMessage()
    plain = windows.config_for(FIELDS, {"model": "gemini-e2e", "systemInstruction": {"parts": [{"text": "Hi."}]}}, [])
    assert plain.compression.threshold == config.compression.threshold, "a small instruction changes nothing"
