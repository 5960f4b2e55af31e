"""Head to head: our LangChain middleware against LangChain's ``SummarizationMiddleware`` and LangMem's
``summarize_messages`` on the shared Claude Code sessions, each replayed up to where Claude Code compacted.

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_frameworks.py [--window 64000] [--json]``.
Prints one row per session and method; asserts nothing.

Method. Each session's messages before its ``compact_summary_indices`` (Claude Code's own compaction) are
fed in order, as a LangChain agent's state grows; at every recorded assistant message (a model request)
each method decides what the model is sent:

* ``microcompact``: ``MicroCompactMiddleware(model, context_length=WINDOW)``, through ``wrap_model_call``
  (the agent's state keeps every message);
* ``SummarizationMiddleware``: ``SummarizationMiddleware(model, trigger=("tokens", 0.8 * WINDOW))``, the
  other settings default, through ``before_model``; the state is replaced by what it returns, as the
  agent does;
* ``LangMem``: ``summarize_messages(history, running_summary=..., model=model, max_tokens=WINDOW / 2,
  max_tokens_before_summary=0.8 * WINDOW)`` on the full history, its running summary carried along.

All three summarize with the same deterministic chat model (:class:`ExtractiveChatModel`): it answers
with the lines of what it was sent that name a file or report an error or a result, at most a quarter
of its input and about 1,500 tokens. Columns:

* ``compactions`` - times the method replaced part of the history (ours: micro passes and batch
  compactions; SummarizationMiddleware: state rewrites; LangMem: new running summaries);
* ``calls`` - summarizer calls actually made; ``max in`` - the largest summarizer input (tokens);
* ``peak`` - the largest request sent to the model (tokens, o200k_base over the OpenAI form);
* ``users verbatim`` - the session's user messages present verbatim in the last request;
* ``pair errs`` - tool-pairing errors over all requests;
* ``files named`` - files the session read or edited that the last request still names.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents.middleware import ModelRequest, SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langmem.short_term import RunningSummary, summarize_messages

from microcompact.contract import tool_pairing_errors
from microcompact.integrations.langchain import MicroCompactMiddleware, from_openai, to_openai
from microcompact.messages import Message
from microcompact.replay import load_transcript
from microcompact.tokens import TokenCounter, make_text_counter

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
COUNTER = TokenCounter(make_text_counter("o200k_base"))
FILE_TOOLS = {"Read", "Edit", "Write", "MultiEdit", "NotebookEdit"}

_PATH = re.compile(
    r"[\w.\-]*/[\w.\-/]+\.\w{1,5}\b|\b[\w\-]+\.(?:py|ts|tsx|js|ex|exs|heex|md|json|ya?ml|toml|go|rs|sql|sh)\b"
)
_RESULT = re.compile(r"error|fail|passed|exit code", re.IGNORECASE)


def extractive_summary(text: str) -> str:
    """The distinct lines of ``text`` that name a file or report an error or a result (each cut to 200
    characters), in their order, at most a quarter of the text and 6,000 characters (about 1,500 tokens).
    Over budget, lines naming a file not named before go first, then the rest in order."""
    budget = min(6000, max(600, len(text) // 4))
    lines = list(dict.fromkeys(line.strip()[:200] for line in text.splitlines()))
    new_path: list[int] = []
    other: list[int] = []
    named: set[str] = set()
    for i, line in enumerate(lines):
        paths = set(_PATH.findall(line))
        if paths - named:
            named |= paths
            new_path.append(i)
        elif paths or _RESULT.search(line):
            other.append(i)
    chosen: list[int] = []
    used = 0
    for i in new_path + other:
        if used + len(lines[i]) + 3 <= budget:
            chosen.append(i)
            used += len(lines[i]) + 3
    kept = [f"- {lines[i]}" for i in sorted(chosen)]
    return "### Summary\n" + ("\n".join(kept) if kept else "- (nothing notable)")


class ExtractiveChatModel(BaseChatModel):
    """A deterministic chat model for summaries: records each call's input size, answers extractively."""

    calls: int = 0
    largest_input: int = 0

    @property
    def _llm_type(self) -> str:
        return "extractive-bench"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        text = "\n".join(m.text for m in messages)
        self.calls += 1
        self.largest_input = max(self.largest_input, COUNTER.count_text(text))
        reply = AIMessage(content=extractive_summary(text))
        return ChatResult(generations=[ChatGeneration(message=reply)])


@dataclass
class Measure:
    """What one method sent the model over one session."""

    requests: int = 0
    peak: int = 0
    pair_errors: int = 0
    last: list[Message] = field(default_factory=list)

    def sent(self, messages: list[AnyMessage]) -> None:
        request = [to_openai(m) for m in messages]
        self.requests += 1
        self.peak = max(self.peak, sum(COUNTER.count_message(m) for m in request))
        self.pair_errors += len(tool_pairing_errors(request))
        self.last = request


Step = Callable[[list[AnyMessage]], list[AnyMessage]]  # the agent's full history -> what the model gets


@dataclass
class Method:
    """One method set up for one session: what the model gets, and how often it replaced history."""

    step: Step
    compactions: Callable[[], int]


