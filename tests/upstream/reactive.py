"""A reactive agent: each step needs values that earlier tool outputs showed, and when one is no longer in the
prompt it received, the agent re-runs the command that printed it.

A scripted agent that asks for nothing it lost cannot tell a fold that keeps the working set from one that
drops it. This one can. Step ``n``'s command (``step_command``) prints numbers with one line in the middle,
``key of step n: <16 hex digits>``; the digits are a sha256 the shell computes, so the value is in the output
only, never in a command or anywhere else the agent wrote before reading it. The reply after step ``k``'s
output must quote the keys ``needs(k)`` names (step ``k``'s own, the one the agent is working on; for some
steps also one from 8 and one from 25 steps back). When a needed key is not in the prompt, the reply is a
re-run of the command that printed it (a re-fetch: a model turn the user waits for, and the whole prompt
billed again) and the key is looked for again in the next prompt, which carries the new output.

The script counts its steps itself (from its own tool-call ids, as ``CostSteps`` does), so a compacting
proxy or the client's own compaction never moves it back; it works on the Anthropic and OpenAI wires alike.
Only the agent's answers are scripted here: the upstream's cache, usage and window rules stay the server's.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .recorded import RecordedRequest
from .replies import Reply, Text, ToolCall, text
from .scripts import offers_tool

SUMMARY_ASK = re.compile(r"create a detailed summary of the conversation", re.IGNORECASE)
KEY_DIGITS = 16
MAX_TRIES = 3  # re-fetches of one key within one step before the agent goes on without it


@dataclass(frozen=True)
class Reach:
    """Steps ``k`` with ``k % every == offset`` (and ``k > back``) also need the key of step ``k - back``."""

    back: int
    every: int
    offset: int = 0


# Every 4th step needs the key from 8 steps back; every 6th (from step 27 on) the one from 25 back.
REACHES = (Reach(8, 4), Reach(25, 6, 3))


def step_key(run: str, step: int) -> str:
    """The value step ``step`` of run ``run`` prints: what ``printf %s RUN-STEP | sha256sum`` starts with."""
    return hashlib.sha256(f"{run}-{step}".encode()).hexdigest()[:KEY_DIGITS]


def step_command(run: str, step: int, lines: int) -> str:
    """A Bash command printing ``lines`` numbers (about 9 bytes a line below step 100, 10 above) with the
    key line in the middle. The key is computed by the shell, so the command never contains it."""
    start, half = step * 1_000_000, lines // 2
    key = f"$(printf %s {run}-{step} | sha256sum | cut -c1-{KEY_DIGITS})"
    return f'seq {start + 1} {start + half}; echo "key of step {step}: {key}"; seq {start + half + 1} {start + lines}'


def step_output(run: str, step: int, lines: int) -> str:
    """What ``step_command`` prints (its stdout), computed here for tools run in-process and for tests."""
    start, half = step * 1_000_000, lines // 2
    numbers = [str(i) for i in range(start + 1, start + lines + 1)]
    return "\n".join([*numbers[:half], f"key of step {step}: {step_key(run, step)}", *numbers[half:]]) + "\n"


def needs(step: int, reaches: tuple[Reach, ...] = REACHES) -> list[int]:
    """The steps whose keys the reply after step ``step``'s output must quote, the step itself first."""
    if step < 1:
        return []
    return [step] + [step - r.back for r in reaches if step > r.back and step % r.every == r.offset]


def prompt_text(body: Any) -> str:
    """Everything the model is shown (system and messages, as JSON): where a key is looked for."""
    if not isinstance(body, dict):
        return ""
    return json.dumps([body.get("system"), body.get("messages")], ensure_ascii=False)


def missing(prompt: str, run: str, step: int, reaches: tuple[Reach, ...] = REACHES) -> list[int]:
    """The steps among ``needs(step)`` whose keys ``prompt`` no longer shows, in the order they are needed."""
    return [j for j in needs(step, reaches) if step_key(run, j) not in prompt]


