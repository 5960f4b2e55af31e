"""The README's install line, as a new user runs it: ``pip install`` of the repository into a fresh
virtualenv puts ``microcompact`` on PATH, and ``microcompact serve`` from there answers (issue 28)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from support import local_http
from support.serve_process import LISTENING

REPO = Path(__file__).resolve().parents[2]
LEFT_OUT = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis")


def _readme_install_command() -> list[str]:
    """The pip line of the README's install block, as words."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^pip install (\S+)", readme, re.MULTILINE)
    assert found, "the README has a `pip install` line for the repository"
    return ["install", found.group(1)]


@pytest.mark.slow
def test_pip_install_of_the_repository_puts_a_working_serve_on_path(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(REPO, clone, ignore=LEFT_OUT)  # what a fresh clone holds, without this checkout's builds
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "-q", *_readme_install_command()],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    exe = shutil.which("microcompact", path=str(env_dir / "bin"))
    assert exe is not None, "the console script is on the virtualenv's PATH"
    env = {
        "PATH": f"{env_dir / 'bin'}:{os.environ.get('PATH', '')}",
        "MICROCOMPACT_HOME": str(tmp_path / "home"),
        "HOME": str(tmp_path),
    }
    version = subprocess.run(["microcompact", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "serve" in version.stdout
    served = subprocess.Popen(
        ["microcompact", "serve", "--port", "0", "--db", str(tmp_path / "s.db")],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert served.stderr is not None
        port = None
        for line in served.stderr:
            found = LISTENING.search(line)
            if found:
                port = int(found.group(2))
                break
        assert port is not None, "serve printed where it listens"
        assert local_http.get(f"http://127.0.0.1:{port}/healthz", timeout=30).text == "ok\n"
        # the installed package is the one answering, not this checkout's sources
        where = subprocess.run(
            [str(python), "-c", "import microcompact; print(microcompact.__file__)"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": env["PATH"]},
            cwd=tmp_path,
        )
        assert str(env_dir) in where.stdout, where.stdout
        assert sys.prefix not in where.stdout
    finally:
        served.terminate()
        served.wait(timeout=30)
