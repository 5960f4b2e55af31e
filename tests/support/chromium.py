"""Debian's ``chromium``, headless, as the conversation page's browser tests drive it: ``--dump-dom`` (the DOM
after the page's own script ran) and ``--screenshot``. No driver, no download: the binary on PATH, else the
tests that need it are skipped with the reason."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "Chromium is not installed: apt-get install -y chromium (Debian's package)"


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(url: str, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    binary = find_chromium()
    if binary is None:
        raise RuntimeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="mc-chromium-") as profile:
        command = [
            binary,
            "--headless",
            "--no-sandbox",  # tests run as root in CI containers, where the sandbox cannot start
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",  # let the page's own script run before the DOM is taken
            *flags,
            url,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def dump_dom(url: str) -> str:
    """The serialized DOM of ``url`` once loaded (redirects followed, cookies kept within the one run)."""
    done = _run(url, "--dump-dom")
    if done.returncode != 0:
        raise RuntimeError(f"chromium --dump-dom {url} failed ({done.returncode}): {done.stderr[-800:]}")
    return done.stdout


def screenshot(url: str, path: Path, width: int = 1280, height: int = 1600) -> Path:
    """A PNG of ``url`` at ``width`` x ``height``."""
    done = _run(url, f"--screenshot={path}", f"--window-size={width},{height}")
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"chromium --screenshot {url} failed ({done.returncode}): {done.stderr[-800:]}")
    return path
