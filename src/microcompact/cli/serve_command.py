"""``microcompact serve``: the compaction proxy (the work is :mod:`microcompact.server`, imported on use)."""

from __future__ import annotations

from typing import Annotated

import typer

from .base import ConfigOption, ContextLimitOption, DbOption, LogOption, fail, logging_to, say


def serve_cmd(
    config: ConfigOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free one).")] = 8765,
    openai_upstream: Annotated[
        str, typer.Option("--openai-upstream", help="OpenAI-compatible base URL requests go to.")
    ] = "https://api.openai.com/v1",
    anthropic_upstream: Annotated[
        str, typer.Option("--anthropic-upstream", help="Anthropic base URL requests go to.")
    ] = "https://api.anthropic.com",
    gemini_upstream: Annotated[
        str, typer.Option("--gemini-upstream", help="Gemini API base URL requests go to (Gemini CLI, google-genai).")
    ] = "https://generativelanguage.googleapis.com",
    db: DbOption = None,
    context_limit: ContextLimitOption = None,
    log_file: LogOption = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="MICROCOMPACT_PROXY_KEY",
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
    share_sessions_across_keys: Annotated[
        bool | None,
        typer.Option(
            "--share-sessions-across-keys/--separate-sessions-per-key",
            help="One conversation for identical histories whatever API key sends them (a team sharing a key on "
            "purpose). Default: kept apart per credential (config: proxy.share_sessions_across_keys).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the compaction proxy: point OpenAI, Anthropic or Gemini clients (Claude Code, Codex, Gemini CLI, aider,
    SDKs) at it."""
    from ..server.run import ServeError, ServeOptions, serve

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
        share_sessions_across_keys=share_sessions_across_keys,
    )
    with logging_to(log_file):
        try:
            serve(options, say=say)
        except ServeError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            pass
