"""``microcompact serve``: the compaction proxy (the work is :mod:`microcompact.server`, imported on use)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..telemetry import default_log_path
from .base import (
    DEFAULT_ANTHROPIC_UPSTREAM,
    DEFAULT_GEMINI_UPSTREAM,
    DEFAULT_OPENAI_UPSTREAM,
    AnthropicUpstreamOption,
    ConfigOption,
    ContextLimitOption,
    DbOption,
    GeminiUpstreamOption,
    LogOption,
    OpenAIUpstreamOption,
    check_input_file,
    fail,
    logging_to,
    say,
)

PROXY_KEY_ENV = "MICROCOMPACT_PROXY_KEY"


def serve_cmd(
    config: ConfigOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free one).")] = 8765,
    openai_upstream: OpenAIUpstreamOption = DEFAULT_OPENAI_UPSTREAM,
    anthropic_upstream: AnthropicUpstreamOption = DEFAULT_ANTHROPIC_UPSTREAM,
    gemini_upstream: GeminiUpstreamOption = DEFAULT_GEMINI_UPSTREAM,
    db: DbOption = None,
    context_limit: ContextLimitOption = None,
    log_file: LogOption = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar=PROXY_KEY_ENV,
            help="Require this key from clients, in the X-Microcompact-Key header.",
            show_default=False,
        ),
    ] = None,
    shared: Annotated[
        bool | None,
        typer.Option(
            "--shared/--no-shared",
            help="Share the store with other serve processes (each conversation locked in the store per "
            "request). Default: on for a PostgreSQL --db, off for SQLite.",
            show_default=False,
        ),
    ] = None,
    max_body_size: Annotated[
        str, typer.Option("--max-body-size", help="Largest request body taken (413 beyond): 64MiB, 500KB, bytes.")
    ] = "64MiB",
    header_timeout: Annotated[
        float, typer.Option("--header-timeout", help="Seconds a connection has to send a request's headers.")
    ] = 30.0,
    body_timeout: Annotated[
        float, typer.Option("--body-timeout", help="Seconds a request body may stall without a byte (408 after).")
    ] = 60.0,
    max_connections: Annotated[
        int | None,
        typer.Option(
            "--max-connections",
            help="Client connections open at once. Default: what the open-file limit allows.",
            show_default=False,
        ),
    ] = None,
    upstream_connect_timeout: Annotated[
        float, typer.Option("--upstream-connect-timeout", help="Seconds to connect to an upstream (504 after).")
    ] = 30.0,
    upstream_idle_timeout: Annotated[
        float,
        typer.Option(
            "--upstream-idle-timeout", help="Seconds an upstream may send nothing (504 or a cut stream after; 0: none)."
        ),
    ] = 600.0,
    share_sessions_across_keys: Annotated[
        bool | None,
        typer.Option(
            "--share-sessions-across-keys/--separate-sessions-per-key",
            help="One conversation for identical histories whatever API key sends them (a team sharing a key on "
            "purpose). Default: kept apart per credential (config: proxy.share_sessions_across_keys).",
            show_default=False,
        ),
    ] = None,
    switch_interval: Annotated[
        float,
        typer.Option(
            "--switch-interval",
            help="The interpreter's thread switch interval, ms: how long a request may wait for a pass "
            "computing on a worker thread at each hand-off (Python's default: 5).",
        ),
    ] = 1.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No line per request on stderr (startup lines and warnings stay).")
    ] = False,
    audit: Annotated[
        bool | None,
        typer.Option(
            "--audit/--rewrite",
            help="--audit: forward every request byte for byte as the client sent it, and say (headers, /metrics, "
            "/ui) what rewriting would have sent, folded and cost; `microcompact sessions rewrite ID` turns "
            "rewriting on for one conversation. Default: the config file's proxy.audit (off).",
            show_default=False,
        ),
    ] = None,
    summarizer: Annotated[
        str | None,
        typer.Option(
            "--summarizer",
            help="Who writes the summaries: extractive (offline), upstream (the client's own model on its own "
            "credential, over its cached conversation: spends the client's tokens), or the config file's "
            "auxiliary.compression when unset.",
        ),
    ] = None,
) -> None:
    """Run the compaction proxy: point OpenAI, Anthropic or Gemini clients (Claude Code, Codex, Gemini CLI, aider,
    SDKs) at it."""
    from ..server.limits import Limits, LimitsError, parse_size
    from ..server.run import ServeError, ServeOptions, serve

    if summarizer not in (None, "extractive", "upstream"):
        fail(f"--summarizer: expected extractive or upstream, got {summarizer!r}")
    if config is not None:
        check_input_file("--config", config)
    if api_key is None and os.environ.get(PROXY_KEY_ENV) == "":
        api_key = ""  # click reads an empty variable as unset: a key that failed to load must not mean none
    if api_key is not None:
        _check_api_key(api_key)
    try:
        limits = Limits(
            max_body_bytes=parse_size(max_body_size),
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            max_connections=max_connections,
            upstream_connect_timeout=upstream_connect_timeout,
            upstream_idle_timeout=upstream_idle_timeout,
        )
    except LimitsError as exc:
        fail(str(exc))
    options = ServeOptions(
        config,
        host,
        port,
        openai_upstream,
        anthropic_upstream,
        db=db,
        context_limit=context_limit,
        api_key=api_key,
        shared=shared,
        gemini_upstream=gemini_upstream,
        limits=limits,
        share_sessions_across_keys=share_sessions_across_keys,
        switch_interval_ms=switch_interval,
        summarizer=summarizer,
        quiet=quiet,
        log_path=log_file or default_log_path(),
        audit=audit,
    )
    with logging_to(log_file):
        try:
            serve(options, say=say)
        except ServeError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            pass


def _check_api_key(key: str) -> None:
    """Fail unless ``key`` can be the proxy's key: an empty one (``--api-key "$UNSET"``) used to serve
    without any key, silently; one with spaces around it or outside printable ASCII can never match what a
    client sends in a header."""
    if not key.strip():
        fail(
            "--api-key is empty (or MICROCOMPACT_PROXY_KEY is set to nothing): give the key clients send in "
            "X-Microcompact-Key, or leave it out to serve without one"
        )
    if key != key.strip():
        fail("--api-key has spaces around it, which no HTTP header keeps; give it without them")
    if not (key.isascii() and key.isprintable()):
        fail("--api-key must be printable ASCII: it travels in the X-Microcompact-Key header")
