"""The proxy's recall lines: each reply that used what a tool showed is measured against the prompt the
proxy forwarded for it, and the counts agree with ``recall.py`` run afterwards on the same prompts (chat and
Anthropic routes, folds included); the lines hold counts, never an identifier."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from microcompact.recall import reply_indexes, reply_targets, request_recall
from microcompact.recall.watch import recall_record
from microcompact.router import SessionRouter
from microcompact.server.anthropic_format import AnthropicFormat
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.provider import Provider
from microcompact.server.run import proxy_config
from microcompact.store import open_store
from microcompact.telemetry import telemetry_log
from upstream.replay import anthropic_history

Message = dict[str, Any]
STEPS = 26


def session(steps: int = STEPS) -> list[Message]:
    """A tool loop: step n prints ``value_of_step_n``; its reply uses the previous step's value and, from
    step 16 on, the one 15 steps back (long folded away unless something kept it)."""
    messages: list[Message] = [{"role": "user", "content": "run the steps"}]
    for n in range(1, steps + 1):
        back = f" and value_of_step_{n - 10}" if n > 10 else ""
        used = f"using value_of_step_{n - 1}{back}; " if n > 1 else ""
        arguments = json.dumps({"command": f"run {n}"})
        call = {"id": f"toolu_{n}", "type": "function", "function": {"name": "sh", "arguments": arguments}}
        messages.append({"role": "assistant", "content": f"{used}step {n}", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"toolu_{n}", "content": f"value_of_step_{n} " + "x " * 700})
    messages.append({"role": "assistant", "content": f"done with value_of_step_{steps}"})
    return messages


def wire(provider: Provider, history: list[Message]) -> list[Message]:
    """The history as the client sends it on ``provider``'s route."""
    return history if provider.name == "openai" else anthropic_history(history)[1]


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged() -> Iterator[Lines]:
    handler = Lines()
    telemetry_log.addHandler(handler)
    level = telemetry_log.level
    telemetry_log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        telemetry_log.removeHandler(handler)
        telemetry_log.setLevel(level)


def drive(tmp_path: Path, provider: Provider, messages: list[Message]) -> tuple[dict[int, list[Message]], str]:
    """Each request of ``messages`` through the proxy's engine side, its follow-up after it: what was forwarded
    at each reply (as session messages), and the session's id."""
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, 8_000), store=store)
    compaction = Compaction(router, Metrics())
    body = {"model": "m", "max_tokens": 100} if provider.name == "anthropic" else {"model": "m"}
    forwarded: dict[int, list[Message]] = {}
    for i in reply_indexes(messages):
        prepared = compaction.prepare(provider, body, "k", wire(provider, messages[:i]))
        assert prepared.session is not None and prepared.degraded in (None, "view-invalid")
        sid = prepared.session.session_id
        forwarded[i] = [part for m in prepared.messages for part in provider.convert(m)]
        compaction.answered(prepared, None)
        compaction.follow_up("k")
    router.close()
    store.close()
    return forwarded, sid


def test_a_reply_using_a_tools_value_is_one_line(tmp_path: Path, logged: Lines) -> None:
    messages = session(3)
    _, sid = drive(tmp_path, OpenAIFormat(), messages)
    lines = [r for r in map(recall_record, logged.lines) if r is not None]
    # steps 2 and 3 quote the step before; the final answer is never measured (no request brings it)
    assert [(r.session_id, r.targets, r.present) for r in lines] == [(sid, 1, 1), (sid, 1, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("provider", [OpenAIFormat(), AnthropicFormat()], ids=["chat", "anthropic"])
def test_the_proxys_recall_is_recall_py_on_what_it_forwarded(tmp_path: Path, logged: Lines, provider: Provider):
    messages = session()
    forwarded, _ = drive(tmp_path, provider, messages)
    assert any("micro compaction telemetry" in line for line in logged.lines), "the loop never folded"
    lines = [r for r in map(recall_record, logged.lines) if r is not None]
    targets = reply_targets(messages)
    expected = [request_recall(i, targets[i], forwarded[i]) for i in reply_indexes(messages)[:-1] if targets[i]]
    assert [(r.targets, r.present) for r in lines] == [(len(e.targets), e.present) for e in expected]
    assert sum(r.present for r in lines) < sum(r.targets for r in lines), "something was folded away"
    assert len({r.session_id for r in lines}) == 1
    recall_text = "\n".join(line for line in logged.lines if "recall telemetry" in line)
    assert "value_of_step" not in recall_text, "counts only"


class Refusing(OpenAIFormat):
    """A format whose structural check refuses every compacted view: the client's messages go up whole."""

    def view_problem(self, messages: list[dict[str, object]]) -> str | None:
        return "messages.1: broken on purpose"


@pytest.mark.slow
def test_what_went_up_whole_held_every_target(tmp_path: Path, logged: Lines) -> None:
    """The session the proxy keeps folds all the same (the agreement test above loses values on this very
    loop), but what went up was the client's own list."""
    messages = session()
    drive(tmp_path, Refusing(), messages)
    assert any("micro compaction telemetry" in line for line in logged.lines), "the session folded all the same"
    lines = [r for r in map(recall_record, logged.lines) if r is not None]
    assert len(lines) == STEPS - 1 and all(r.present == r.targets for r in lines)
