"""``microcompact claude|codex|gemini|aider [OPTIONS] [ARGS...]``: the agent through ``serve`` (the work is
:mod:`microcompact.launch`).

The launcher's own options come first; the first argument that is not one of them, and everything after it,
goes to the agent as it is (``--`` ends the launcher's options explicitly, e.g. ``microcompact claude --
--help``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated

import typer

from ..launch import SPECS, Agent, LaunchError, ServeSettings, Upstreams, launch
from .base import (
    DEFAULT_ANTHROPIC_UPSTREAM,
    DEFAULT_GEMINI_UPSTREAM,
    DEFAULT_OPENAI_UPSTREAM,
    AnthropicUpstreamOption,
    ContextLimitOption,
    DbOption,
    GeminiUpstreamOption,
    LogOption,
    OpenAIUpstreamOption,
    fail,
)

# Options up to the first agent argument; anything the launcher does not know is the agent's.
CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True, "allow_extra_args": True}
PortOption = Annotated[
    int, typer.Option("--port", help="Port of the serve to use, started on 127.0.0.1 when none answers there.")
]
AuditOption = Annotated[
    bool | None,
    typer.Option(
        "--audit/--rewrite",
        help="--audit: the serve forwards every request as the client sent it and says what rewriting would have "
        "saved (serve --audit); a running serve in the other mode is refused. Default: the serve's own mode.",
        show_default=False,
    ),
]
AgentArgs = Annotated[list[str] | None, typer.Argument(help="The agent's own arguments, passed on unchanged.")]


def _command(agent: Agent) -> Callable[..., None]:
    def command(
        args: AgentArgs = None,
        port: PortOption = 8765,
        openai_upstream: OpenAIUpstreamOption = DEFAULT_OPENAI_UPSTREAM,
        anthropic_upstream: AnthropicUpstreamOption = DEFAULT_ANTHROPIC_UPSTREAM,
        gemini_upstream: GeminiUpstreamOption = DEFAULT_GEMINI_UPSTREAM,
        db: DbOption = None,
        log_file: LogOption = None,
        context_limit: ContextLimitOption = None,
        audit: AuditOption = None,
    ) -> None:
        upstreams = Upstreams(openai_upstream.rstrip("/"), anthropic_upstream.rstrip("/"), gemini_upstream.rstrip("/"))
        settings = ServeSettings(port, upstreams, db=db, log=log_file, context_limit=context_limit, audit=audit)
        try:
            code = launch(agent, args or [], settings, os.environ)
        except LaunchError as exc:
            fail(str(exc))
        raise typer.Exit(code)

    spec = SPECS[agent]
    command.__doc__ = (
        f"Run {spec.command} through microcompact serve (reused on --port, else started and stopped after), "
        "its own compaction deferring to the proxy's."
    )
    return command


def register(app: typer.Typer) -> None:
    """One command per agent, in the order of :class:`Agent`."""
    for agent in Agent:
        app.command(agent.value, context_settings=CONTEXT)(_command(agent))


__all__ = ["register"]
