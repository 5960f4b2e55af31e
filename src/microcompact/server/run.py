"""Running the proxy from the command line: options checked up front, the socket bound, uvicorn started."""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn

from ..config import AuxCompressionConfig, Config, ConfigError, SummarizerKind, load_config
from ..router import SessionRouter
from ..store import SessionStore, StoreError, open_store
from ..windows import Windows
from .app import Proxy, ProxySettings
from .connections import (
    ConnectionGuard,
    GuardedListener,
    ServeMode,
    allowed_connections,
    guarded_protocol,
    raise_file_limit,
)
from .limits import Limits, LimitsError
from .routes import served
from .session_key import SaltError, default_salt_path, load_salt, salt_id
from .userinfo import hide_userinfo_in_logs, stop_hiding, without_userinfo

# The interpreter's thread switch interval while serving, ms. Python's 5 ms default lets a pass computing on a
# worker thread keep a request's thread waiting up to 5 ms at every hand-off of the interpreter (each store
# call, each socket read gives it up): a request of a few dozen such calls waited tens of ms behind a fold.
SWITCH_INTERVAL_MS = 1.0
SWITCH_INTERVAL_RANGE_MS = (0.05, 100.0)


AUDIT_LINE = (
    "audit mode: every request goes upstream as the client sent it; the headers, /metrics and /ui say what "
    "rewriting would have sent, folded and cost (one conversation: microcompact sessions rewrite ID; all: "
    "serve without --audit)\n"
)


class ServeError(ValueError):
    """A bad option or an unusable resource, phrased for the user (one line)."""


@dataclass(frozen=True)
class ServeOptions:
    config: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    openai_upstream: str = "https://api.openai.com/v1"
    anthropic_upstream: str = "https://api.anthropic.com"
    db: str | None = None
    context_limit: int | None = None
    api_key: str | None = None
    shared: bool | None = None  # None: shared when the store is PostgreSQL (several processes on one store)
    gemini_upstream: str = "https://generativelanguage.googleapis.com"  # last: positional callers keep working
    limits: Limits = field(default_factory=Limits)  # body size and pace, headers, connections, upstream timeouts
    share_sessions_across_keys: bool | None = None  # None: the config file's proxy.share_sessions_across_keys
    switch_interval_ms: float = SWITCH_INTERVAL_MS  # the interpreter's thread switch interval while serving
    summarizer: str | None = None  # --summarizer: auxiliary.compression.provider over the config file's
    quiet: bool = False  # --quiet: no line per request on stderr (the startup lines and warnings stay)
    log_path: Path | None = None  # where the command logs (said at startup)
    audit: bool | None = None  # --audit/--rewrite; None: the config file's proxy.audit


# serve's defaults for the settings a config leaves to be derived (None; "auto" for the schedule): micro-
# compaction on, cache-aware (a pass waits while the provider's prompt cache is warm, up to the occupancy cap:
# measured with Claude Code's cache breakpoints, passes at every request cost about twice the cached full
# history), and folding by price (serve knows each API's prices, so "auto" is price here). Whether passes run
# in the background follows the summarizer (:func:`background_passes`): inline for the extractive one, on a
# worker for a model.
SERVE_DEFAULTS: dict[str, bool | float] = {
    "micro_compact": True,
    "micro_compact_cache_ttl_seconds": 300.0,
}


def background_passes(summarizer: AuxCompressionConfig) -> bool:
    """serve's ``micro_compact_background`` when a config leaves it unset: on a worker when the summarizer calls
    a model (an endpoint, or the client's own through ``upstream``), since a request must not wait on a model;
    inline for the offline extractive one, whose fold is milliseconds of CPU in serve's own process: on a worker
    it buys nothing, and back-to-back requests starve the worker so folds land late (through serve on the shared
    Claude Code sessions, mean prompt 22.5K in the background against 18.3K inline, recall alike)."""
    return summarizer.kind is not SummarizerKind.EXTRACTIVE


