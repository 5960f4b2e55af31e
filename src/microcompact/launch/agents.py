"""What each coding agent needs to run through ``serve``: its base URL at the proxy, and its own compaction
switched off or pushed past the proxy's, so the proxy is the one that decides when history is folded.

One :class:`AgentSpec` per :class:`Agent`: the binary, the API it speaks, and a builder that turns the proxy's
address, the upstreams ``serve`` forwards to and the user's own arguments into a :class:`Launch` (the
command, the variables added to the environment, files it needs while it runs). What each sets, as checked
on the pinned clients (tests/e2e, tests/launch):

- Claude Code 2.1.332: ``ANTHROPIC_BASE_URL``; ``DISABLE_AUTO_COMPACT=1`` (with a 100K window set it compacted
  at 107K reported tokens without it, never with it; a manual ``/compact`` still works). Its window is left
  as it is: the 1M window (Opus 5.5, or a ``[1m]`` model with the ``context-1m`` beta) was kept behind a base
  URL of our own, with or without ``_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL``, which only adds first-party
  request features, so it is not set.
- Codex 0.169: a ``model_providers`` entry given with ``-c`` overrides (the user's ``~/.codex`` is never
  written), ``wire_api = "responses"``, its key from ``OPENAI_API_KEY``; named "OpenAI" only when the upstream
  is OpenAI's own (Codex then compacts remotely with a ``compaction_trigger`` item, which ``serve`` passes
  through), else another name (Codex would otherwise expect a ``compaction`` item no other server makes).
  Its own trigger is left alone: it reads the usage the proxy reports (the compacted request's), and no
  ``-c`` moves it past about 90% of the model's catalog window (``model_context_window`` and
  ``model_auto_compact_token_limit`` at 1e9 still compacted at 248K reported tokens on gpt-5.5, as without
  them), so it stays behind the proxy's compaction while the proxy's window for the model is no larger.
- Gemini CLI 0.61: ``GOOGLE_GEMINI_BASE_URL``; ``model.compressionThreshold: 1.0`` in a system settings file
  of its own (``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, a copy of the machine's one with that key), so it compresses
  only at its model's whole window (at 600K reported tokens of a 1M window: compressed without it, not with
  it). Gemini CLI skips that file below a world-writable folder such as /tmp, hence the launcher's own folder.
- aider 0.86: ``OPENAI_API_BASE`` and ``ANTHROPIC_API_BASE`` (litellm's names) and a
  ``--max-chat-history-tokens`` far beyond any window, so it never summarizes its chat history itself
  (four turns of 3K-token answers: summarized without it, not with it).

User arguments come after ours, so where the client lets the last value win (Codex ``-c``, aider's flags) the
user's own choice stands.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from ..wire import WireApi


class Agent(StrEnum):
    """The agents ``microcompact AGENT`` starts."""

    CLAUDE = "claude"
    CODEX = "codex"
    GEMINI = "gemini"
    AIDER = "aider"


@dataclass(frozen=True)
class Upstreams:
    """Where the proxy forwards each API (the ``serve`` options of the same names)."""

    openai: str = "https://api.openai.com/v1"
    anthropic: str = "https://api.anthropic.com"
    gemini: str = "https://generativelanguage.googleapis.com"

    @property
    def openai_is_openai(self) -> bool:
        """Whether the OpenAI upstream is OpenAI's own API (not a gateway or a local model)."""
        return urlsplit(self.openai).hostname == "api.openai.com"


@dataclass(frozen=True)
class Launch:
    """One agent run: the command line, what is added to the environment, and files written for it."""

    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)  # written before the run, removed after it

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, **self.env}


@dataclass(frozen=True)
class LaunchRequest:
    """What a builder gets: the proxy's base URL (no path), the upstreams, the binary, the user's
    arguments, the caller's environment (read, never printed) and a private folder for files."""

    proxy: str
    upstreams: Upstreams
    binary: str
    args: Sequence[str]
    environ: Mapping[str, str]
    scratch: Path


# A limit no window reaches: the client's own trigger stays behind the proxy's.
NEVER_TOKENS = 1_000_000_000
CODEX_PROVIDER = "microcompact"
OPENAI_PROVIDER_NAME = "OpenAI"  # the name that turns Codex's remote compaction on
GEMINI_SYSTEM_SETTINGS = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
GEMINI_DEFAULT_SYSTEM_SETTINGS = Path("/etc/gemini-cli/settings.json")


