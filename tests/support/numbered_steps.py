"""An upstream script for long tool loops behind a compacting proxy: Bash ``steps`` times with signed thinking,
each step known from the request's tail alone, with a pause and an overload on chosen steps."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from upstream import (
    Answer,
    RecordedRequest,
    RedactedThinking,
    Reply,
    Text,
    Thinking,
    ToolCall,
    disconnect,
    error,
    text,
)
from upstream.scripts import offers_tool, seq_command


class NumberedSteps:
    """Bash ``steps`` times, then a final text. The step is read from the newest tool result's id, so the
    answer depends only on the request's tail: compaction upstream of it cannot shift the count.

    With ``pause``, step ``pause``'s command first touches ``GATE.waiting`` and waits for ``GATE.go``: the
    agent is then busy running the tool between two requests of its turn, when a test restarts the server.
    With ``overloaded``, the first request for that step gets a 529, and with ``cut`` a stream broken after
    a few events; Claude Code retries both by itself.
    """

    def __init__(
        self,
        run: str,
        steps: int,
        pause: tuple[int, Path] | None = None,
        overloaded: int | None = None,
        cut: int | None = None,
        lines: int = 3000,
    ) -> None:
        self.run = run
        self.steps = steps
        self.pause = pause
        self.overloaded = overloaded
        self.cut = cut
        self.lines = lines  # each step's command prints this many numbers, 8 bytes a line

    def step_done(self, request: RecordedRequest) -> int:
        last = request.messages[-1] if request.messages else {}
        blocks = last.get("content") if isinstance(last.get("content"), list) else []
        ids = [b.get("tool_use_id", "") for b in blocks if b.get("type") == "tool_result"]
        found = re.fullmatch(rf"toolu_{self.run}_(\d+)", ids[-1]) if ids else None
        return int(found.group(1)) if found else 0

    def command(self, n: int) -> str:
        if self.pause is None or self.pause[0] != n:
            return seq_command(n, self.lines)
        gate = self.pause[1]
        return f"touch {gate}.waiting; while [ ! -e {gate}.go ]; do sleep 0.05; done; {seq_command(n, self.lines)}"

    def __call__(self, request: RecordedRequest) -> Answer:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        done = self.step_done(request)
        if done + 1 == self.overloaded:
            self.overloaded = None
            return error(529, message="Overloaded")
        if done + 1 == self.cut:
            self.cut = None
            return disconnect(after_events=4, reply=self.reply(done + 1))
        return self.reply(done + 1)

    def reply(self, n: int) -> Reply:
        """Step ``n``'s answer: signed thinking (every fifth step also a redacted block), a line, the call."""
        if n > self.steps:
            return text(f"Run {self.run}: all steps are done.")
        blocks: list[Any] = [Thinking(f"Plan for {self.run} step {n}.", f"sig-{self.run}-{n}")]
        if n % 5 == 0:
            blocks.append(RedactedThinking(f"redacted-{self.run}-{n}"))
        command = {"command": self.command(n), "description": f"Print numbers (step {n})"}
        blocks += [Text(f"Step {n}."), ToolCall("Bash", command, id=f"toolu_{self.run}_{n}")]
        return Reply(tuple(blocks))


__all__ = ["NumberedSteps"]


def wait_for_pause(gate: Path, timeout: float = 120) -> None:
    """Block until the paused step has touched ``GATE.waiting`` (TimeoutError after ``timeout`` seconds)."""
    waiting, deadline = gate.with_suffix(".waiting"), time.monotonic() + timeout
    while not waiting.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{waiting} did not appear")
        time.sleep(0.05)
