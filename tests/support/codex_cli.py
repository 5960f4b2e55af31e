"""Run the pinned Codex CLI headless (``codex exec``) against any Responses API base URL.

The CLI is installed by ``tests/e2e/install-codex.sh`` into ``tests/e2e/codex`` (version pinned by its
package-lock.json). It runs with a throwaway HOME and CODEX_HOME holding a ``config.toml`` whose only model
provider is ``base_url`` with ``wire_api = "responses"`` (Codex 0.169 refuses ``wire_api = "chat"``), a
context window large enough that Codex never compacts on its own (the proxy is what is tested), and no
sandbox (tests run as root, where the sandbox cannot start). Every request it makes goes to ``base_url``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

INSTALL_DIR = Path(__file__).parents[1] / "e2e" / "codex"
INSTALL_SCRIPT = "tests/e2e/install-codex.sh"
BIN_ENV = "MICROCOMPACT_CODEX_BIN"  # an explicit path to a codex binary overrides the pinned install
API_KEY = "sk-codex-e2e-dummy"
MODEL = "gpt-5.1-codex"


def pinned_version() -> str:
    package = json.loads((INSTALL_DIR / "package.json").read_text())
    return str(package["dependencies"]["@openai/codex"])


def find_codex() -> Path | None:
    """The native binary: ``$MICROCOMPACT_CODEX_BIN``, else the platform package npm installed, else its bin link."""
    explicit = os.environ.get(BIN_ENV)
    if explicit:
        return Path(explicit)
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    modules = INSTALL_DIR / "node_modules"
    candidates = sorted(
        (modules / "@openai" / f"codex-{platform.system().lower()}-{machine}").glob("vendor/*/bin/codex")
    )
    for candidate in [*candidates, modules / ".bin" / "codex"]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable_reason() -> str | None:
    """Why Codex cannot run here (for ``pytest.skip``), or None when the pinned version runs."""
    binary = find_codex()
    if binary is None:
        return f"Codex CLI is not installed: run {INSTALL_SCRIPT} (needs npm and the npm registry)"
    try:
        with tempfile.TemporaryDirectory() as home:  # codex writes under its home even for --version
            env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "CODEX_HOME": home}
            version = subprocess.run([str(binary), "--version"], env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Codex CLI at {binary} does not run: {exc}"
    if os.environ.get(BIN_ENV) is None and pinned_version() not in version.stdout:
        return f"Codex CLI at {binary} is {version.stdout.strip()!r}, not {pinned_version()}: run {INSTALL_SCRIPT}"
    return None


def write_config(codex_home: Path, base_url: str) -> None:
    """A config.toml whose one provider is ``base_url`` (a Responses API, ``/v1`` included)."""
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "microcompact"\n'
        "model_context_window = 1000000\n"
        "model_auto_compact_token_limit = 900000\n"
        "\n[model_providers.microcompact]\n"
        'name = "microcompact serve"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "CODEX_E2E_API_KEY"\n'
        "request_max_retries = 6\n"
        "stream_max_retries = 6\n"
        "stream_idle_timeout_ms = 300000\n"
    )


@dataclass
class CodexRun:
    returncode: int
    stdout: str
    stderr: str
    last_message: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_codex(base_url: str, prompt: str, *, workdir: Path, home: Path, timeout: float = 600) -> CodexRun:
    """``codex exec PROMPT`` in ``workdir`` with ``base_url`` as its only provider."""
    binary = find_codex()
    assert binary is not None, unavailable_reason()
    workdir.mkdir(parents=True, exist_ok=True)
    codex_home = home / ".codex"
    write_config(codex_home, base_url)
    last = home / "last-message.txt"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "CODEX_E2E_API_KEY": API_KEY,
        "TERM": "dumb",
        "NO_COLOR": "1",
    }
    command = [
        str(binary),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--output-last-message",
        str(last),
        prompt,
    ]
    done = subprocess.run(
        command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    message = last.read_text() if last.exists() else ""
    return CodexRun(done.returncode, done.stdout, done.stderr, message)


__all__ = ["API_KEY", "CodexRun", "find_codex", "run_codex", "unavailable_reason"]
