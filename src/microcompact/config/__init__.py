"""YAML configuration, validated with errors that name the key path, the bad value and the allowed range.

Keys follow Hermes Agent's names so its users find them where they expect::

    compression:
      enabled: true
      threshold: 0.50
      target_ratio: 0.20
      protect_first_n: 3
      micro_compact: true
      micro_compact_every_n_turns: 1
      micro_compact_defrag_threshold_tokens: 2000
      micro_compact_min_reclaim_tokens: 0
      micro_compact_max_exchange_tokens: 8000
    auxiliary:
      compression: {provider: openai, model: qwen2.5-7b-instruct, base_url: http://127.0.0.1:8000/v1,
                    api_key_env: OPENAI_API_KEY, timeout: 60}
    model:
      context_length: 200000
    pricing:                 # the provider's cache prices (microcompact.bill.pricing); unset: by the API
      preset: anthropic      # anthropic | anthropic-1h | openai | openai-write | gpt-4o | none
      summarizer_input: 0.8  # any preset field may be overridden (dollars per million tokens)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
)

from ..bill.model_prices import model_pricing
from ..bill.pricing import CachePricing
from .sections import (
    LOCAL_TIMEOUT_SECONDS,
    PRESERVED_THINKING_FAMILIES,
    AuxCompressionConfig,
    AuxiliaryConfig,
    ModelConfig,
    ModelWindow,
    PricingConfig,
    ProxyConfig,
    StrictSection,
    SummarizerKind,
    ThinkingConfig,
    ThinkingMode,
)

__all__ = [  # the sections' home is config.sections; they are read here as parts of a Config
    "LOCAL_TIMEOUT_SECONDS",
    "PRESERVED_THINKING_FAMILIES",
    "AuxCompressionConfig",
    "AuxiliaryConfig",
    "CompressionConfig",
    "Config",
    "ConfigError",
    "ModelConfig",
    "PricingConfig",
    "ProxyConfig",
    "SummarizerKind",
    "ThinkingConfig",
    "ThinkingMode",
    "home_dir",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key path, value, what is allowed)."""


class CompressionConfig(StrictSection):
    enabled: bool = True
    threshold: float = Field(0.50, gt=0.0, le=1.0, description="batch threshold as a fraction of the context limit")
    target_ratio: float = Field(0.20, gt=0.0, lt=1.0, description="tail budget as a fraction of the threshold")
    protect_first_n: int = Field(3, ge=0, le=1000)
    protect_first_max_tokens: int | None = Field(
        None, ge=0, le=100_000_000, description="head budget; unset = head_share of the threshold"
    )
    tokenizer: Literal["o200k_base", "cl100k_base", "estimate"] = "o200k_base"
    # Settings whose default depends on the front end are None until one is chosen ("derive"), so a config
    # says the same after a round trip through its dump: a library Session reads None as off (inline, not
    # cache-aware), ``replay`` and ``serve`` put their own defaults in with Config.with_defaults.
    micro_compact: bool | None = Field(None, description="unset: off in a library Session, on in replay and serve")
    micro_compact_every_n_turns: int = Field(
        1, ge=1, le=10_000, description="turn-end passes every N turns; 0 means 1 (Hermes), negative is an error"
    )
    micro_compact_defrag_threshold_tokens: int = Field(2000, ge=200, le=1_000_000)
    micro_compact_min_reclaim_tokens: int = Field(0, ge=0, le=10_000_000)
    micro_compact_max_exchange_tokens: int | None = Field(
        None, ge=256, le=10_000_000, description="tokens one micro pass may absorb; unset = derived (at most 8,000)"
    )
    micro_compact_max_failures: int = Field(3, ge=1, le=100)
    micro_compact_background: bool | None = Field(
        None, description="unset: inline in a Session; in serve, background for a model summarizer, else inline"
    )
    micro_compact_cache_ttl_seconds: float | None = Field(
        None, ge=0, le=86_400, description="cache-aware scheduling's cache TTL; 0: off; unset: off, 300 in serve"
    )
    micro_compact_max_occupancy_pct: float = Field(60.0, gt=0, le=100)
    micro_compact_schedule: Literal["auto", "cadence", "price"] = Field(
        "auto",
        description="price: fold when it pays (microcompact.bill.fold_price); auto: price when one is known "
        "(serve always knows its API's: price there)",
    )
    micro_compact_low_water_tokens: int | None = Field(
        None, ge=0, le=10_000_000, description="price policy: history a fold keeps verbatim; unset = derived"
    )
    # Price policy: keep the tool results the agent still uses verbatim inside a fold, the low-water mark
    # following them (micro/in_use.py). On by default: measured through serve, with the marker's ledger, it
    # lifts future-reference recall on the shared Claude Code sessions from ~94% to ~98%
    # (docs/cost-and-cache.md, "Fold by use").
    micro_compact_fold_by_use: bool = True
    proactive_prune_min_reclaim_tokens: int = Field(4096, ge=0, le=10_000_000)
    prune_min_tool_tokens: int = Field(200, ge=1, le=10_000_000)
    prune_max_argument_tokens: int = Field(1000, ge=50, le=10_000_000)
    batch_user_floor_ratio: float = Field(0.5, gt=0.0, le=1.0)
    batch_min_free_ratio: float = Field(0.10, ge=0.0, lt=1.0)
    batch_max_calls: int = Field(
        8,
        ge=1,
        le=1000,
        description="summarizer calls per batch compaction; older "
        "runs of work get the deterministic extractive summary",
    )
    min_tail_messages: int | None = Field(
        None, ge=1, le=1000, description="fewest messages the protected tail keeps; unset = 3 (a fold keeps 1)"
    )

    @field_validator("micro_compact_every_n_turns", mode="before")
    @classmethod
    def _clamp_cadence(cls, v: Any) -> Any:
        # 0 is read as 1 (Hermes' configs write it for "every turn"): a cadence can slow passes, never disable
        # them. A negative value is a mistake, refused by the range like any other.
        if isinstance(v, int) and not isinstance(v, bool) and v == 0:
            return 1
        return v


