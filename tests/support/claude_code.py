"""Run the pinned Claude Code CLI headless (``claude -p``) against any Anthropic base URL.

The CLI is installed by ``tests/e2e/install-claude-code.sh`` into ``tests/e2e/claude-code`` (version pinned
by its package-lock.json). It runs with a throwaway HOME and a minimal environment, so a developer's own
``~/.claude`` and API keys never take part, and with the switches that keep it off the network: every
request it makes goes to ``base_url``. What it sends is described in ``tests/e2e/README.md``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTALL_DIR = Path(__file__).parents[1] / "e2e" / "claude-code"
INSTALL_SCRIPT = "tests/e2e/install-claude-code.sh"
BIN_ENV = "MICROCOMPACT_CLAUDE_BIN"  # an explicit path to a claude binary overrides the pinned install

# Keep the CLI from updating itself, phoning home or reporting errors; none of that may leave the machine.
QUIET_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "TERM": "dumb",
}


def pinned_version() -> str:
    package = json.loads((INSTALL_DIR / "package.json").read_text())
    return str(package["dependencies"]["@anthropic-ai/claude-code"])


def _platform_package() -> str:
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), ""
    )
    system = platform.system().lower()
    musl = "-musl" if system == "linux" and "musl" in (platform.libc_ver()[0] or "").lower() else ""
    return f"claude-code-{system}-{machine}{musl}"


def find_claude() -> Path | None:
    """The native binary: ``$MICROCOMPACT_CLAUDE_BIN``, else the platform package npm installed, else its bin link."""
    explicit = os.environ.get(BIN_ENV)
    if explicit:
        return Path(explicit)
    modules = INSTALL_DIR / "node_modules"
    for candidate in (modules / "@anthropic-ai" / _platform_package() / "claude", modules / ".bin" / "claude"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable_reason() -> str | None:
    """Why Claude Code cannot run here (for ``pytest.skip``), or None when the pinned version runs."""
    binary = find_claude()
    if binary is None:
        return f"Claude Code is not installed: run {INSTALL_SCRIPT} (needs npm and the npm registry)"
    try:
        shown = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, env=_base_env("/tmp"))
    except OSError as exc:
        return f"Claude Code at {binary} does not start: {exc}"
    version = shown.stdout.split(" ")[0].strip()
    if not os.environ.get(BIN_ENV) and version != pinned_version():
        found = version or "of unknown version"
        return f"Claude Code at {binary} is {found}, not the pinned {pinned_version()}: run {INSTALL_SCRIPT}"
    return None


def _base_env(home: str | Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **QUIET_ENV}


@dataclass
class ClaudeRun:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None  # the ``--output-format json`` result object, when stdout held one

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None and not self.result.get("is_error")


def run_claude(
    base_url: str,
    prompt: str,
    *,
    workdir: Path,
    home: Path,
    max_turns: int = 100,
    allowed_tools: tuple[str, ...] = ("Bash",),
    continue_session: bool = False,
    extra_args: tuple[str, ...] = (),
    api_key: str = "sk-ant-e2e-dummy",
    timeout: float = 300,
) -> ClaudeRun:
    """``claude -p PROMPT --output-format json`` with ``ANTHROPIC_BASE_URL=base_url``.

    Tools are pre-approved with ``--allowedTools`` because ``--dangerously-skip-permissions`` is refused
    when running as root. ``continue_session`` adds ``--continue``: the next turn of the last session
    started in ``workdir`` with the same ``home``.
    """
    binary = find_claude()
    if binary is None:
        raise RuntimeError(unavailable_reason() or "Claude Code is not installed")
    home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    args = [str(binary), "-p", prompt, "--output-format", "json", "--max-turns", str(max_turns)]
    if allowed_tools:
        args += ["--allowedTools", ",".join(allowed_tools)]
    if continue_session:
        args.append("--continue")
    env = {**_base_env(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key}
    done = subprocess.run(
        [*args, *extra_args], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = None
    return ClaudeRun(done.returncode, done.stdout, done.stderr, result if isinstance(result, dict) else None)


def comparable(message: Any) -> Any:
    """A message as Claude Code means it: ``cache_control`` removed, a lone text block read as a string.

    Claude Code moves its cache breakpoint to the newest message on every request and sends the
    environment message first as ``[{"type": "text", ..., "cache_control": ...}]``, later as a plain
    string; neither is a change of content.
    """
    if isinstance(message, list):
        return [comparable(item) for item in message]
    if not isinstance(message, dict):
        return message
    cleaned = {k: comparable(v) for k, v in message.items() if k != "cache_control"}
    content = cleaned.get("content")
    lone_text = isinstance(content, list) and len(content) == 1 and set(content[0]) == {"type", "text"}
    if lone_text and content[0]["type"] == "text" and "role" in cleaned:
        cleaned["content"] = content[0]["text"]
    return cleaned