@dataclass
class ReactiveStats:
    """What the agent did: its turns (model requests it answered) and the re-fetches among them."""

    steps: int = 0  # the task's steps (what the turns are counted against)
    turns: int = 0
    refetches: int = 0
    previous: int = 0  # re-fetches of the previous step's output: the one the agent was working on
    given_up: int = 0  # keys still missing after MAX_TRIES re-fetches in one step (the agent went on)
    compactions: int = 0  # the client's own summary requests (answered, not counted as turns)
    refetched: list[tuple[int, int]] = field(default_factory=list)  # (at step, re-fetched step), in order


class ReactiveSteps:
    """The reactive agent's script: ``steps`` steps of ``lines`` numbers through tool ``tool``, then a text.

    Requests that do not offer the tool are side requests (a short text); Claude Code's own compaction
    request gets a summary that names the steps done but, like a summary written from memory, none of the
    keys."""

    def __init__(
        self, run: str, steps: int, lines: int, *, tool: str = "Bash", reaches: tuple[Reach, ...] = REACHES
    ) -> None:
        self.run, self.steps, self.lines, self.tool, self.reaches = run, steps, lines, tool, reaches
        self.done = 0  # the highest step whose output the agent has been shown
        self.stats = ReactiveStats(steps=steps)
        self._tries: dict[tuple[int, int], int] = {}
        self._call = re.compile(rf"toolu_{re.escape(run)}_(\d+)(?:_again\d+)?")

    def call_id(self, step: int, again: int = 0) -> str:
        """A step's call id (``again``: the n-th re-fetch of the run). Ids name the step, so the script
        reads its progress from the request and nothing the proxy rewrites can move it back."""
        return f"toolu_{self.run}_{step}" + (f"_again{again}" if again else "")

    def _newest_step(self, messages: list[Any]) -> int:
        """The highest step any tool result in ``messages`` answers (0 when none is the script's)."""
        highest = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            ids = [message.get("tool_call_id")] if message.get("role") == "tool" else []
            content = message.get("content")
            if isinstance(content, list):
                ids += [b.get("tool_use_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            for call in ids:
                found = self._call.fullmatch(str(call))
                if found:
                    highest = max(highest, int(found.group(1)))
        return highest

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, self.tool):
            return text("Side request answered.")
        if SUMMARY_ASK.search(_last_text(request.messages)):
            self.stats.compactions += 1
            return text(f"Summary: run {self.run}, steps 1-{self.done} done with the {self.tool} tool; continue.")
        self.done = max(self.done, self._newest_step(request.messages))
        self.stats.turns += 1
        k = self.done
        gone = missing(prompt_text(request.body), self.run, k, self.reaches)
        for j in gone:
            tries = self._tries.get((k, j), 0)
            if tries < MAX_TRIES:
                self._tries[(k, j)] = tries + 1
                return self._refetch(k, j)
        self.stats.given_up += len(gone)
        return self._proceed(k, gone)

    def _refetch(self, k: int, j: int) -> Reply:
        self.stats.refetches += 1
        self.stats.previous += j == k
        self.stats.refetched.append((k, j))
        call = {"command": step_command(self.run, j, self.lines), "description": f"Print numbers again (step {j})"}
        return Reply(
            (
                Text(f"I no longer see the key of step {j}; running step {j} again."),
                ToolCall(self.tool, call, id=self.call_id(j, self.stats.refetches)),
            )
        )

    def _proceed(self, k: int, lost: list[int]) -> Reply:
        """Quote the keys step ``k`` needs (those ``lost`` as unknown) and run the next step, or finish."""
        keys = [
            f"the key of step {j} is {'unknown' if j in lost else step_key(self.run, j)}"
            for j in needs(k, self.reaches)
        ]
        said = "; ".join(keys).capitalize() + ". " if keys else ""
        if k >= self.steps:
            return text(f"{said}Run {self.run}: all {self.steps} steps are done.")
        n = k + 1
        call = {"command": step_command(self.run, n, self.lines), "description": f"Print numbers and a key (step {n})"}
        return Reply((Text(f"{said}Step {n}."), ToolCall(self.tool, call, id=self.call_id(n))))


def _last_text(messages: list[Any]) -> str:
    last = messages[-1] if messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, str):
        return content
    return " ".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