def microcompact_step(model: ExtractiveChatModel, window: int) -> Method:
    middleware = MicroCompactMiddleware(model, context_length=window)
    captured: list[list[AnyMessage]] = []

    def handler(request: ModelRequest) -> Any:
        captured.append(request.messages)
        return None

    def step(history: list[AnyMessage]) -> list[AnyMessage]:
        middleware.wrap_model_call(ModelRequest(model=model, messages=history, state={"messages": history}), handler)
        return captured.pop()

    def compactions() -> int:
        sessions = middleware.compactor.router.sessions()
        return sum(s.micro.state.passes_total + s.batch.compactions for s in sessions)

    return Method(step, compactions)


def summarization_middleware_step(model: ExtractiveChatModel, window: int) -> Method:
    middleware = SummarizationMiddleware(model, trigger=("tokens", int(0.8 * window)))
    state: list[AnyMessage] = []  # the agent's state: the history as the middleware left it
    fed = [0]  # how many history messages the state has taken in
    replaced = [0]

    def step(history: list[AnyMessage]) -> list[AnyMessage]:
        state.extend(history[fed[0] :])
        fed[0] = len(history)
        update = middleware.before_model({"messages": state}, None)  # type: ignore[arg-type]
        if update:
            state[:] = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
            replaced[0] += 1
        return list(state)

    return Method(step, lambda: replaced[0])


def langmem_step(model: ExtractiveChatModel, window: int) -> Method:
    running: list[RunningSummary | None] = [None]
    summaries: list[str] = []

    def step(history: list[AnyMessage]) -> list[AnyMessage]:
        result = summarize_messages(
            history,
            running_summary=running[0],
            model=model,
            max_tokens=window // 2,
            max_tokens_before_summary=int(0.8 * window),
        )
        running[0] = result.running_summary
        if running[0] is not None and (not summaries or summaries[-1] != running[0].summary):
            summaries.append(running[0].summary)
        return result.messages

    return Method(step, lambda: len(summaries))


METHODS: dict[str, Callable[[ExtractiveChatModel, int], Method]] = {
    "microcompact": microcompact_step,
    "SummarizationMiddleware": summarization_middleware_step,
    "LangMem": langmem_step,
}


def session_prefix(name: str) -> list[Message]:
    """The session's messages before Claude Code compacted it (``None`` values dropped)."""
    directory = normalized_dir()
    meta = json.loads((directory / f"{name}.meta.json").read_text(encoding="utf-8"))
    messages = load_transcript(directory / f"{name}.jsonl")[: meta["compact_summary_indices"][0]]
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def touched_files(messages: list[Message]) -> set[str]:
    """Paths the session read or edited (file tools' ``file_path`` / ``notebook_path`` arguments)."""
    paths: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or []:
            if call["function"]["name"] in FILE_TOOLS:
                args = json.loads(call["function"]["arguments"] or "{}")
                path = args.get("file_path") or args.get("notebook_path")
                if path:
                    paths.add(path)
    return paths


def run_one(name: str, method: str, window: int) -> dict[str, Any]:
    prefix = session_prefix(name)
    model = ExtractiveChatModel()
    setup = METHODS[method](model, window)
    measure = Measure()
    history: list[AnyMessage] = []
    for i, message in enumerate(prefix):
        if message["role"] == "assistant":
            measure.sent(setup.step(list(history)))
        converted = from_openai(message)
        converted.id = f"m{i}"
        history.append(converted)
    users = [m["content"] for m in prefix if m["role"] == "user"]
    last_users = [m.get("content") for m in measure.last if m.get("role") == "user"]
    text = "\n".join(json.dumps(m, ensure_ascii=False) for m in measure.last)
    files = touched_files(prefix)
    return {
        "session": name,
        "method": method,
        "requests": measure.requests,
        "compactions": setup.compactions(),
        "calls": model.calls,
        "max_in": model.largest_input,
        "peak": measure.peak,
        "window": window,
        "users_verbatim": sum(1 for u in users if u in last_users),
        "users": len(users),
        "pair_errors": measure.pair_errors,
        "files_named": sum(1 for f in files if f in text or Path(f).name in text),
        "files": len(files),
    }


def normalized_dir() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.paths import NORMALIZED

    return NORMALIZED


def table(rows: list[dict[str, Any]]) -> str:
    head = ["session", "method", "compactions", "calls", "max in", "peak", "peak % window", "users verbatim"]
    head += ["pair errs", "files named"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for r in rows:
        lines.append(
            f"| {r['session']} | {r['method']} | {r['compactions']} | {r['calls']} | {r['max_in']:,} | {r['peak']:,} | "
            f"{100 * r['peak'] / r['window']:.1f} | {r['users_verbatim']}/{r['users']} | {r['pair_errors']} | "
            f"{r['files_named']}/{r['files']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=int, default=64_000, help="the model's context window in tokens")
    parser.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    args = parser.parse_args()
    # LangMem warns on every call that it could not trim its summarizer input; the table says how large it was.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="langmem")
    rows = [run_one(name, method, args.window) for name in SESSIONS for method in METHODS]
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"window {args.window:,} tokens\n")
        print(table(rows))


if __name__ == "__main__":
    main()
