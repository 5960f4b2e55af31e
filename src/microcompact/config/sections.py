"""The sections of a :class:`~microcompact.config.Config` other than ``compression``: the summarizer
(``auxiliary``), the model's window (``model``), prices (``pricing``), thinking blocks (``thinking``) and
``serve``'s own settings (``proxy``); and :class:`StrictSection`, how every section reads a file.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, field_validator

from ..bill.pricing import PRESETS, CachePricing, for_api

# The summarizer's timeout when none is set: for an endpoint on this machine (CPU speeds), and elsewhere.
LOCAL_TIMEOUT_SECONDS = 600.0
DEFAULT_TIMEOUT_SECONDS = 60.0


class StrictSection(BaseModel):
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


class SummarizerKind(StrEnum):
    """Who writes the summary, as far as cost, waiting and keys go (a closed set: one per way)."""

    EXTRACTIVE = "extractive"  # code in this process: free, milliseconds, no key
    UPSTREAM = "upstream"  # the client's own model through ``serve``, on the client's credential
    ENDPOINT = "openai"  # an OpenAI-compatible endpoint: a model call, its key, its price


class AuxCompressionConfig(StrictSection):
    # "upstream": ``serve`` asks the client's own model, on the client's credential, for the summary
    # (summarizers/upstream.py); the extractive summarizer writes it when that fails.
    provider: Literal["extractive", "openai", "openai-api", "openrouter", "vllm", "llamacpp", "ollama", "upstream"] = (
        "extractive"
    )
    model: str | None = Field(None, min_length=1, max_length=500)
    base_url: str | None = None
    api_key_env: str = Field("OPENAI_API_KEY", max_length=200)
    timeout: float | None = Field(None, gt=0, le=3600, description="seconds per call; unset = derived")
    max_output_tokens: int | None = Field(None, ge=64, le=32768, description="unset = derived")
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
    def kind(self) -> SummarizerKind:
        """The :class:`SummarizerKind` of ``provider``: every endpoint provider is one kind."""
        if self.provider in ("extractive", "upstream"):
            return SummarizerKind(self.provider)
        return SummarizerKind.ENDPOINT

    @property
    def local(self) -> bool:
        """True for an endpoint on this machine (a local model, on CPU more often than not)."""
        host = urlsplit(self.base_url).hostname if self.base_url else None
        return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")

    def timeout_seconds(self) -> float:
        """``timeout`` when set; else one that suits the endpoint: a pass of a small local model on CPU takes
        1.5-9 minutes (issue 12), a hosted model answers within a minute."""
        if self.timeout is not None:
            return self.timeout
        return LOCAL_TIMEOUT_SECONDS if self.local else DEFAULT_TIMEOUT_SECONDS


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


class AuxiliaryConfig(StrictSection):
    compression: AuxCompressionConfig = AuxCompressionConfig()


class ModelConfig(StrictSection):
    context_length: int | None = Field(None, ge=1024, le=100_000_000)


class PricingConfig(StrictSection):
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
        """True when the config names a price at all (a preset or any field)."""
        return any(getattr(self, k) is not None for k in type(self).model_fields)

    def resolve(
        self, api: str | None = None, summarizer_free: bool = False, base: CachePricing | None = None
    ) -> CachePricing:
        """The prices in force: the preset (else ``base``, else ``api``'s default), with the fields set here
        over it, labelled "(configured)" when the user set any of it. An offline summarizer
        (``summarizer_free``) costs nothing unless its prices are set."""
        base = PRESETS[self.preset] if self.preset else base or for_api(api or "")
        overrides = {
            k: getattr(self, k) for k in type(self).model_fields if k != "preset" and getattr(self, k) is not None
        }
        data = {**base.model_dump(), **overrides}
        if self.configured:  # what the user set, not the free summarizer below: that is no configuration of theirs
            data["name"] = f"{base.name} (configured)"
        if summarizer_free:  # an offline summarizer costs nothing unless its prices are set
            data["summarizer_input"] = overrides.get("summarizer_input", 0.0)
            data["summarizer_output"] = overrides.get("summarizer_output", 0.0)
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


class ThinkingConfig(StrictSection):
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


class ProxyConfig(StrictSection):
    """``microcompact serve``'s own settings (the command line's flags beat them)."""

    share_sessions_across_keys: StrictBool = Field(
        False, description="identical histories are one conversation whatever credential sends them (a shared key)"
    )
    audit: StrictBool = Field(
        False,
        description="forward every request as the client sent it and measure what rewriting would have done "
        "(serve --audit); one conversation is switched to rewriting with `microcompact sessions rewrite ID`",
    )