def proxy_config(config_path: Path | None, context_limit: int | None, summarizer: str | None = None) -> Config:
    """The config file (or the defaults) with serve's defaults where it leaves a setting to be derived
    (:data:`SERVE_DEFAULTS`, :func:`background_passes` of the summarizer chosen); ``--context-limit`` and
    ``--summarizer`` beat the file."""
    config = load_config(config_path).with_overrides(
        source="command-line options (--context-limit, --summarizer)",
        model={"context_length": context_limit},
        **{"auxiliary.compression": {"provider": summarizer}},
    )
    background = background_passes(config.auxiliary.compression)
    config = config.with_defaults(
        source="serve's defaults", compression={**SERVE_DEFAULTS, "micro_compact_background": background}
    )
    schedule = "price" if config.compression.micro_compact_schedule == "auto" else None
    return config.with_overrides(source="serve's defaults", compression={"micro_compact_schedule": schedule})


def passes_line(config: Config) -> str:
    """How micro passes run, for the startup line: the mode actually used, set in the config or derived."""
    compression, provider = config.compression, config.auxiliary.compression.provider
    if not compression.enabled or not compression.micro_compact:
        return "micro-compaction off"
    where = "in the background" if compression.micro_compact_background else "inline, at the request that is due"
    return f"micro-compaction passes {where} (summarizer: {provider})"


def router_for(config: Config, store: SessionStore, shared: bool | None) -> SessionRouter:
    """The proxy's router: shared with other ``serve`` processes (a conversation locked in the store for each
    request, its session reloaded when another process wrote) when asked, or by default on PostgreSQL,
    the store several processes share."""
    if shared is None:
        shared = getattr(store, "backend", "") == "postgres"
    return SessionRouter(config, store=store, shared=shared)


def keys_line(settings: ProxySettings) -> str:
    """How conversations are keyed, for the startup line (the salt loaded, or created, first)."""
    if settings.share_sessions_across_keys:
        return "shared across credentials (--share-sessions-across-keys)"
    path = settings.salt_file or default_salt_path()
    return f"kept apart per credential (salt {salt_id(load_salt(path))} in {path})"


def check_upstream(flag: str, url: str) -> str:
    """``url`` without its trailing slash; a ServeError (that never prints the URL's userinfo) when it is no
    http(s) base URL."""
    parts = urlsplit(url)
    shown = without_userinfo(url)
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError:
        raise ServeError(f"{flag}: {shown!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServeError(
            f"{flag}: expected an http:// or https:// base URL such as https://api.openai.com/v1, got {shown!r}"
        )
    return url.rstrip("/")


def checked_limits(limits: Limits) -> Limits:
    """``limits`` with the connection cap set: what the open-file limit carries (raised toward the hard
    limit first), or the one asked for when the files allow it."""
    try:
        limits = limits.checked()
    except LimitsError as exc:
        raise ServeError(str(exc)) from None
    files = raise_file_limit()
    allowed = allowed_connections(files)
    if limits.max_connections is None:
        return replace(limits, max_connections=allowed)
    if limits.max_connections > allowed:
        raise ServeError(
            f"--max-connections: {limits.max_connections} needs more open files than the limit of {files} allows "
            f"(at most {allowed}); raise it with ulimit -n, or ask for fewer"
        )
    return limits


def checked_switch_interval(ms: float) -> float:
    """``ms`` as seconds for :func:`sys.setswitchinterval`; a ServeError outside the range that makes sense."""
    low, high = SWITCH_INTERVAL_RANGE_MS
    if not low <= ms <= high:  # also refuses nan
        raise ServeError(f"--switch-interval: expected {low:g} to {high:g} ms, got {ms:g}")
    return ms / 1000


