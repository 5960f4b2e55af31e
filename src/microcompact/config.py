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
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .bill.pricing import PRESETS, CachePricing, for_api


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key path, value, what is allowed)."""


class _Strict(BaseModel):
    # strict: a config file says what it means. "5" is not 5, 1 is not true, 3.0 is not 3 (pydantic's lax
    # mode coerces all three); an int stands for a float. No NaN or infinity anywhere: no setting wants one.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic reads true/false as 1/0 for numbers; `protect_first_n: true` is a mistake, not 1.
        if (
            isinstance(v, bool)
            and info.field_name
            and cls.model_fields[info.field_name].annotation in (int, float, int | None, float | None)
        ):
            raise ValueError("expected a number, not true/false")
        return v


class CompressionConfig(_Strict):
    enabled: bool = True
    threshold: float = Field(0.50, gt=0.0, le=1.0, description="batch threshold as a fraction of the context limit")
    target_ratio: float = Field(0.20, gt=0.0, lt=1.0, description="tail budget as a fraction of the threshold")
    protect_first_n: int = Field(3, ge=0, le=1000)
    protect_first_max_tokens: int | None = Field(
        None, ge=0, le=100_000_000, description="head budget; unset = head_share of the threshold"
    )
    tokenizer: Literal["o200k_base", "cl100k_base", "estimate"] = "o200k_base"
    micro_compact: bool = False
    micro_compact_every_n_turns: int = Field(
        1, ge=1, le=10_000, description="turn-end passes every N turns; 0 means 1 (Hermes), negative is an error"
    )
    micro_compact_defrag_threshold_tokens: int = Field(2000, ge=200, le=1_000_000)
    micro_compact_min_reclaim_tokens: int = Field(0, ge=0, le=10_000_000)
    micro_compact_max_exchange_tokens: int = Field(8000, ge=256, le=10_000_000)
    micro_compact_max_failures: int = Field(3, ge=1, le=100)
    micro_compact_background: bool = False
    micro_compact_cache_ttl_seconds: float | None = Field(None, gt=0, le=86_400)
    micro_compact_max_occupancy_pct: float = Field(60.0, gt=0, le=100)
    micro_compact_schedule: Literal["auto", "cadence", "price"] = Field(
        "auto", description="price: fold when it pays (microcompact.fold_price); auto: price when one is known"
    )
    micro_compact_low_water_tokens: int | None = Field(
        None, ge=0, le=10_000_000, description="price policy: history a fold keeps verbatim; unset = derived"
    )
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
    min_tail_messages: int = Field(3, ge=1, le=1000)

    @field_validator("micro_compact_every_n_turns", mode="before")
    @classmethod
    def _clamp_cadence(cls, v: Any) -> Any:
        # 0 is read as 1 (Hermes' configs write it for "every turn"): a cadence can slow passes, never disable
        # them. A negative value is a mistake, refused by the range like any other.
        if isinstance(v, int) and not isinstance(v, bool) and v == 0:
            return 1
        return v


class AuxCompressionConfig(_Strict):
    # "upstream": ``serve`` asks the client's own model, on the client's credential, for the summary
    # (summarizers/upstream.py); the extractive summarizer writes it when that fails.
    provider: Literal["extractive", "openai", "openai-api", "openrouter", "vllm", "llamacpp", "ollama", "upstream"] = (
        "extractive"
    )
    model: str | None = Field(None, min_length=1, max_length=500)
    base_url: str | None = None
    api_key_env: str = Field("OPENAI_API_KEY", max_length=200)
    timeout: float = Field(60.0, gt=0, le=3600)
    max_output_tokens: int = Field(1024, ge=64, le=32768)
    temperature: float = Field(0.1, ge=0.0, le=2.0)
    max_input_tokens: int = Field(32_000, ge=1000, le=10_000_000)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        # Checked here, not at the first request: a bad URL is a config error, named with its key.
        if v is not None:
            _check_http_url(v)
        return v

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, v: str) -> str:
        # The name of a variable, never its value: an empty or spaced name would read no key at all.
        if not _ENV_NAME.fullmatch(v):
            raise ValueError("must be the name of an environment variable (letters, digits, _), such as OPENAI_API_KEY")
        return v

    @property
    def kind(self) -> str:
        """``extractive``, ``upstream`` (the client's own model, through ``serve``) or ``openai`` (an endpoint)."""
        return self.provider if self.provider in ("extractive", "upstream") else "openai"

    @property
    def local(self) -> bool:
        """True for an endpoint on this machine (a local model, on CPU more often than not)."""
        host = urlsplit(self.base_url).hostname if self.base_url else None
        return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")

    def timeout_seconds(self) -> float:
        """``timeout`` when set; else one that suits the endpoint: a pass of a small local model on CPU takes
        1.5-9 minutes (issue 12), a hosted model answers within a minute."""
        if "timeout" in self.model_fields_set or not self.local:
            return self.timeout
        return LOCAL_TIMEOUT_SECONDS


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_http_url(url: str) -> None:
    """Raise ValueError unless ``url`` is ``http(s)://host[:port][/path]``."""
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ValueError("must not hold spaces or control characters (a newline pasted in?)")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host, such as http://127.0.0.1:8000/v1")
    del port


class AuxiliaryConfig(_Strict):
    compression: AuxCompressionConfig = AuxCompressionConfig()


class ModelConfig(_Strict):
    context_length: int | None = Field(None, ge=1024, le=100_000_000)


class PricingConfig(_Strict):
    """The provider's prices and cache rules (see :mod:`microcompact.bill.pricing`): a preset, and any field of it
    overridden. Unset, the proxy takes the preset of the API a request speaks and a library ``Session`` knows
    no price (it schedules as before)."""

    preset: str | None = None
    input: float | None = Field(None, ge=0, description="dollars per million input tokens")
    cached_read: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)
    cache_write_1h: float | None = Field(None, ge=0)
    output: float | None = Field(None, ge=0)
    ttl_seconds: float | None = Field(None, gt=0, le=86_400)
    write_premium: bool | None = None
    cache: bool | None = None
    max_breakpoints: int | None = Field(None, ge=0, le=64)
    lookback_blocks: int | None = Field(None, ge=0, le=10_000)
    min_cacheable_tokens: int | None = Field(None, ge=0, le=1_000_000)
    summarizer_input: float | None = Field(None, ge=0, description="the summarizer model's own input price")
    summarizer_output: float | None = Field(None, ge=0)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str | None) -> str | None:
        if v is not None and v not in PRESETS:
            raise ValueError(f"unknown preset (known: {', '.join(PRESETS)})")
        return v

    @property
    def configured(self) -> bool:
        """True when the config names a price at all (a preset or any field; a dumped and reloaded config
        holds every key, unset ones as null)."""
        return any(getattr(self, k) is not None for k in self.model_fields_set)

    def resolve(self, api: str | None = None, summarizer_free: bool = False) -> CachePricing:
        """The prices in force: the preset (else ``api``'s default), with the fields set here over it. An
        offline summarizer (``summarizer_free``) costs nothing unless its prices are set."""
        base = PRESETS[self.preset] if self.preset else for_api(api or "")
        overrides = {
            k: getattr(self, k) for k in self.model_fields_set if k != "preset" and getattr(self, k) is not None
        }
        if summarizer_free:
            overrides.setdefault("summarizer_input", 0.0)
            overrides.setdefault("summarizer_output", 0.0)
        data = {**base.model_dump(), **overrides}
        if overrides:
            data["name"] = f"{base.name} (configured)"
        return CachePricing.model_validate(data)


