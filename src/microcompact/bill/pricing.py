"""The price of a prompt with a provider's prompt cache: one model shared by the engines, the proxy and
``replay --compare``.

A provider bills every prompt token in one of three classes: read from the cache (a small share of the
input price), written to the cache (Anthropic: a premium over input, 1.25x for the 5-minute cache and 2x
for the 1-hour one; OpenAI's newer models charge a premium too), or plain input (OpenAI's automatic caching
on older models: what is not read is billed as ordinary input). Local servers have no cache worth pricing
(``none``). What each class costs is what makes rewriting history cheap or dear: a fold rewrites everything
after its change point, which the next request pays at the write price instead of the read price.

Prices are US dollars per million tokens (list prices where known, so costs print in dollars); only their
ratios matter to scheduling. The summarizer's calls are priced too (its own prices when it is another model,
else the main model's; the offline summarizer costs nothing).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MILLION = 1_000_000


class CachePricing(BaseModel):
    """One provider/model family's prices (dollars per million tokens) and cache rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "custom"
    family: Literal["anthropic", "openai", "gemini", "none"] = "anthropic"
    input: float = Field(ge=0)
    cached_read: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    output: float = Field(ge=0)
    ttl_seconds: float = Field(300.0, gt=0)
    # False: automatic caching, the part not read is billed as plain input (no write premium).
    write_premium: bool = True
    # False: no cache at all (a local server): every prompt token is plain input, every fold is free.
    cache: bool = True
    cache_write_1h: float | None = Field(None, ge=0)  # the 1-hour cache's write price, where there is one
    max_breakpoints: int = Field(4, ge=0, le=64)  # explicit cache_control breakpoints a request may carry
    lookback_blocks: int = Field(20, ge=0, le=10_000)  # blocks a breakpoint looks back for an earlier entry
    min_cacheable_tokens: int = Field(1024, ge=0, le=1_000_000)  # shorter prefixes are never cached
    summarizer_input: float | None = Field(None, ge=0)  # defaults to the main model's input price
    summarizer_output: float | None = Field(None, ge=0)  # defaults to the main model's output price

    @property
    def read_price(self) -> float:
        """What one prompt token read from the cache costs (the input price without a cache)."""
        return self.cached_read if self.cache else self.input

    @property
    def write_price(self) -> float:
        """What one prompt token not read from the cache costs: a cache write, or plain input."""
        if not self.cache:
            return self.input
        return self.cache_write if self.write_premium else self.input

    @property
    def rewrite_premium(self) -> float:
        """What a token costs more when it must be written again instead of read (0 without a cache)."""
        return max(0.0, self.write_price - self.read_price)

    def prompt_cost(self, read_tokens: int, written_tokens: int, uncached_tokens: int = 0) -> float:
        """Dollars for one prompt: ``written_tokens`` are whatever was not read (written, or plain input
        under automatic caching); ``uncached_tokens`` are billed as plain input in any case."""
        return (read_tokens * self.read_price + written_tokens * self.write_price + uncached_tokens * self.input) / (
            MILLION
        )

    def summarizer_cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollars for summarizer calls of these sizes, at the summarizer's prices."""
        price_in = self.summarizer_input if self.summarizer_input is not None else self.input
        price_out = self.summarizer_output if self.summarizer_output is not None else self.output
        return (input_tokens * price_in + output_tokens * price_out) / MILLION

    def output_cost(self, output_tokens: int) -> float:
        return output_tokens * self.output / MILLION


def _plain_writes(
    name: str,
    family: Literal["openai", "gemini", "none"],
    input: float,
    cached_read: float,
    output: float,
    *,
    cache: bool = True,
    min_cacheable_tokens: int = 1024,
) -> CachePricing:
    """Prices under which what is not read is plain input: no write premium and no breakpoints to place
    (automatic prefix caching, whose caches live about 5 minutes, or no cache at all)."""
    return CachePricing(
        name=name,
        family=family,
        input=input,
        cached_read=cached_read,
        cache_write=input,
        output=output,
        ttl_seconds=300,
        write_premium=False,
        max_breakpoints=0,
        lookback_blocks=0,
        cache=cache,
        min_cacheable_tokens=min_cacheable_tokens,
    )


def _variant(base: CachePricing, **changes: Any) -> CachePricing:
    """``base`` with ``changes``, checked as any other preset."""
    return CachePricing.model_validate({**base.model_dump(), **changes})


# Anthropic (Claude Sonnet list prices): 5-minute cache writes 1.25x input, 1-hour writes 2x, reads 0.1x.
_ANTHROPIC = CachePricing(
    name="anthropic",
    family="anthropic",
    input=3.00,
    cached_read=0.30,
    cache_write=3.75,
    cache_write_1h=6.00,
    output=15.00,
    ttl_seconds=300,
)
# OpenAI's current models (GPT-5 list prices): cached input at 0.1x; caches are cleared after 5-10 minutes
# of inactivity (we take 5), prefixes from 1,024 tokens.
_OPENAI = _plain_writes("openai", "openai", input=1.25, cached_read=0.125, output=10.00)

PRESETS: dict[str, CachePricing] = {
    "anthropic": _ANTHROPIC,
    # The same with the 1-hour cache: writes 2x input, the cache lives an hour.
    "anthropic-1h": _variant(_ANTHROPIC, name="anthropic-1h", cache_write=6.00, ttl_seconds=3600),
    "openai": _OPENAI,
    # Newer OpenAI models with a cache-write premium: what is not read is written at 1.25x input, and a
    # request may place breakpoints.
    "openai-write": _variant(_OPENAI, name="openai-write", cache_write=1.5625, write_premium=True, max_breakpoints=4),
    # GPT-4o list prices: cached input at half price (``replay --compare``'s earlier ``openai`` figures).
    "gpt-4o": _plain_writes("gpt-4o", "openai", input=2.50, cached_read=1.25, output=10.00),
    # Gemini (2.5 Pro list prices, prompts up to 200K): implicit caching reads at 0.1x input; prefixes from
    # 2,048 tokens (4,096 on 3.x).
    "gemini": _plain_writes("gemini", "gemini", input=1.25, cached_read=0.125, output=10.00, min_cacheable_tokens=2048),
    # A local server: no cache and no bill; only tokens count, so fold as early as is useful.
    "none": _plain_writes("none", "none", input=0.0, cached_read=0.0, output=0.0, cache=False, min_cacheable_tokens=0),
}

# The preset a proxy assumes for each API when nothing is configured.
API_PRESETS = {"anthropic": "anthropic", "openai": "openai", "gemini": "gemini"}


def preset(name: str) -> CachePricing:
    """The preset ``name``; raises KeyError naming the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown pricing preset {name!r} (known: {', '.join(PRESETS)})") from None


def for_api(api: str) -> CachePricing:
    """The default prices of an API the proxy speaks (``anthropic``, ``openai``, ``gemini``); ``none``
    otherwise."""
    return PRESETS[API_PRESETS.get(api, "none")]


__all__ = ["API_PRESETS", "PRESETS", "CachePricing", "for_api", "preset"]