class Config(StrictSection):
    compression: CompressionConfig = CompressionConfig()
    auxiliary: AuxiliaryConfig = AuxiliaryConfig()
    model: ModelConfig = ModelConfig()
    # The proxy's per-model windows, added to (or overriding) the built-in table: {model name: tokens}.
    models: dict[str, ModelWindow] = Field(default_factory=dict)

    @field_validator("models")
    @classmethod
    def _named_models(cls, v: dict[str, int]) -> dict[str, int]:
        if any(not k.strip() for k in v):
            raise ValueError("a model name must not be empty")
        return v

    thinking: ThinkingConfig = ThinkingConfig()
    pricing: PricingConfig = PricingConfig()
    proxy: ProxyConfig = ProxyConfig()

    def cache_pricing(self, api: str | None = None, model: str | None = None) -> CachePricing | None:
        """The prices a request is billed (and scheduling goes) by: the configured ones whenever the config
        names any; else, for a request of ``api`` (the proxy), the list prices of its ``model``'s family
        (bill/model_prices.py); None for a model the table does not know (unpriced: no other model's prices
        are borrowed) and for a library session with no price configured."""
        # The upstream summarizer's calls are billed from their own usage (read, written, output at the
        # client's model's prices: server/upstream_summary.py), not per pass at a summarizer price.
        free = self.auxiliary.compression.kind in (SummarizerKind.EXTRACTIVE, SummarizerKind.UPSTREAM)
        listed = model_pricing(api, model) if api is not None else None
        if self.pricing.configured:  # a preset named wins; fields alone go over the model's (or API's) prices
            return self.pricing.resolve(api, summarizer_free=free, base=listed)
        return None if listed is None else self.pricing.resolve(api, summarizer_free=free, base=listed)

    def threshold_tokens(self) -> int | None:
        limit = self.model.context_length
        return int(self.compression.threshold * limit) if limit else None

    def tail_budget_tokens(self) -> int:
        """``target_ratio * threshold_tokens``; with an unknown limit, of the fallback limit."""
        limit = self.model.context_length or FALLBACK_CONTEXT_LIMIT
        return int(self.compression.target_ratio * self.compression.threshold * limit)

    def piece_budget_tokens(self) -> int:
        """Tokens one micro pass may absorb: ``micro_compact_max_exchange_tokens`` when set, else scaled with
        the threshold (an eighth of it, at most ``PIECE_BUDGET_MAX``): 2,000 in a 32K window.

        A fixed 8,000 is half a 32K window's threshold: request-mode passes would wait for that much to
        pile up outside the tail, and a small window overflowed before they ran.
        """
        c = self.compression
        if c.micro_compact_max_exchange_tokens is not None:
            return c.micro_compact_max_exchange_tokens
        threshold = self.threshold_tokens()
        if not threshold:
            return PIECE_BUDGET_MAX
        return max(PIECE_BUDGET_MIN, min(PIECE_BUDGET_MAX, threshold // PIECE_BUDGET_DIVISOR))

    def head_budget_tokens(self) -> int:
        """Tokens of non-user messages the protected head may hold: ``protect_first_max_tokens`` when set,
        else ``HEAD_SHARE`` of the threshold (of the fallback limit when the window is unknown). A large early
        tool output beyond it leaves the head and can be compacted like any other."""
        c = self.compression
        if c.protect_first_max_tokens is not None:
            return c.protect_first_max_tokens
        limit = self.model.context_length or FALLBACK_CONTEXT_LIMIT
        return int(HEAD_SHARE * c.threshold * limit)

    def low_water_tokens(self) -> int:
        """What a fold keeps verbatim after its marker (the price policy's low-water mark, in tokens):
        ``micro_compact_low_water_tokens`` when set, else the tail budget capped at half a piece budget
        (4,000 at a 200K window): the last iterations of the current turn, at least the newest one (see
        :meth:`fold_min_messages`). What a fold keeps is what the next request writes again, so this is
        the main lever on what folding costs."""
        c = self.compression
        if c.micro_compact_low_water_tokens is not None:
            return c.micro_compact_low_water_tokens
        return min(self.tail_budget_tokens(), self.piece_budget_tokens() // LOW_WATER_DIVISOR)

    def summary_room_tokens(self) -> int:
        """The rolling summary's room, which its ledger takes a share of: the defrag threshold, and at most a
        sixteenth of the batch threshold, so a small window does not spend on the marker the room its
        history needs (1,000 tokens at 32K; unchanged from 64K up)."""
        defrag = self.compression.micro_compact_defrag_threshold_tokens
        threshold = self.threshold_tokens()
        if not threshold:
            return defrag
        return min(defrag, max(PIECE_BUDGET_MIN, threshold // SUMMARY_ROOM_DIVISOR))

    def ledger_room_tokens(self) -> int:
        """Tokens the rolling summary's ledger may take: ``LEDGER_MULTIPLE`` times the summary room, at most
        ``threshold * threshold / LEDGER_SCALE_TOKENS`` (a small window keeps its room for the history), at
        least half the room. The ledger is compressed to it at every merge and is not counted against the
        defrag threshold (which condenses prose only)."""
        room = self.summary_room_tokens()
        threshold = self.threshold_tokens()
        if not threshold:
            return LEDGER_MULTIPLE * room
        return min(LEDGER_MULTIPLE * room, max(room // 2, threshold * threshold // LEDGER_SCALE_TOKENS))

    def fold_min_messages(self) -> int:
        """The fewest messages a fold keeps verbatim after its marker: ``min_tail_messages`` when set, else
        one, so the low-water mark in tokens decides (the newest iteration always stays whole: its tool
        call comes with its result). The default three would keep the two newest iterations whatever
        their size, and each fold rewrites what it keeps: with 24 KB tool outputs that is four times the
        low-water mark."""
        given = self.compression.min_tail_messages
        return given if given is not None else FOLD_MIN_TAIL_MESSAGES

    def tail_min_messages(self) -> int:
        """The fewest messages the protected tail keeps: ``min_tail_messages`` when set, else
        ``MIN_TAIL_MESSAGES``."""
        given = self.compression.min_tail_messages
        return given if given is not None else MIN_TAIL_MESSAGES

    def summarizer_output_tokens(self) -> int:
        """``max_output_tokens`` when set; else at least the defrag threshold, so a merge can always write
        back a rolling summary as long as defrag lets it grow (the 1,024 default is below 2,000)."""
        aux = self.auxiliary.compression
        if aux.max_output_tokens is not None:
            return aux.max_output_tokens
        return max(SUMMARIZER_OUTPUT_TOKENS, self.compression.micro_compact_defrag_threshold_tokens)

    def with_overrides(self, source: str = "overrides", **sections: dict[str, Any]) -> Config:
        """This config with the values of ``sections`` (``"compression"``, ``"auxiliary.compression"``: a
        dict of settings each) over its own; a None value changes nothing (an option not given)."""
        return self._merged(source, sections, lambda current, new: new is not None)

    def with_defaults(self, source: str = "defaults", **sections: dict[str, Any]) -> Config:
        """This config with the values of ``sections`` where it leaves a setting to be derived (None): how
        ``serve`` and ``replay`` give their own defaults while what a file says stays."""
        return self._merged(source, sections, lambda current, new: current is None and new is not None)

    def _merged(self, source: str, sections: dict[str, dict[str, Any]], takes: Callable[[Any, Any], bool]) -> Config:
        data = self.model_dump()
        for section, values in sections.items():
            target = data
            for part in section.split("."):
                target = target.setdefault(part, {})
            target.update({k: v for k, v in values.items() if takes(target.get(k), v)})
        return parse_config(data, source=source)


# Used only to size the protected tail when the model's window is unknown; never looked up remotely.
FALLBACK_CONTEXT_LIMIT = 128_000
# Derived piece budget: threshold / this, never below the smallest configurable budget.
PIECE_BUDGET_DIVISOR = 8
PIECE_BUDGET_MIN = 256
# Derived piece budget: at most this (micro_compact_max_exchange_tokens unset).
PIECE_BUDGET_MAX = 8000
# The protected tail's fewest messages when min_tail_messages is unset; a fold's (see fold_min_messages).
MIN_TAIL_MESSAGES = 3
FOLD_MIN_TAIL_MESSAGES = 1
# The summarizer's output cap when max_output_tokens is unset is at least this (and the defrag threshold).
SUMMARIZER_OUTPUT_TOKENS = 1024
# The rolling summary's ledger room is at most this fraction of the batch threshold (config.summary_room_tokens).
SUMMARY_ROOM_DIVISOR = 16
# The ledger (what the marker keeps of files, failures, tests and what tools showed, ranked by value) may take
# this many times the summary room (8,000 tokens at a 200K window), and at most a share of the batch threshold
# that grows with it, threshold / LEDGER_SCALE_TOKENS (so 500 tokens at a 32K window, as before, where the
# history needs the room; 1,757 at 60K), never less than half the summary room. It is the cheapest recall
# there is: replayed on the shared Claude Code sessions (bench/recall.py, folding by use), half the room kept
# 94.4% of what the agent used next at a 17.0K mean prompt, four times it 97.9% at 18.6K
# (docs/cost-and-cache.md). Defrag condenses the prose only, so a larger ledger never makes it run.
LEDGER_MULTIPLE = 4
LEDGER_SCALE_TOKENS = 512_000
# Derived low-water mark: at most a piece budget divided by this (4,000 tokens at a 200K window).
LOW_WATER_DIVISOR = 2
# Derived head budget: this share of the threshold.
HEAD_SHARE = 0.10


def home_dir() -> Path:
    return Path(os.environ.get("MICROCOMPACT_HOME") or Path.home() / ".microcompact")


# Keys whose values are never echoed in an error (a key pasted where its variable's name belongs).
_SECRET_KEY = re.compile(r"(?i)(?:key|token|secret|password|passwd|credential)s?$")


def _format_errors(exc: ValidationError, source: str) -> str:
    """One line for one problem; a heading and one line per problem for several."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            if _SECRET_KEY.search(path) and path.startswith("auxiliary."):
                msg += " (put the key in an environment variable and name that variable with api_key_env)"
        ctx = err.get("ctx") or {}
        allowed = ", ".join(f"{k} {v}" for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
        allowed = f" (allowed: {allowed})" if allowed else ""
        lines.append(f"{path}: {msg}; got {_shown_value(path, err.get('input'))}{allowed}")
    if len(lines) == 1:
        return f"invalid configuration in {source}: {lines[0]}"
    return "\n  ".join([f"invalid configuration in {source}:", *lines])


def _shown_value(path: str, value: Any) -> str:
    """The bad value as the error shows it: hidden under a secret-looking key, else redacted and bounded."""
    last = path.rsplit(".", 1)[-1]
    if _SECRET_KEY.search(last) and last != "api_key_env":
        return "a value (hidden: it may be a secret)"
    from ..redact import redact_text

    shown = redact_text(repr(value))
    return shown if len(shown) <= 200 else shown[:200] + "..."


def parse_config(data: Any, source: str = "<config>") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"invalid configuration in {source}: the top level must be a mapping, got {type(data).__name__}"
        )
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    _check_settings_work_together(config, source)
    return config


def _check_settings_work_together(config: Config, source: str) -> None:
    """Settings each valid alone that cannot work together: a clear error now, not failures at every pass."""
    aux, c = config.auxiliary.compression, config.compression
    threshold = c.micro_compact_defrag_threshold_tokens
    if aux.kind is SummarizerKind.ENDPOINT and c.micro_compact and config.summarizer_output_tokens() < threshold:
        raise ConfigError(
            f"invalid configuration in {source}: auxiliary.compression.max_output_tokens: {aux.max_output_tokens} "
            f"is below compression.micro_compact_defrag_threshold_tokens ({threshold}), so the model could not "
            f"write back a summary as long as defrag allows; set it to at least {threshold} (or leave it unset)"
        )


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load ``path``, or ``$MICROCOMPACT_HOME/config.yaml`` when it exists, else the defaults."""
    if path is None:
        default = home_dir() / "config.yaml"
        if not default.exists():
            return Config()
        path = default
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config {p} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start} cannot be decoded"
        ) from None
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"invalid YAML in {where}: {problem}") from None
    return parse_config(data, source=str(p))


class _NoAliasLoader(yaml.SafeLoader):
    """A safe loader that refuses anchors and aliases before anything is built.

    A config has no use for them, and a few hundred bytes of nested aliases ("billion laughs") expand to
    gigabytes once the document is built and validated.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        # types-PyYAML leaves Parser.peek_event unannotated, so strict mypy needs this one narrow ignore.
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            what = f"aliases (*{event.anchor})" if isinstance(event, yaml.AliasEvent) else f"anchors (&{event.anchor})"
            raise yaml.composer.ComposerError(
                None, None, f"YAML {what} are not allowed in a config: write the values out", event.start_mark
            )
        return super().compose_node(parent, index)