def claude_launch(request: LaunchRequest) -> Launch:
    env = {"ANTHROPIC_BASE_URL": request.proxy, "DISABLE_AUTO_COMPACT": "1"}
    return Launch([request.binary, *request.args], env)


def codex_provider_name(upstreams: Upstreams) -> str:
    """ "OpenAI" for OpenAI's own API (remote compaction, passed through by ``serve``), else another name:
    Codex compacts remotely only for that exact name, and then needs a reply only OpenAI makes."""
    return OPENAI_PROVIDER_NAME if upstreams.openai_is_openai else "microcompact (via serve)"


def codex_overrides(request: LaunchRequest) -> list[str]:
    """The ``-c key=value`` pairs (TOML values) that point Codex at the proxy."""
    table = f"model_providers.{CODEX_PROVIDER}"
    pairs = {
        "model_provider": CODEX_PROVIDER,
        f"{table}.name": codex_provider_name(request.upstreams),
        f"{table}.base_url": f"{request.proxy}/v1",
        f"{table}.wire_api": "responses",
        f"{table}.env_key": "OPENAI_API_KEY",
    }
    args: list[str] = []
    for key, value in pairs.items():
        args += ["-c", f"{key}={json.dumps(value)}"]
    return args


def codex_launch(request: LaunchRequest) -> Launch:
    return Launch([request.binary, *codex_overrides(request), *request.args], {})


def gemini_settings(environ: Mapping[str, str]) -> str:
    """The system settings Gemini CLI reads: the machine's own (when there is one) with compression at
    the whole window. A file that cannot be read as a JSON object is left out, as Gemini CLI would."""
    source = Path(environ.get(GEMINI_SYSTEM_SETTINGS) or GEMINI_DEFAULT_SYSTEM_SETTINGS)
    try:
        loaded = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        loaded = {}
    settings = loaded if isinstance(loaded, dict) else {}
    model = settings.get("model")
    settings["model"] = {**(model if isinstance(model, dict) else {}), "compressionThreshold": 1.0}
    return json.dumps(settings, indent=2)


def gemini_launch(request: LaunchRequest) -> Launch:
    path = request.scratch / "gemini-system-settings.json"
    env = {"GOOGLE_GEMINI_BASE_URL": request.proxy, GEMINI_SYSTEM_SETTINGS: str(path)}
    return Launch([request.binary, *request.args], env, {path: gemini_settings(request.environ)})


def aider_launch(request: LaunchRequest) -> Launch:
    env = {"OPENAI_API_BASE": f"{request.proxy}/v1", "ANTHROPIC_API_BASE": request.proxy}
    argv = [request.binary, "--max-chat-history-tokens", str(NEVER_TOKENS), *request.args]
    return Launch(argv, env)


@dataclass(frozen=True)
class AgentSpec:
    """One agent: the command it is started with (``MICROCOMPACT_<AGENT>_BIN`` names another binary), the
    API it speaks, where to get it, and how its run is built."""

    agent: Agent
    command: str
    api: WireApi  # aider: Chat Completions, or Anthropic Messages for an Anthropic model
    install: str
    build: Callable[[LaunchRequest], Launch]

    @property
    def binary_env(self) -> str:
        return f"MICROCOMPACT_{self.agent.name}_BIN"

    def binary(self, environ: Mapping[str, str]) -> str | None:
        """The agent's executable: the override variable's, else the command on PATH; None when missing."""
        explicit = environ.get(self.binary_env)
        if explicit:
            return explicit if os.access(explicit, os.X_OK) and Path(explicit).is_file() else None
        from shutil import which

        return which(self.command, path=environ.get("PATH"))


SPECS: dict[Agent, AgentSpec] = {
    spec.agent: spec
    for spec in (
        AgentSpec(Agent.CLAUDE, "claude", WireApi.MESSAGES, "npm install -g @anthropic-ai/claude-code", claude_launch),
        AgentSpec(Agent.CODEX, "codex", WireApi.RESPONSES, "npm install -g @openai/codex", codex_launch),
        AgentSpec(Agent.GEMINI, "gemini", WireApi.GEMINI, "npm install -g @google/gemini-cli", gemini_launch),
        AgentSpec(Agent.AIDER, "aider", WireApi.CHAT, "pipx install aider-chat", aider_launch),
    )
}

__all__ = [
    "NEVER_TOKENS",
    "SPECS",
    "Agent",
    "AgentSpec",
    "Launch",
    "LaunchRequest",
    "Upstreams",
    "WireApi",
    "codex_provider_name",
]
