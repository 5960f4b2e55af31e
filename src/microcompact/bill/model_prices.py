"""List prices by model family: the proxy prices each request by the model it names, not by a preset of
its API, and says "unpriced" for a model it does not know rather than borrow another model's prices.

A model id picks its family by the longest family prefix it starts with, followed by nothing or by a
snapshot suffix only: a date (``-20250929``, ``-2024-08-06``, ``@20250514``, Gemini's ``-05-20``), a
version number of three digits or more (``-001``), ``-latest``, ``-preview``/``-exp`` and what follows
them, Bedrock's ``-v1:0``. So ``claude-sonnet-4-5-20250929`` is ``claude-sonnet-4-5`` while
``claude-opus-4-6`` is not taken for ``claude-opus-4`` (a new minor version may have new prices).
``ft:BASE:ORG::ID`` (an OpenAI fine-tune) is priced as ``BASE``; a path-like prefix (``models/``,
``anthropic/``) and Bedrock's ``[region.]anthropic.`` are dropped.

Prices are US dollars per million tokens: input, cache read, the 5-minute cache write (Anthropic: 1.25x
input; OpenAI and Gemini have no write premium: what is not read is plain input), the 1-hour write (2x),
output. Checked on 2026-12-07 against stored copies of the providers' pricing pages
(platform.claude.com/docs/en/about-claude/pricing, developers.openai.com/api/docs/pricing as read on
2026-11-05, ai.google.dev/gemini-api/docs/pricing); where a model has a long-prompt tier (Gemini Pro over
200K, Haiku 5.5 over 100K), the short-prompt prices are taken.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .cost_line import UNPRICED
from .pricing import CachePricing


class ListPrice(NamedTuple):
    """One family's list prices, dollars per million tokens (``write_1h``: None where there is none)."""

    input: float
    read: float
    write: float
    output: float
    write_1h: float | None = None


def _anthropic(input: float, read: float, output: float) -> ListPrice:
    """Anthropic's cache: 5-minute writes at 1.25x input, 1-hour writes at 2x."""
    return ListPrice(input, read, input * 1.25, output, input * 2)


def _plain(input: float, read: float, output: float) -> ListPrice:
    """Automatic caching without a write premium (OpenAI, Gemini): what is not read is plain input."""
    return ListPrice(input, read, input, output)


ANTHROPIC_PRICES: dict[str, ListPrice] = {
    "claude-fable-5-2": _anthropic(8.00, 0.20, 40.00),
    "claude-mythos-5-2": _anthropic(8.00, 0.20, 40.00),
    "claude-fable-5-1": _anthropic(10.00, 0.25, 50.00),
    "claude-mythos-5-1": _anthropic(10.00, 0.25, 50.00),
    "claude-fable-5": _anthropic(10.00, 1.00, 50.00),
    "claude-mythos-5": _anthropic(10.00, 1.00, 50.00),
    "claude-opus-5-5": _anthropic(4.00, 0.20, 20.00),
    "claude-opus-5": _anthropic(5.00, 0.50, 25.00),
    "claude-opus-4-8": _anthropic(5.00, 0.50, 25.00),
    "claude-opus-4-7": _anthropic(5.00, 0.50, 25.00),
    "claude-opus-4-6": _anthropic(5.00, 0.50, 25.00),
    "claude-opus-4-5": _anthropic(5.00, 0.50, 25.00),
    "claude-opus-4-1": _anthropic(15.00, 1.50, 75.00),
    "claude-opus-4": _anthropic(15.00, 1.50, 75.00),
    "claude-3-opus": _anthropic(15.00, 1.50, 75.00),
    "claude-sonnet-5-5": _anthropic(2.00, 0.10, 10.00),  # cache reads cut to 0.05x on 2026-10-07
    "claude-sonnet-5": _anthropic(2.00, 0.20, 10.00),
    "claude-sonnet-4-6": _anthropic(3.00, 0.30, 15.00),
    "claude-sonnet-4-5": _anthropic(3.00, 0.30, 15.00),
    "claude-sonnet-4": _anthropic(3.00, 0.30, 15.00),
    "claude-3-7-sonnet": _anthropic(3.00, 0.30, 15.00),
    "claude-3-5-sonnet": _anthropic(3.00, 0.30, 15.00),
    "claude-haiku-5-5": _anthropic(0.10, 0.01, 0.50),  # prompts up to 100K tokens
    "claude-haiku-4-5": _anthropic(1.00, 0.10, 5.00),
    "claude-3-5-haiku": _anthropic(0.80, 0.08, 4.00),
    "claude-3-haiku": ListPrice(0.25, 0.03, 0.30, 1.25, 0.50),
}

