"""``microcompact doctor``: check the upstreams, keys and summarizer ``serve`` would use, before a client
finds out (the checks are :mod:`microcompact.server.upstream_check`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ..config import ConfigError, load_config
from .base import (
    DEFAULT_ANTHROPIC_UPSTREAM,
    DEFAULT_GEMINI_UPSTREAM,
    DEFAULT_OPENAI_UPSTREAM,
    AnthropicUpstreamOption,
    ConfigOption,
    GeminiUpstreamOption,
    OpenAIUpstreamOption,
    check_input_file,
    fail,
    out,
)


def doctor_cmd(
    config: ConfigOption = None,
    port: Annotated[
        int, typer.Option("--port", help="The port serve will listen on (an upstream there is a loop).")
    ] = 8765,
    openai_upstream: OpenAIUpstreamOption = DEFAULT_OPENAI_UPSTREAM,
    anthropic_upstream: AnthropicUpstreamOption = DEFAULT_ANTHROPIC_UPSTREAM,
    gemini_upstream: GeminiUpstreamOption = DEFAULT_GEMINI_UPSTREAM,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each upstream has to answer.")] = 10.0,
) -> None:
    """Check what serve would use: each upstream with the key from the environment (OPENAI_API_KEY,
    ANTHROPIC_API_KEY, GEMINI_API_KEY), a base URL missing /v1, an upstream that loops back to the proxy,
    and a summarizer without its key. Exit 1 when a check failed."""
    from ..server.upstream_check import Status, run_checks

    if config is not None:
        check_input_file("--config", config)
    try:
        loaded = load_config(config)
    except ConfigError as exc:
        fail(str(exc))
    if timeout <= 0:
        fail(f"--timeout must be more than 0 seconds, got {timeout}")
    findings = run_checks(loaded, openai_upstream, anthropic_upstream, gemini_upstream, port=port, timeout=timeout)
    table = Table("check", "status", "detail", title="microcompact doctor")
    colours = {Status.OK: "green", Status.SKIPPED: "yellow", Status.FAILED: "red"}
    for finding in findings:
        table.add_row(finding.check, f"[{colours[finding.status]}]{finding.status}[/]", finding.detail)
    out.print(table)
    failed = sum(1 for f in findings if f.status is Status.FAILED)
    if failed:
        raise typer.Exit(1)
