"""What a session costs with a provider prompt cache, so rewriting history can be priced, not guessed.

The model, request by request:

- The provider caches the prompt of each request. The next request reads from the cache the longest
  prefix it shares with the cached prompt (message by message: a message rewritten at position k breaks
  the prefix from k on), unless the cache expired: more than ``ttl_seconds`` passed since the last request.
- Anthropic-style pricing (explicit cache breakpoints at the end of the prompt): the shared prefix is billed
  as cached reads, the rest is written to the cache at the write price (1.25x input).
- OpenAI-style pricing (automatic caching): the shared prefix is billed as cached reads, the rest as plain
  input (``write_premium: false``), or written at a premium on newer models (the ``openai-write`` preset).
- No cache (``cache: false``, the ``none`` preset): every prompt token is plain input.

Prices and cache rules are :mod:`microcompact.bill.pricing`'s (the engine and the proxy use the same model);
this module tallies a replay's requests against them.
- The reply (the next assistant message) is billed as output; summarizer calls at their own prices.

Request times come from ``_ts`` on messages (seconds; importers keep the source's timestamps there);
without them every model request is assumed to come ``assumed_gap_seconds`` after the previous one, and
the report says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..config import ConfigError
from ..messages import Message
from .pricing import PRESETS, CachePricing

# One home for prices and cache rules: :mod:`microcompact.bill.pricing`. ``Pricing`` stays the name replays use.
Pricing = CachePricing


def load_pricing(spec: str) -> Pricing:
    """A preset name (see :data:`microcompact.bill.pricing.PRESETS`) or a YAML file with the fields of
    :class:`Pricing`."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.exists():
        raise ConfigError(f"--pricing: {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return Pricing.model_validate({"name": path.stem, **data})
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML in pricing file {path}: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid pricing file {path}: {problems}") from None
    except TypeError:
        raise ConfigError(f"invalid pricing file {path}: the top level must be a mapping") from None


@dataclass
class CostTally:
    requests: int = 0
    cached_read_tokens: int = 0
    cache_write_tokens: int = 0
    uncached_tokens: int = 0
    output_tokens: int = 0
    cache_expiries: int = 0
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0

    def cost(self, p: Pricing) -> dict[str, float]:
        main = p.prompt_cost(self.cached_read_tokens, self.cache_write_tokens, self.uncached_tokens)
        main += p.output_cost(self.output_tokens)
        summ = p.summarizer_cost(self.summarizer_input_tokens, self.summarizer_output_tokens)
        return {"main": round(main, 6), "summarizer": round(summ, 6), "total": round(main + summ, 6)}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CacheModel:
    """Feeds requests through the cache model and tallies tokens by price class."""

    pricing: Pricing
    tally: CostTally = field(default_factory=CostTally)
    _cached: list[Message] = field(default_factory=list)  # the last prompt's message objects
    _last_time: float | None = None

    def request(self, prompt: list[Message], tokens: list[int], now: float, output_tokens: int) -> None:
        """One model request with ``prompt`` (the library's own message objects: identity = unchanged)."""
        t = self.tally
        t.requests += 1
        expired = self._last_time is not None and now - self._last_time > self.pricing.ttl_seconds
        shared = 0
        if not self.pricing.cache:
            expired = False  # nothing was cached, so nothing expires
        elif not expired:
            limit = min(len(prompt), len(self._cached))
            while shared < limit and prompt[shared] is self._cached[shared]:
                shared += 1
        elif self._cached:
            t.cache_expiries += 1
        read = sum(tokens[:shared])
        rest = sum(tokens[shared:])
        t.cached_read_tokens += read
        if self.pricing.cache and self.pricing.write_premium:
            t.cache_write_tokens += rest
        else:
            t.uncached_tokens += rest
        t.output_tokens += output_tokens
        self._cached = list(prompt)
        self._last_time = now

    def summarizer_call(self, input_tokens: int, output_tokens: int) -> None:
        self.tally.summarizer_calls += 1
        self.tally.summarizer_input_tokens += input_tokens
        self.tally.summarizer_output_tokens += output_tokens
