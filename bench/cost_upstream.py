"""The cost bench's scripted side: the Anthropic-priced upstream that tallies what it billed, the
step-counting agent script (``CostSteps``) and a slow model summarizer. ``bench_proxy_cost.py`` runs them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from support.claude_code import comparable
from upstream import Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.recorded import RecordedRequest
from upstream.scripts import offers_tool, seq_command

TTL = 300.0
STEP_MENTION = re.compile(r"step (\d+)", re.IGNORECASE)
SUMMARY_ASK = re.compile(r"create a detailed summary of the conversation", re.IGNORECASE)


def tool_results(messages: list[Any]) -> int:
    """Tool results a request carries verbatim (OpenAI tool messages, Anthropic tool_result blocks): how
    much of the recent work the model still sees whole."""
    count = 0
    for m in messages:
        if m.get("role") == "tool":
            count += 1
        elif isinstance(m.get("content"), list):
            count += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return count


def digest(message: Any) -> str:
    return hashlib.sha256(json.dumps(comparable(message), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Tally:
    """What the upstream billed for one run's main requests."""

    requests: int = 0
    prompt: int = 0
    read: int = 0
    write: int = 0
    uncached: int = 0
    output: int = 0
    peak: int = 0
    refused: int = 0
    folds: int = 0
    compactions: int = 0  # the client's own (Claude Code's summary requests)
    steps_seen: list[int] = field(default_factory=list)  # tool results each request carried verbatim
    _previous: list[str] = field(default_factory=list)

    def shape(self, messages: list[Any]) -> None:
        current = [digest(m) for m in messages]
        if self._previous and current[: len(self._previous)] != self._previous:
            self.folds += 1
        self._previous = current


