"""Summarizer settings that cannot work are caught when the config is read, not at every pass (issue 12):
``max_output_tokens`` below what defrag needs, and a timeout that does not suit the endpoint."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from microcompact.config import LOCAL_TIMEOUT_SECONDS, ConfigError, load_config, parse_config
from microcompact.session import summarizer_for

ROOT = Path(__file__).resolve().parents[2]


def model_config(aux: dict[str, Any] | None = None, **compression: Any) -> dict[str, Any]:
    return {
        "compression": {"micro_compact": True, **compression},
        "auxiliary": {"compression": {"provider": "llamacpp", "model": "qwen", **(aux or {})}},
    }


def test_max_output_tokens_set_below_the_defrag_threshold_is_one_clear_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(model_config({"max_output_tokens": 1024}), source="local.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("invalid configuration in local.yaml: auxiliary.compression.max_output_tokens: 1024")
    assert "micro_compact_defrag_threshold_tokens (2000)" in message and "at least 2000" in message


def test_left_unset_it_is_raised_to_what_defrag_needs() -> None:
    """The default (1,024) is below the default defrag threshold (2,000): a user who never set it gets one
    that works rather than an error about a key they did not write."""
    assert parse_config(model_config()).summarizer_output_tokens() == 2000
    assert parse_config(model_config(micro_compact_defrag_threshold_tokens=800)).summarizer_output_tokens() == 1024
    assert parse_config(model_config({"max_output_tokens": 3000})).summarizer_output_tokens() == 3000


def test_the_check_only_concerns_a_model_doing_micro_compaction() -> None:
    parse_config({"auxiliary": {"compression": {"max_output_tokens": 100}}})  # extractive: no model output
    parse_config(model_config({"max_output_tokens": 100}, micro_compact=False))  # batch only


def test_a_local_endpoint_gets_a_cpu_timeout_unless_one_is_set() -> None:
    local = parse_config(model_config({"base_url": "http://127.0.0.1:8087/v1"})).auxiliary.compression
    assert local.local and local.timeout_seconds() == LOCAL_TIMEOUT_SECONDS
    hosted = parse_config(model_config({"base_url": "https://api.example.com/v1"})).auxiliary.compression
    assert not hosted.local and hosted.timeout_seconds() == 60
    explicit = parse_config(model_config({"base_url": "http://localhost:8087/v1", "timeout": 90}))
    assert explicit.auxiliary.compression.timeout_seconds() == 90


def test_a_local_model_in_the_foreground_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="microcompact")
    foreground = parse_config(model_config({"base_url": "http://127.0.0.1:8087/v1"}))
    summarizer = summarizer_for(foreground)
    assert summarizer.max_output_tokens == 2000  # type: ignore[attr-defined]
    assert "set compression.micro_compact_background: true" in caplog.text
    caplog.clear()
    summarizer_for(parse_config(model_config({"base_url": "http://127.0.0.1:8087/v1"}, micro_compact_background=True)))
    assert "background" not in caplog.text


def test_the_shipped_local_model_config_loads_and_suits_a_cpu_model() -> None:
    config = load_config(ROOT / "configs" / "local-model.yaml")
    aux, c = config.auxiliary.compression, config.compression
    assert c.micro_compact and c.micro_compact_background
    assert aux.local and aux.timeout_seconds() >= 600
    assert config.summarizer_output_tokens() >= c.micro_compact_defrag_threshold_tokens
    assert aux.max_input_tokens <= 12_000  # fits the 16K context the server is started with