OPENAI_PRICES: dict[str, ListPrice] = {
    "gpt-5.4": _plain(2.50, 0.25, 15.00),
    "gpt-5.4-mini": _plain(0.75, 0.075, 4.50),
    "gpt-5.2": _plain(1.75, 0.175, 14.00),
    "gpt-5.1": _plain(1.25, 0.125, 10.00),
    "gpt-5.1-codex": _plain(1.25, 0.125, 10.00),
    "gpt-5.1-codex-max": _plain(1.25, 0.125, 10.00),
    "gpt-5.1-codex-mini": _plain(0.25, 0.025, 2.00),
    "gpt-5": _plain(1.25, 0.125, 10.00),
    "gpt-5-codex": _plain(1.25, 0.125, 10.00),
    "gpt-5-chat-latest": _plain(1.25, 0.125, 10.00),
    "gpt-5-mini": _plain(0.25, 0.025, 2.00),
    "gpt-5-nano": _plain(0.05, 0.005, 0.40),
    "gpt-5-pro": ListPrice(15.00, 15.00, 15.00, 120.00),  # no cached-input discount
    "gpt-4.1": _plain(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _plain(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _plain(0.10, 0.025, 0.40),
    "gpt-4o": _plain(2.50, 1.25, 10.00),
    "chatgpt-4o": _plain(5.00, 5.00, 15.00),
    "gpt-4o-mini": _plain(0.15, 0.075, 0.60),
    "o1": _plain(15.00, 7.50, 60.00),
    "o1-mini": _plain(1.10, 0.55, 4.40),
    "o3": _plain(2.00, 0.50, 8.00),
    "o3-mini": _plain(1.10, 0.55, 4.40),
    "o4-mini": _plain(1.10, 0.275, 4.40),
    "codex-mini": _plain(1.50, 0.375, 6.00),
}

GEMINI_PRICES: dict[str, ListPrice] = {
    "gemini-3.5-flash": _plain(1.50, 0.15, 9.00),
    "gemini-3.1-pro": _plain(2.00, 0.20, 12.00),  # prompts up to 200K tokens
    "gemini-3.1-flash-lite": _plain(0.25, 0.025, 1.50),
    "gemini-3-pro": _plain(2.00, 0.20, 12.00),  # prompts up to 200K tokens
    "gemini-3-flash": _plain(0.50, 0.05, 3.00),
    "gemini-2.5-pro": _plain(1.25, 0.125, 10.00),  # prompts up to 200K tokens
    "gemini-2.5-flash": _plain(0.30, 0.03, 2.50),
    "gemini-2.5-flash-lite": _plain(0.10, 0.01, 0.40),
    "gemini-2.0-flash": _plain(0.10, 0.025, 0.40),
    "gemini-2.0-flash-lite": _plain(0.075, 0.075, 0.30),  # no implicit caching discount listed
}

TABLES = {"anthropic": ANTHROPIC_PRICES, "openai": OPENAI_PRICES, "gemini": GEMINI_PRICES}
# The cache rules of each provider, beside its prices (pricing.CachePricing fields).
_RULES: dict[str, dict[str, object]] = {
    "anthropic": {"ttl_seconds": 300, "write_premium": True, "max_breakpoints": 4, "lookback_blocks": 20},
    "openai": {"ttl_seconds": 300, "write_premium": False, "max_breakpoints": 0, "lookback_blocks": 0},
    "gemini": {
        "ttl_seconds": 300,
        "write_premium": False,
        "max_breakpoints": 0,
        "lookback_blocks": 0,
        "min_cacheable_tokens": 2048,
    },
}

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}-\d{2}(?:-\d{2,4})?|\d{3,}")
_VENDOR = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$")


def base_model(model: str) -> str:
    """The model id a price is looked up by: a fine-tune's base, without a path or vendor prefix."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name.split(":")[1]
    name = name.rsplit("/", 1)[-1]
    return _BEDROCK_VERSION.sub("", _VENDOR.sub("", name))


def _snapshot_suffix(rest: str) -> bool:
    """True when what follows a family prefix names a snapshot of that family, not another model."""
    if not rest:
        return True
    if rest[0] not in "-@":
        return False
    rest = rest[1:]
    for word in ("latest", "preview", "exp"):
        if rest == word or rest.startswith(word + "-"):
            return True
    return _DATE.fullmatch(rest) is not None


def family_of(api: str | None, model: str | None) -> str | None:
    """The price family of ``model`` on ``api`` (the longest family prefix with a snapshot suffix after
    it), or None when the table has none."""
    table = TABLES.get(api or "")
    if table is None or not model:
        return None
    name = base_model(model)
    found = [family for family in table if name.startswith(family) and _snapshot_suffix(name[len(family) :])]
    return max(found, key=len) if found else None


def model_pricing(api: str | None, model: str | None) -> CachePricing | None:
    """The list prices of ``model`` on ``api`` with that provider's cache rules, named by its family; None
    when the model is not in the table (the caller says so: :func:`unpriced`)."""
    family = family_of(api, model)
    if family is None or api is None:
        return None
    price = TABLES[api][family]
    return CachePricing.model_validate(
        {
            "name": family,
            "family": api,
            "input": price.input,
            "cached_read": price.read,
            "cache_write": price.write,
            "cache_write_1h": price.write_1h,
            "output": price.output,
            **_RULES[api],
        }
    )


def unpriced(model: str | None) -> str:
    """What the proxy says in place of prices for a model the table does not know."""
    return f"{UNPRICED}{model or '(no model)'}"


__all__ = [
    "ANTHROPIC_PRICES",
    "GEMINI_PRICES",
    "OPENAI_PRICES",
    "ListPrice",
    "base_model",
    "family_of",
    "model_pricing",
    "unpriced",
]
