"""``microcompact serve`` as users run it: a real subprocess of this checkout's CLI on a free 127.0.0.1 port,
which can be stopped gracefully (SIGINT) or killed outright (SIGKILL) to show what a restart keeps."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import microcompact

SRC = str(Path(microcompact.__file__).parent.parent)
CLI = [sys.executable, "-c", "from microcompact.cli import main; main()"]
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:(\d+))")


def cli_env(home: Path) -> dict[str, str]:
    """This checkout's sources first, a private MICROCOMPACT_HOME, and a wide terminal for rich's tables."""
    return {**os.environ, "PYTHONPATH": SRC, "MICROCOMPACT_HOME": str(home), "COLUMNS": "240"}


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``microcompact ARGS`` in a subprocess, as a user types it."""
    return subprocess.run([*CLI, *args], env=cli_env(home), capture_output=True, text=True, timeout=60, check=False)


class ServeProcess:
    def __init__(self, home: Path, *options: str, file_limit: int | None = None) -> None:
        self.home = home
        self.options = options
        self.file_limit = file_limit  # the process's open-file limit (soft and hard), when given
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.stderr: list[str] = []  # every line the server wrote to stderr, drained so its pipe never fills

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ServeProcess:
        command = [*CLI, "serve", "--port", "0", *self.options]
        limit = self.file_limit

        def limited() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        self.process = subprocess.Popen(
            command,
            env=cli_env(self.home),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limited if limit is not None else None,
        )
        assert self.process.stderr is not None
        ready = threading.Event()

        def drain() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self.stderr.append(line)
                found = LISTENING.search(line)
                if found:
                    self.port = int(found.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, name="serve-stderr", daemon=True).start()
        if not ready.wait(timeout) or not self.port:
            self.kill()
            raise RuntimeError(f"microcompact serve did not start: {''.join(self.stderr)[-2000:]}")
        return self

    def stop(self, timeout: float = 30) -> int:
        """SIGINT, as Ctrl-C: the server finishes its after-work and closes the store. Its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no after-work, no cleanup, as a crash or an OOM kill; the process is reaped."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


__all__ = ["ServeProcess", "cli_env", "run_cli"]
