"""The launcher's lifecycle: find the ``serve`` on the port or start one, run the agent in the foreground,
stop the ``serve`` it started.

A port that answers is used only when what answers is a microcompact ``serve`` (``/healthz`` says ok and
``/metrics`` is microcompact's, or its refusal carries the ``X-Microcompact-Mode`` header) that takes requests
without a proxy key (the agents send none) and, when ``--audit`` or ``--rewrite`` was asked, is in that mode
(``/healthz``'s ``X-Microcompact-Serve-Mode``): a ``serve`` in the other mode is refused, not silently used.
A ``serve`` started here listens on 127.0.0.1, in its own session (Ctrl-C in the terminal reaches the agent,
not the proxy), with its output in a file; it gets SIGINT when the agent exits, as a user's Ctrl-C, and
SIGKILL if it has not finished its after-work in time. While the agent runs, Ctrl-C is the agent's to handle
and SIGTERM or SIGHUP sent to the launcher is passed on to it.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from .agents import SPECS, Agent, Launch, LaunchRequest, Upstreams

HOST = "127.0.0.1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
PROXY_KEY_ENV = "MICROCOMPACT_PROXY_KEY"
MODE_HEADER = "x-microcompact-mode"
SERVE_MODE_HEADER = "x-microcompact-serve-mode"  # on /healthz, as server/connections.py sets it
AUDIT, REWRITE = "audit", "rewrite"  # its values (server/connections.py's ServeMode)


class LaunchError(Exception):
    """Why the agent cannot be started, phrased for the user (one line)."""


@dataclass(frozen=True)
class ServeSettings:
    """The ``serve`` to find or start: its port and upstreams, and the store, log and window of one started
    here."""

    port: int = 8765
    upstreams: Upstreams = field(default_factory=Upstreams)
    db: str | None = None
    log: Path | None = None
    context_limit: int | None = None
    output: Path | None = None  # where a started serve's own output goes (default: a file next to the log)
    audit: bool | None = None  # --audit (True), --rewrite (False), or the config file's choice (None)

    @property
    def mode(self) -> str | None:
        """The mode asked for, as ``/healthz`` names it; None when the config file decides."""
        return None if self.audit is None else AUDIT if self.audit else REWRITE

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "microcompact.cli", "serve", "--host", HOST, "--port", str(self.port)]
        command += ["--openai-upstream", self.upstreams.openai, "--anthropic-upstream", self.upstreams.anthropic]
        command += ["--gemini-upstream", self.upstreams.gemini]
        if self.db is not None:
            command += ["--db", self.db]
        if self.log is not None:
            command += ["--log", str(self.log)]
        if self.context_limit is not None:
            command += ["--context-limit", str(self.context_limit)]
        if self.audit is not None:
            command.append("--audit" if self.audit else "--rewrite")
        return command


def _answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        return probe.connect_ex((HOST, port)) == 0


def identify(base: str, mode: str | None = None) -> str | None:
    """None when ``base`` is a microcompact ``serve`` the agents can use (in ``mode``, when given), else why
    not."""
    try:
        with httpx.Client(timeout=5) as client:  # one client (and TLS context) for both
            health = client.get(f"{base}/healthz")
            metrics = client.get(f"{base}/metrics")
    except httpx.HTTPError as exc:
        return f"something listens on {base} but does not answer HTTP ({type(exc).__name__})"
    ours = health.status_code == 200 and health.text.strip() == "ok"
    ours = ours and (metrics.text.startswith("# HELP microcompact_") or MODE_HEADER in metrics.headers)
    if not ours:
        return f"{base} is taken by something that is not microcompact serve; pick another --port"
    if metrics.status_code == 401:
        return f"the microcompact serve on {base} needs a proxy key, which agents do not send; use another --port"
    running = health.headers.get(SERVE_MODE_HEADER)
    if mode is None or running == mode:
        return None
    if running is None:
        return f"the microcompact serve on {base} does not say its mode (an older version), --{mode} was asked; {_AWAY}"
    return f"the microcompact serve on {base} runs in {running} mode, --{mode} was asked; {_AWAY}"


_AWAY = "stop it or pick another --port"


class StartedServe:
    """A ``serve`` this launcher started: waited for, then stopped."""

    def __init__(self, settings: ServeSettings, environ: Mapping[str, str]) -> None:
        self.settings = settings
        self.output = settings.output or _default_output(environ, settings.port)
        self.output.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in environ.items() if k != PROXY_KEY_ENV}  # a key would lock the agents out
        with self.output.open("ab") as sink:
            self.process = subprocess.Popen(
                settings.command(), env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True
            )

    def wait_ready(self, base: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(timeout=2) as client:  # one client for every poll, not one per poll
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise LaunchError(f"microcompact serve exited ({self.process.returncode}): {self._last_line()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{base}/healthz").status_code == 200:
                        return
                time.sleep(0.1)
        self.stop()
        raise LaunchError(
            f"microcompact serve did not answer on {base} within {START_TIMEOUT:.0f} s; see {self.output}"
        )

    def _last_line(self) -> str:
        lines = self.output.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"no output (see {self.output})"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def microcompact_home(environ: Mapping[str, str]) -> Path:
    """``$MICROCOMPACT_HOME`` (default ``~/.microcompact``), as the launcher's environment says."""
    home = environ.get("MICROCOMPACT_HOME")
    return Path(home) if home else Path.home() / ".microcompact"


