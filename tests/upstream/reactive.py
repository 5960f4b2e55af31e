"""A reactive agent: each step needs values that earlier tool outputs showed, and when one is no longer in the
prompt it received, the agent re-runs the command that printed it.

A scripted agent that asks for nothing it lost cannot tell a fold that keeps the working set from one that
drops it. This one can. Step ``n``'s command (``step_command``) prints numbers with two lines among them,
``id of step n: <16 hex digits>`` a quarter of the way and ``key of step n: <16 hex digits>`` half way; the
digits are sha256 prefixes the shell computes, so the values are in the output only, never in a command.
The reply after step ``k``'s output must quote step ``k``'s key (the output the agent is working on) and,
for some steps, the id printed 8 or 25 steps back (``needs``), which nothing quoted before: like a symbol
read in a file and used later, it is in that tool output alone (or wherever a fold kept it). When a needed
value is not in the prompt, the reply is a re-run of the command that printed it (a re-fetch: a model turn
the user waits for, and the whole prompt billed again), and the value is looked for again in the next
prompt, which carries the new output.

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
MAX_TRIES = 3  # re-fetches of one value within one step before the agent goes on without it


@dataclass(frozen=True)
class Reach:
    """Steps ``k`` with ``k % every == offset`` (and ``k > back``) also need the id of step ``k - back``."""

    back: int
    every: int
    offset: int = 0


# Every 4th step needs the id from 8 steps back; every 6th (from step 27 on) the one from 25 back.
REACHES = (Reach(8, 4), Reach(25, 6, 3))


Need = tuple[int, str]  # (step, "key" or "id"): a value a reply must quote


def step_value(run: str, step: int, name: str = "key") -> str:
    """The value ``name`` (``key`` or ``id``) that step ``step`` of run ``run`` prints: what
    ``printf %s RUN-STEP-NAME | sha256sum`` starts with."""
    return hashlib.sha256(f"{run}-{step}-{name}".encode()).hexdigest()[:KEY_DIGITS]


def _cuts(lines: int) -> tuple[int, int]:
    """After how many numbers the id line and the key line are printed (a quarter and half way)."""
    return lines // 4, lines // 2


def step_command(run: str, step: int, lines: int) -> str:
    """A Bash command printing ``lines`` numbers (about 9 bytes a line below step 100, 10 above) with the
    id line a quarter and the key line half way. Both values are computed by the shell, so the command never
    contains them."""
    start, (quarter, half) = step * 1_000_000, _cuts(lines)

    def value(name: str) -> str:
        return f'echo "{name} of step {step}: $(printf %s {run}-{step}-{name} | sha256sum | cut -c1-{KEY_DIGITS})"'

    return "; ".join(
        [
            f"seq {start + 1} {start + quarter}",
            value("id"),
            f"seq {start + quarter + 1} {start + half}",
            value("key"),
            f"seq {start + half + 1} {start + lines}",
        ]
    )


def step_output(run: str, step: int, lines: int) -> str:
    """What ``step_command`` prints (its stdout), computed here for tools run in-process and for tests."""
    start, (quarter, half) = step * 1_000_000, _cuts(lines)
    numbers = [str(i) for i in range(start + 1, start + lines + 1)]
    id_line, key_line = (f"{name} of step {step}: {step_value(run, step, name)}" for name in ("id", "key"))
    return "\n".join([*numbers[:quarter], id_line, *numbers[quarter:half], key_line, *numbers[half:]]) + "\n"


def needs(step: int, reaches: tuple[Reach, ...] = REACHES) -> list[Need]:
    """The values the reply after step ``step``'s output must quote: that step's key first, then the ids of
    the steps its reaches name. An id is quoted only where it is needed, so until then it is in the tool
    output alone (a key is quoted by the reply right after it, as an agent says what it just read)."""
    if step < 1:
        return []
    far = [(step - r.back, "id") for r in reaches if step > r.back and step % r.every == r.offset]
    return [(step, "key"), *far]


def prompt_text(body: Any) -> str:
    """Everything the model is shown (system and messages, as JSON): where a value is looked for."""
    if not isinstance(body, dict):
        return ""
    return json.dumps([body.get("system"), body.get("messages")], ensure_ascii=False)


def missing(prompt: str, run: str, step: int, reaches: tuple[Reach, ...] = REACHES) -> list[Need]:
    """The values among ``needs(step)`` that ``prompt`` no longer shows, in the order they are needed."""
    return [(j, name) for j, name in needs(step, reaches) if step_value(run, j, name) not in prompt]


@dataclass
class ReactiveStats:
    """What the agent did: its turns (model requests it answered) and the re-fetches among them."""

    steps: int = 0  # the task's steps (what the turns are counted against)
    turns: int = 0
    refetches: int = 0
    previous: int = 0  # re-fetches of the previous step's output: the one the agent was working on
    given_up: int = 0  # values still missing after MAX_TRIES re-fetches in one step (the agent went on)
    compactions: int = 0  # the client's own summary requests (answered, not counted as turns)
    refetched: list[tuple[int, int]] = field(default_factory=list)  # (at step, re-fetched step), in order


class ReactiveSteps:
    """The reactive agent's script: ``steps`` steps of ``lines`` numbers through tool ``tool``, then a text.

    Requests that do not offer the tool are side requests (a short text); Claude Code's own compaction
    request gets a summary that names the steps done but, like a summary written from memory, none of the
    values."""

    def __init__(
        self, run: str, steps: int, lines: int, *, tool: str = "Bash", reaches: tuple[Reach, ...] = REACHES
    ) -> None:
        self.run, self.steps, self.lines, self.tool, self.reaches = run, steps, lines, tool, reaches
        self.done = 0  # the highest step whose output the agent has been shown
        self.stats = ReactiveStats(steps=steps)
        self._tries: dict[tuple[int, int, str], int] = {}
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
        for need in gone:
            tries = self._tries.get((k, *need), 0)
            if tries < MAX_TRIES:
                self._tries[(k, *need)] = tries + 1
                return self._refetch(k, need)
        self.stats.given_up += len(gone)
        return self._proceed(k, gone)

    def _refetch(self, k: int, need: Need) -> Reply:
        j, name = need
        self.stats.refetches += 1
        self.stats.previous += j == k
        self.stats.refetched.append((k, j))
        call = {"command": step_command(self.run, j, self.lines), "description": f"Print numbers again (step {j})"}
        return Reply(
            (
                Text(f"I no longer see the {name} of step {j}; running step {j} again."),
                ToolCall(self.tool, call, id=self.call_id(j, self.stats.refetches)),
            )
        )

    def _proceed(self, k: int, lost: list[Need]) -> Reply:
        """Quote the values step ``k`` needs (those ``lost`` as unknown) and run the next step, or finish."""
        quoted = [
            f"the {name} of step {j} is {'unknown' if (j, name) in lost else step_value(self.run, j, name)}"
            for j, name in needs(k, self.reaches)
        ]
        said = "; ".join(quoted).capitalize() + ". " if quoted else ""
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