# A model's context window in the ``models:`` section (name -> tokens; see microcompact.windows).
ModelWindow = Annotated[StrictInt, Field(ge=1024, le=100_000_000)]
# Anthropic models whose thinking blocks are bound to their prefix ("preserved thinking"): a fold before a
# block invalidates it. What the proxy does about it, per model family (see server/thinking.py):
# "remove" the blocks a fold invalidated (a valid edit on every account), "drop_block" (leave them and ask the
# API to drop them; needs the thinking-binding-controls beta), "keep" (forward them as sent).
ThinkingMode = Literal["remove", "drop_block", "keep"]
PRESERVED_THINKING_FAMILIES = (
    "fable-5-1",
    "fable-5-2",
    "mythos-5-1",
    "mythos-5-2",
    "opus-5-5",
    "sonnet-5-5",
    "haiku-5-5",
)


def _default_families() -> dict[str, ThinkingMode]:
    return dict.fromkeys(PRESERVED_THINKING_FAMILIES, "remove")


class ThinkingConfig(_Strict):
    families: dict[str, ThinkingMode] = Field(
        default_factory=lambda: _default_families(),
        description="model family (claude-FAMILY-...) -> what a fold does to the thinking blocks it invalidates",
    )
    other: ThinkingMode = Field("keep", description="models of no listed family (no prefix binding known)")

    @field_validator("families", mode="after")
    @classmethod
    def _over_the_defaults(cls, families: dict[str, ThinkingMode]) -> dict[str, ThinkingMode]:
        # A file naming one family changes that family; the others keep their default.
        if any(not k.strip() for k in families):
            raise ValueError("a model family must not be empty")
        return {**_default_families(), **families}


