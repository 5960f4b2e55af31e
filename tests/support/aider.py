"""Run the pinned aider (``aider --message``) against any OpenAI-compatible base URL, offline.

aider is installed by ``tests/e2e/install-aider.sh`` into its own virtualenv (``tests/e2e/aider/.venv``;
``MICROCOMPACT_AIDER_BIN`` names another binary). Each run gets a throwaway HOME holding a model-metadata
cache, so aider does not fetch litellm's price list from the network; it runs without git, streaming,
analytics or update checks, and restores its chat history from the work folder, so ten ``--message`` runs
are ten turns of one chat.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

INSTALL_DIR = Path(__file__).parents[1] / "e2e" / "aider"
INSTALL_SCRIPT = "tests/e2e/install-aider.sh"
BIN_ENV = "MICROCOMPACT_AIDER_BIN"


def aider_bin() -> Path:
    explicit = os.environ.get(BIN_ENV)
    return Path(explicit) if explicit else INSTALL_DIR / ".venv" / "bin" / "aider"


def unavailable_reason() -> str | None:
    binary = aider_bin()
    if binary.is_file() and os.access(binary, os.X_OK):
        return None
    return f"aider is not installed: run {INSTALL_SCRIPT} (needs PyPI), or set {BIN_ENV}"


def run_aider(base_url: str, message: str, workdir: Path, home: Path, model: str = "openai/gpt-4o") -> str:
    """One ``aider --message`` turn against ``base_url`` (``.../v1``); its stdout. Raises on a failed run."""
    workdir.mkdir(parents=True, exist_ok=True)
    caches = home / ".aider" / "caches"
    caches.mkdir(parents=True, exist_ok=True)
    # A non-empty metadata cache, younger than a day: aider reads it instead of downloading one.
    (caches / "model_prices_and_context_window.json").write_text('{"placeholder": {}}')
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-test-aider",
        "OPENAI_API_BASE": base_url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TERM": "dumb",
    }
    command = [
        str(aider_bin()),
        *("--model", model),
        *("--no-stream", "--yes-always", "--no-git", "--no-check-update", "--no-show-model-warnings"),
        *("--analytics-disable", "--restore-chat-history", "--no-pretty", "--no-fancy-input"),
        *("--message", message),
    ]
    done = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"aider exited {done.returncode}: {done.stderr[-1500:]}")
    return done.stdout
