"""Prices by model (issue 28): the request's model picks its family's list prices; an unknown model is
unpriced, never priced as a neighbour; the configured preset wins."""

from __future__ import annotations

import pytest

from microcompact.bill.model_prices import (
    ANTHROPIC_PRICES,
    GEMINI_PRICES,
    OPENAI_PRICES,
    base_model,
    family_of,
    model_pricing,
    unpriced,
)
from microcompact.bill.pricing import PRESETS


@pytest.mark.parametrize(
    ("api", "model", "family"),
    [
        ("openai", "gpt-4o", "gpt-4o"),
        ("openai", "gpt-4o-2024-08-06", "gpt-4o"),
        ("openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai", "ft:gpt-4o-mini-2024-07-18:acme::9abcDEF", "gpt-4o-mini"),
        ("openai", "ft:gpt-4.1-2025-04-14:acme:run-2:Bx1", "gpt-4.1"),
        ("openai", "gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("openai", "gpt-5", "gpt-5"),
        ("openai", "gpt-5-2025-08-07", "gpt-5"),
        ("openai", "gpt-5-mini", "gpt-5-mini"),
        ("openai", "gpt-5-codex", "gpt-5-codex"),
        ("openai", "gpt-5.1-codex-max", "gpt-5.1-codex-max"),
        ("openai", "o3-2025-04-16", "o3"),
        ("openai", "o4-mini", "o4-mini"),
        ("openai", "chatgpt-4o-latest", "chatgpt-4o"),
        ("openai", "codex-mini-latest", "codex-mini"),
        ("anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("anthropic", "claude-sonnet-4@20250514", "claude-sonnet-4"),
        ("anthropic", "us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1"),
        ("anthropic", "claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("anthropic", "claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("anthropic", "claude-haiku-4-5", "claude-haiku-4-5"),
        ("anthropic", "claude-sonnet-5-5", "claude-sonnet-5-5"),
        ("gemini", "gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini", "models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("gemini", "gemini-2.5-flash-preview-05-20", "gemini-2.5-flash"),
        ("gemini", "gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("gemini", "gemini-2.0-flash-001", "gemini-2.0-flash"),
        ("gemini", "gemini-3-pro-preview", "gemini-3-pro"),
    ],
)
def test_a_model_id_picks_its_family(api: str, model: str, family: str) -> None:
    assert family_of(api, model) == family
    pricing = model_pricing(api, model)
    assert pricing is not None and pricing.name == family and pricing.family == api


@pytest.mark.parametrize(
    ("api", "model"),
    [
        ("openai", "gpt-9"),
        ("openai", "gpt-4o-realtime-preview-x"),  # another model, not a snapshot of gpt-4o
        ("openai", "gpt-5.7"),  # a new version may have new prices: not gpt-5's
        ("anthropic", "claude-opus-4-9"),  # not claude-opus-4's $15
        ("anthropic", "claude-sonnet-4-5-turbo"),
        ("anthropic", "gpt-4o"),  # another provider's model on this API
        ("gemini", "gemini-9-ultra"),
        ("openai", None),
        ("openai", ""),
        ("other", "gpt-4o"),
    ],
)
def test_an_unknown_model_is_unpriced(api: str, model: str | None) -> None:
    assert family_of(api, model) is None and model_pricing(api, model) is None


def test_unpriced_says_which_model() -> None:
    assert unpriced("gpt-9") == "unpriced: gpt-9" and unpriced(None) == "unpriced: (no model)"
    assert base_model("ft:gpt-4o:org::x") == "gpt-4o"


def test_each_provider_keeps_its_cache_rules() -> None:
    """Anthropic: 5-minute writes 1.25x input, 1-hour 2x, reads 0.1x, breakpoints; OpenAI and Gemini:
    automatic caching, what is not read is plain input."""
    sonnet = model_pricing("anthropic", "claude-sonnet-4-5")
    assert sonnet is not None and sonnet.write_price == pytest.approx(1.25 * sonnet.input)
    assert sonnet.cache_write_1h == pytest.approx(2 * sonnet.input) and sonnet.max_breakpoints == 4
    assert sonnet.model_dump(exclude={"name"}) == PRESETS["anthropic"].model_dump(exclude={"name"})
    for api, model in (("openai", "gpt-4.1"), ("gemini", "gemini-2.5-flash")):
        p = model_pricing(api, model)
        assert p is not None and not p.write_premium and p.write_price == p.input and p.max_breakpoints == 0
    gpt4o = model_pricing("openai", "gpt-4o")
    assert gpt4o is not None and (gpt4o.input, gpt4o.cached_read, gpt4o.output) == (2.50, 1.25, 10.00)
    assert model_pricing("gemini", "gemini-2.5-pro").model_dump(exclude={"name"}) == PRESETS["gemini"].model_dump(
        exclude={"name"}
    )


def test_every_listed_price_reads_no_dearer_than_it_writes() -> None:
    for table in (ANTHROPIC_PRICES, OPENAI_PRICES, GEMINI_PRICES):
        for family, price in table.items():
            assert 0 < price.read <= price.input <= price.write <= price.output * 1.25, family
