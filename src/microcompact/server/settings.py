"""What ``serve`` was told about its upstreams and its guard, and where a request on a route goes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FilePath

from ..wire import Upstream
from .limits import Limits
from .routes import ANTHROPIC as ANTHROPIC_API
from .routes import GEMINI as GEMINI_API
from .routes import Route
from .session_key import QUERY_KEY


@dataclass(frozen=True)
class ProxySettings:
    openai_upstream: str = "https://api.openai.com/v1"
    anthropic_upstream: str = "https://api.anthropic.com"
    gemini_upstream: str = "https://generativelanguage.googleapis.com"
    api_key: str | None = None  # when set, every request but /healthz needs it in X-Microcompact-Key
    limits: Limits = field(default_factory=Limits)  # body size and pace, upstream timeouts (server/limits.py)
    # Conversations of different credentials kept apart (session_key.py) unless shared on purpose; the
    # salt file (None: $MICROCOMPACT_HOME/session-salt).
    share_sessions_across_keys: bool = False
    salt_file: FilePath | None = None
    audit: bool = False  # serve --audit: every request goes up as it came, the view it would have been measured


def upstream_url(settings: ProxySettings, route: Route, query: str) -> str:
    """Where a request on ``route`` goes: its provider's base URL as the SDKs take it (OpenAI's holds
    ``/v1``; Anthropic's and Gemini's are the host), plus the route's path. A ``key`` query parameter is
    Gemini's key: kept toward Gemini, never sent to another provider."""
    bases = {ANTHROPIC_API: settings.anthropic_upstream, GEMINI_API: settings.gemini_upstream}
    url = bases.get(route.api or Upstream.OPENAI, settings.openai_upstream).rstrip("/") + route.upstream_path
    if route.api not in QUERY_KEY:
        query = "&".join(pair for pair in query.split("&") if pair and pair.split("=", 1)[0] != "key")
    return f"{url}?{query}" if query else url


__all__ = ["ProxySettings", "upstream_url"]