class CostSteps:
    """Bash ``steps`` times with ``lines`` numbers each, then a final text. The step count is the upstream's
    own (the highest step answered so far, from the newest tool result's id when there is one), so neither a
    compacting proxy nor Claude Code's own compaction moves it back. Claude Code's summary request (its own
    compaction) gets a text summary; side requests get a short text."""

    def __init__(self, run: str, steps: int, lines: int, tally: Tally, per_turn: int | None = None) -> None:
        self.run, self.steps, self.lines, self.tally = run, steps, lines, tally
        self.per_turn = per_turn  # the user's turn ends after this many steps (then a text answer)
        self.done = 0
        self._seen: set[str] = set()

    def _last_text(self, request: RecordedRequest) -> str:
        last = request.messages[-1] if request.messages else {}
        content = last.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict))

    def _answered(self, request: RecordedRequest) -> int:
        """The step the request's newest tool result answers: from its id (Anthropic: ours), or one more
        than before for an OpenAI tool message not seen yet (the wire names its calls itself)."""
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "tool":
            call = str(last.get("tool_call_id"))
            if call not in self._seen:
                self._seen.add(call)
                return self.done + 1
            return self.done
        for message in reversed(request.messages[-4:]):  # after its compaction Claude Code sends text last
            blocks = message.get("content") if isinstance(message.get("content"), list) else []
            ids = [b.get("tool_use_id", "") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            found = re.fullmatch(rf"toolu_{self.run}_(\d+)", ids[-1]) if ids else None
            if found:
                return int(found.group(1))
        return 0

    def _after_result(self, request: RecordedRequest) -> bool:
        """True when the request's last message carries a tool result (not the user's new turn)."""
        last = request.messages[-1] if request.messages else {}
        blocks = last.get("content") if isinstance(last.get("content"), list) else []
        return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        if SUMMARY_ASK.search(self._last_text(request)):
            self.tally.compactions += 1
            return text(f"Summary: run {self.run}, steps 1-{self.done} done with the Bash tool; continue.")
        self.done = max(self.done, self._answered(request))
        n = self.done + 1
        if self.per_turn and self.done % self.per_turn == 0 and self._after_result(request) and n <= self.steps:
            return text(f"Run {self.run}: steps 1-{self.done} are done; say when to go on.")
        if n > self.steps:
            return text(f"Run {self.run}: all steps are done.")
        command = {"command": seq_command(n, self.lines), "description": f"Print numbers (step {n})"}
        return Reply((Text(f"Step {n}."), ToolCall("Bash", command, id=f"toolu_{self.run}_{n}")))


class PricedUpstream(ScriptedUpstream):
    """The scripted upstream, tallying the usage of every main request (bodies are not kept)."""

    def __init__(self, tally: Tally, ttl: float = TTL, **options: Any) -> None:
        super().__init__(keep=2, cache_ttl=ttl, min_cacheable=1024, openai_cache=True, **options)
        self.tally = tally

    def _too_long(self, record: RecordedRequest) -> str | None:
        problem = super()._too_long(record)
        if problem and offers_tool(record.body, "Bash"):
            self.tally.refused += 1
            self.tally.peak = max(self.tally.peak, record.refused_tokens or 0)
        return problem

    def _count(self, record: RecordedRequest, prompt: int, read: int, write: int, output: int) -> None:
        if not offers_tool(record.body, "Bash"):
            return
        t = self.tally
        t.requests += 1
        t.prompt += prompt
        t.read += read
        t.write += write
        t.uncached += prompt - read - write
        t.output += output
        t.peak = max(t.peak, prompt)
        t.shape(record.body.get("messages") or [])
        t.steps_seen.append(tool_results(record.body.get("messages") or []))

    def _render_anthropic(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        chunks = super()._render_anthropic(record, reply)
        u = record.usage or {}
        read, write = u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0)
        self._count(record, u.get("input_tokens", 0) + read + write, read, write, u.get("output_tokens", 0))
        return chunks

    def _render_openai(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        chunks = super()._render_openai(record, reply)
        u = record.usage or {}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        self._count(record, u.get("prompt_tokens", 0), cached, 0, u.get("completion_tokens", 0))
        return chunks


class SummarizerUpstream(ScriptedUpstream):
    """A model summarizer (OpenAI-compatible) that takes ``latency`` seconds per call; tallies its tokens."""

    def __init__(self, latency: float) -> None:
        super().__init__(self._answer, keep=2, latency=latency)
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def _answer(self, request: RecordedRequest) -> Reply:
        """Notes a model would write, in the sections the merge prompt asks for and naming the steps the
        request shows (a fixed text failed the output checks, so every call fell back to the extractive
        summary)."""
        body = " ".join(str(m.get("content")) for m in request.messages)
        steps = sorted({int(n) for n in STEP_MENTION.findall(body)})
        latest = steps[-1] if steps else 0
        return text(
            "## Goal\n- Run the numbered steps with the Bash tool until they are done.\n\n"
            f"## Work done\n- Steps {', '.join(map(str, steps)) or 'none yet'} ran with the Bash tool and printed "
            "their numbers.\n\n"
            f"## Findings\n- Step {latest} is the latest one run; its output was a list of numbers.\n\n"
            f"## Next\n- Run step {latest + 1}.\n"
        )

    def _render_openai(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        chunks = super()._render_openai(record, reply)
        u = record.usage or {}
        self.calls += 1
        self.input_tokens += u.get("prompt_tokens", 0)
        self.output_tokens += u.get("completion_tokens", 0)
        return chunks


OVERHEAD_BUCKET = re.compile(r'^microcompact_proxy_overhead_seconds_bucket\{le="([^"]+)"\} (\d+)$', re.MULTILINE)


def proxy_waits(base_url: str, bounds: tuple[float, ...] = (0.5, 1.0)) -> dict[float, int] | None:
    """Requests ``serve`` held longer than each bound before it forwarded them, from its ``/metrics``
    histogram of proxy overhead (the time from a request's arrival to its upstream request, the conversation's
    lock and any pass it waited for included). The proxy's own work on a request takes milliseconds, so with a
    2 s summarizer a request over 0.5 s waited on it. None when the metrics cannot be read."""
    import httpx

    try:
        page = httpx.get(f"{base_url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    buckets = {le: int(n) for le, n in OVERHEAD_BUCKET.findall(page)}
    total = buckets.get("+Inf")
    if total is None:
        return None
    return {b: total - buckets.get(f"{b:g}", total) for b in bounds}


@dataclass
class Folds:
    """What ``serve``'s passes did, from its log: passes whose summary the model wrote, passes the offline
    summary absorbed instead, and batch prunes (the window at risk: the micro schedule fell behind)."""

    model: int = 0
    offline: int = 0
    prunes: int = 0

    @classmethod
    def of_log(cls, path: Any) -> Folds:
        from microcompact.telemetry import parse_line

        folds = cls()
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.readlines()
        except OSError:
            return folds
        for line in lines:
            parsed = parse_line(line)
            if parsed is None:
                continue
            kind, record = parsed
            if kind == "batch":
                folds.prunes += record.get("outcome") == "pruned"
            elif record.get("outcome") in ("absorbed", "model_rejected"):
                if record.get("aux_model") in (None, "extractive") or record.get("outcome") == "model_rejected":
                    folds.offline += 1
                else:
                    folds.model += 1
        return folds
