"""The shared price model: presets as the providers document them, the YAML ``pricing`` section (strict),
and replay's cost tally priced through it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.pricing import PRESETS, CachePricing, for_api
from microcompact.bill.replay_cost import CacheModel
from microcompact.config import ConfigError, load_config, parse_config


def test_anthropic_preset_follows_the_documented_ratios():
    p = PRESETS["anthropic"]
    assert p.cache_write == pytest.approx(1.25 * p.input)
    assert p.cache_write_1h == pytest.approx(2.0 * p.input)
    assert p.cached_read == pytest.approx(0.1 * p.input)
    assert (p.max_breakpoints, p.lookback_blocks, p.min_cacheable_tokens, p.ttl_seconds) == (4, 20, 1024, 300)
    assert PRESETS["anthropic-1h"].write_price == pytest.approx(2.0 * p.input)
    assert PRESETS["anthropic-1h"].ttl_seconds == 3600


def test_openai_presets_automatic_caching_with_and_without_a_write_premium():
    plain, premium = PRESETS["openai"], PRESETS["openai-write"]
    assert plain.read_price == pytest.approx(0.1 * plain.input)
    assert plain.write_price == plain.input  # not read: plain input
    assert premium.write_price == pytest.approx(1.25 * premium.input)
    assert for_api("openai") is plain and for_api("anthropic") is PRESETS["anthropic"]


def test_gemini_has_its_own_preset_implicit_caching_without_a_write_premium():
    """Gemini used to resolve to ``none``: folds priced as free and its summary requests billed at 0."""
    gemini = for_api("gemini")
    assert gemini is PRESETS["gemini"] and gemini.cache and gemini.family == "gemini"
    assert gemini.read_price == pytest.approx(0.1 * gemini.input)
    assert gemini.write_price == gemini.input and gemini.rewrite_premium > 0
    assert gemini.max_breakpoints == 0 and gemini.min_cacheable_tokens == 2048
    assert for_api("something-else") is PRESETS["none"]


def test_no_cache_preset_makes_every_fold_free():
    none = PRESETS["none"]
    assert not none.cache and none.rewrite_premium == 0
    model = CacheModel(none)
    a, b = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    model.request([a], [100], now=0, output_tokens=0)
    model.request([a, b], [100, 50], now=1, output_tokens=0)
    assert (model.tally.cached_read_tokens, model.tally.cache_write_tokens, model.tally.uncached_tokens) == (0, 0, 250)


def test_prompt_and_summarizer_costs_in_dollars():
    p = PRESETS["anthropic"]
    # 100K read at $0.30, 10K written at $3.75 per million
    assert p.prompt_cost(100_000, 10_000) == pytest.approx(0.03 + 0.0375)
    assert p.summarizer_cost(1_000_000, 0) == pytest.approx(3.0)  # the main model's price by default
    cheap = p.model_copy(update={"summarizer_input": 0.5, "summarizer_output": 1.0})
    assert cheap.summarizer_cost(1_000_000, 1_000_000) == pytest.approx(1.5)


@given(
    st.floats(0, 100),
    st.floats(0, 100),
    st.floats(0, 100),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.booleans(),
)
def test_a_token_written_never_costs_less_than_one_read_when_writes_are_dearer(inp, read, write, r, w, premium):
    p = CachePricing(
        input=inp, cached_read=min(read, inp), cache_write=max(write, inp), output=1, write_premium=premium
    )
    assert p.rewrite_premium >= 0
    assert p.prompt_cost(r, w) <= p.prompt_cost(0, r + w) + 1e-9


def test_pricing_section_preset_and_overrides():
    cfg = parse_config({"pricing": {"preset": "openai-write", "input": 2.0, "summarizer_input": 0.1}})
    p = cfg.cache_pricing()
    assert p is not None and p.family == "openai" and p.input == 2.0 and p.write_premium
    assert p.summarizer_input == 0.1
    assert p.summarizer_output == 0.0  # the offline summarizer costs nothing unless priced


def test_no_pricing_section_means_no_price_for_a_library_session_and_the_model_s_prices_for_the_proxy():
    cfg = parse_config({})
    assert cfg.cache_pricing() is None
    p = cfg.cache_pricing("anthropic", "claude-sonnet-4-5-20250929")
    assert p is not None and p.name == "claude-sonnet-4-5" and p.cache_write == PRESETS["anthropic"].cache_write
    assert cfg.cache_pricing("anthropic") is None  # no model, no price: none is borrowed
    assert cfg.cache_pricing("openai", "gpt-9-turbo") is None


def test_a_model_summarizer_is_priced_at_the_main_model_price_unless_set():
    cfg = parse_config({"auxiliary": {"compression": {"provider": "openai", "model": "m", "base_url": "http://h/v1"}}})
    p = cfg.cache_pricing("anthropic", "claude-haiku-4-5")
    assert p is not None and p.summarizer_input is None


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"inptu": 3.0}, "pricing.inptu: unknown key"),
        ({"input": -1}, "pricing.input"),
        ({"cached_read": -0.1}, "pricing.cached_read"),
        ({"summarizer_output": -2}, "pricing.summarizer_output"),
        ({"preset": "claude"}, "pricing.preset: unknown preset"),
        ({"ttl_seconds": 0}, "pricing.ttl_seconds"),
        ({"input": True}, "pricing.input: expected a number"),
    ],
)
def test_a_bad_pricing_file_is_one_line_naming_the_key(tmp_path, section, key):
    path = tmp_path / "config.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"pricing": section}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert key in message and "\n" not in message


def test_a_preset_nobody_configured_is_not_labelled_configured():
    """Issue 28: gpt-4o traffic was labelled "openai (configured)" though nothing was configured: the free
    offline summarizer's zero prices counted as the user's settings, and the API's preset was borrowed."""
    from microcompact.config import Config

    untouched = Config()
    priced = untouched.cache_pricing("openai", "gpt-4o")
    assert priced is not None and priced.name == "gpt-4o" and priced.input == 2.50
    assert priced.summarizer_input == 0.0
    set_by_user = Config.model_validate({"pricing": {"input": 2.0}})
    assert set_by_user.cache_pricing("openai", "gpt-4o").name == "gpt-4o (configured)"
    assert set_by_user.cache_pricing("openai", "gpt-4o").input == 2.0
    preset_named = Config.model_validate({"pricing": {"preset": "openai"}})
    assert preset_named.cache_pricing("openai", "gpt-4o").name == "openai (configured)"  # the preset wins
    assert preset_named.cache_pricing("openai", "gpt-9").name == "openai (configured)"
    own_summarizer = Config.model_validate({"pricing": {"summarizer_input": 0.8}})
    assert own_summarizer.cache_pricing("anthropic", "claude-opus-4-1").summarizer_input == 0.8