def _default_output(environ: Mapping[str, str], port: int) -> Path:
    return microcompact_home(environ) / "logs" / f"serve-{port}.out"


def scratch_folder(environ: Mapping[str, str]) -> Path:
    """Where a run's files go (removed after it): under the microcompact home, not the system's temp folder.
    Gemini CLI skips a system settings file with a world-writable folder (such as /tmp) above it."""
    folder = microcompact_home(environ) / "launch"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


@contextlib.contextmanager
def proxy(settings: ServeSettings, environ: Mapping[str, str]) -> Iterator[tuple[str, bool]]:
    """The proxy's base URL while the block runs, and whether it was started here (then stopped after)."""
    if not 1 <= settings.port <= 65535:
        raise LaunchError(f"--port: expected 1 to 65535, got {settings.port}")
    base = f"http://{HOST}:{settings.port}"
    if _answers(settings.port):
        problem = identify(base, settings.mode)
        if problem is not None:
            raise LaunchError(problem)
        yield base, False
        return
    started = StartedServe(settings, environ)
    try:
        started.wait_ready(base)
        yield base, True
    finally:
        started.stop()


class _Forward:
    """While the agent runs: Ctrl-C ignored here (the terminal sends it to the agent too), SIGTERM and SIGHUP
    passed on to the agent."""

    PASSED = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.saved: dict[int, object] = {}

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def __enter__(self) -> _Forward:
        self.saved[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
        for signum in self.PASSED:
            self.saved[signum] = signal.signal(signum, self._pass_on)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def run_agent(launch: Launch, environ: Mapping[str, str]) -> int:
    """Run the agent with the terminal's stdin, stdout and stderr; its exit code (128+N for signal N)."""
    for path, text in launch.files.items():
        path.write_text(text, encoding="utf-8")
    with _Forward() as forward:
        try:
            forward.child = subprocess.Popen(launch.argv, env=launch.environment(environ))
        except OSError as exc:
            raise LaunchError(f"cannot start {launch.argv[0]}: {exc.strerror or exc}") from None
        code = forward.child.wait()
    return 128 - code if code < 0 else code


def launch(agent: Agent, args: Sequence[str], settings: ServeSettings, environ: Mapping[str, str]) -> int:
    """``microcompact AGENT ARGS``: the agent's exit code. Raises LaunchError."""
    spec = SPECS[agent]
    binary = spec.binary(environ)
    if binary is None:
        where = environ.get(spec.binary_env)
        found = (
            f"{spec.binary_env}={where!r} is not an executable file" if where else f"{spec.command!r} is not on PATH"
        )
        raise LaunchError(f"{agent.value}: {found}; install it ({spec.install}) or set {spec.binary_env}")
    folder = scratch_folder(environ)
    with tempfile.TemporaryDirectory(prefix=f"{agent.value}-", dir=folder) as scratch, proxy(settings, environ) as run:
        base, _ = run
        request = LaunchRequest(base, settings.upstreams, binary, list(args), environ, Path(scratch))
        return run_agent(spec.build(request), environ)


__all__ = ["LaunchError", "ServeSettings", "identify", "launch", "proxy", "run_agent"]