class ProxyConfig(_Strict):
    """``microcompact serve``'s own settings (the command line's flags beat them)."""

    share_sessions_across_keys: StrictBool = Field(
        False, description="identical histories are one conversation whatever credential sends them (a shared key)"
    )


class Config(_Strict):
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

    def cache_pricing(self, api: str | None = None) -> CachePricing | None:
        """The prices scheduling goes by: the configured ones, else ``api``'s preset when an API is named
        (the proxy), else None (a library session with no price known)."""
        if not self.pricing.configured and api is None:
            return None
        # The upstream summarizer's calls are billed from their own usage (read, written, output at the
        # client's model's prices: server/upstream_summary.py), not per pass at a summarizer price.
        return self.pricing.resolve(api, summarizer_free=self.auxiliary.compression.kind in ("extractive", "upstream"))

    def threshold_tokens(self) -> int | None:
        limit = self.model.context_length
        return int(self.compression.threshold * limit) if limit else None

    def tail_budget_tokens(self) -> int:
        """``target_ratio * threshold_tokens``; with an unknown limit, of the fallback limit."""
        limit = self.model.context_length or FALLBACK_CONTEXT_LIMIT
        return int(self.compression.target_ratio * self.compression.threshold * limit)

    def piece_budget_tokens(self) -> int:
        """Tokens one micro pass may absorb: ``micro_compact_max_exchange_tokens`` when set explicitly, else
        scaled with the threshold (an eighth of it, at most the 8,000 default): 2,000 in a 32K window.

        A fixed 8,000 is half a 32K window's threshold: request-mode passes would wait for that much to
        pile up outside the tail, and a small window overflowed before they ran.
        """
        c = self.compression
        if "micro_compact_max_exchange_tokens" in c.model_fields_set:
            return c.micro_compact_max_exchange_tokens
        threshold = self.threshold_tokens()
        if not threshold:
            return c.micro_compact_max_exchange_tokens
        return max(PIECE_BUDGET_MIN, min(c.micro_compact_max_exchange_tokens, threshold // PIECE_BUDGET_DIVISOR))

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

    def fold_min_messages(self) -> int:
        """The fewest messages a fold keeps verbatim after its marker: ``min_tail_messages`` when set, else
        one, so the low-water mark in tokens decides (the newest iteration always stays whole: its tool
        call comes with its result). The default three would keep the two newest iterations whatever
        their size, and each fold rewrites what it keeps: with 24 KB tool outputs that is four times the
        low-water mark."""
        c = self.compression
        return c.min_tail_messages if "min_tail_messages" in c.model_fields_set else 1

    def summarizer_output_tokens(self) -> int:
        """``max_output_tokens`` when set; else at least the defrag threshold, so a merge can always write
        back a rolling summary as long as defrag lets it grow (the 1,024 default is below 2,000)."""
        aux = self.auxiliary.compression
        if "max_output_tokens" in aux.model_fields_set:
            return aux.max_output_tokens
        return max(aux.max_output_tokens, self.compression.micro_compact_defrag_threshold_tokens)

    def with_overrides(self, source: str = "overrides", **sections: dict[str, Any]) -> Config:
        data = self.model_dump(exclude_unset=True)  # what was never set stays derivable (piece budget)
        for section, values in sections.items():
            target = data
            for part in section.split("."):
                target = target.setdefault(part, {})
            target.update({k: v for k, v in values.items() if v is not None})
        return parse_config(data, source=source)


# Used only to size the protected tail when the model's window is unknown; never looked up remotely.
FALLBACK_CONTEXT_LIMIT = 128_000
# Derived piece budget: threshold / this, never below the smallest configurable budget.
PIECE_BUDGET_DIVISOR = 8
PIECE_BUDGET_MIN = 256
# Derived low-water mark: at most a piece budget divided by this (4,000 tokens at a 200K window).
LOW_WATER_DIVISOR = 2
# Derived head budget: this share of the threshold.
HEAD_SHARE = 0.10
# The summarizer's timeout for an endpoint on this machine when none is set (CPU speeds).
LOCAL_TIMEOUT_SECONDS = 600.0


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
    from .redact import redact_text

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
    if aux.kind == "openai" and c.micro_compact and config.summarizer_output_tokens() < threshold:
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