def bind(host: str, port: int, guard: ConnectionGuard | None = None) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one) that accepts only as fast as ``guard``
    admits."""
    if not 0 <= port <= 65535:
        raise ServeError(f"--port: expected 0 to 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = GuardedListener(family, kind, proto)
        sock.guard = guard
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(options: ServeOptions, say: Callable[[str], None]) -> None:
    """Run until interrupted; ``say`` gets the startup line."""
    settings = ProxySettings(
        openai_upstream=check_upstream("--openai-upstream", options.openai_upstream),
        anthropic_upstream=check_upstream("--anthropic-upstream", options.anthropic_upstream),
        gemini_upstream=check_upstream("--gemini-upstream", options.gemini_upstream),
        api_key=options.api_key or None,
        limits=checked_limits(options.limits),
    )
    if options.context_limit is not None and options.context_limit < 1024:
        raise ServeError(f"--context-limit: expected at least 1024 tokens, got {options.context_limit}")
    switch_interval = checked_switch_interval(options.switch_interval_ms)
    try:
        config = proxy_config(options.config, options.context_limit, options.summarizer)
        share = options.share_sessions_across_keys
        settings = replace(
            settings,
            share_sessions_across_keys=config.proxy.share_sessions_across_keys if share is None else share,
            audit=config.proxy.audit if options.audit is None else options.audit,
        )
        proxy_keys = keys_line(settings)
        store = open_store(options.db)
    except (ConfigError, StoreError, SaltError) as exc:
        raise ServeError(str(exc)) from None
    router = router_for(config, store, options.shared)
    hider = hide_userinfo_in_logs()
    limits = settings.limits
    assert limits.max_connections is not None, "checked_limits sets the cap"
    guard = ConnectionGuard(limits.max_connections, limits.header_timeout, ServeMode.of(settings.audit))
    try:
        sock = bind(options.host, options.port, guard)
        host, port = sock.getsockname()[:2]
        base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
        # The tokenizer and the summarizer are made here, before the line that tells clients to come: a first
        # request never waits in the accept queue behind them.
        proxy = Proxy(router, settings, request_lines=None if options.quiet else say)
        if not settings.api_key and not ipaddress.ip_address(host).is_loopback:
            say(
                f"warning: listening on {host} without --api-key: anyone who can reach this port can use the proxy "
                "and fill its session store"
            )
        say(
            f"microcompact serve: listening on {base} (OpenAI clients: {base}/v1, Anthropic clients and Claude Code: "
            f"{base}, Gemini CLI: GOOGLE_GEMINI_BASE_URL={base}); forwarding to "
            + without_userinfo(
                f"{settings.openai_upstream}, {settings.anthropic_upstream} and {settings.gemini_upstream}; "
                f"sessions in {store.describe()}, "
            )
            + f"{proxy_keys}; "
            + f"{Windows(dict(config.models), config.model.context_length).describe()}\n"
            + f"{settings.limits.describe()}\n"
            + f"{passes_line(config)}\n"
            + (AUDIT_LINE if settings.audit else "")
            + (f"logs in {options.log_path}\n" if options.log_path is not None else "")
            + "routes:\n"
            + "\n".join(f"  {line}" for line in served())
        )
        server = uvicorn.Server(uvicorn_config(proxy, guard))
        stop_hiding(hider)
        hider = hide_userinfo_in_logs()  # uvicorn.Config put its own handlers on its loggers
        before = sys.getswitchinterval()
        sys.setswitchinterval(switch_interval)
        try:
            server.run(sockets=[sock])
        finally:
            sys.setswitchinterval(before)
    finally:
        stop_hiding(hider)
        router.close()
        store.close()


def uvicorn_config(proxy: Proxy, guard: ConnectionGuard) -> uvicorn.Config:
    """uvicorn with the guarded h11 protocol: ``guard``'s connection cap and header deadline."""
    return uvicorn.Config(
        proxy.app(), http=guarded_protocol(guard), log_level="warning", access_log=False, lifespan="on"
    )
