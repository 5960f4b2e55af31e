"""Summarizer calls and their faults against the local chat-completions server (``chat_server`` fixture),
through the real ``OpenAISummarizer``, with an injected clock so cooldowns cost no time: backoff, auth and
quota, rate limits, rejected summaries, the fallback, redaction, the focus.

Split by phase out of the former tests/test_batch.py."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from microcompact.batch import (
    BatchCompactor,
)
from microcompact.messages import (
    marker_body,
    marker_count,
    marker_kind,
)
from microcompact.session import Session
from microcompact.summarizers import BATCH_PROMPT, OpenAISummarizer
from microcompact.tokens import Ledger
from support.batch_helpers import (
    KEY_ENV,
    OPENAI_KEY,
    Checked,
    FakeClock,
    build,
    config,
    counter,
    iteration,
    opening,
    turn,
)
from support.chat_server import ChatServer

# --------------------------------------------------------------------------- faults, over real HTTP


def openai(server: ChatServer, timeout: float = 2.0) -> OpenAISummarizer:
    return OpenAISummarizer("summarizer-small", base_url=server.base_url, api_key_env=KEY_ENV, timeout=timeout)


def over_threshold(extra_turns: int = 0) -> list[dict[str, Any]]:
    # ~12K tokens: over the 10K threshold, under the 15K risk line; outputs too small to prune
    return build(19 + extra_turns, iterations=3, size=150)


def compactor(server: ChatServer, clock: FakeClock, timeout: float = 2.0, **cfg: Any) -> BatchCompactor:
    return BatchCompactor(config(**cfg), openai(server, timeout), counter(), clock=clock)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "local-test-key")


def test_model_summary_over_http(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    ledger = Ledger(counter(), over_threshold())
    Checked(b, b.config)
    result = b.compact(ledger)
    assert result.outcome == "compacted" and result.record["summarizer"] == "summarizer-small"
    # one request per run of work between kept user messages, the oldest beyond batch_max_calls extractive
    assert len(chat_server.requests) == result.record["summarizer_calls"] == b.cfg.batch_max_calls
    assert result.record["runs"] == result.record["summarizer_calls"] + result.record["capped_runs"]
    for request in chat_server.requests:
        assert request["messages"][0]["content"] == BATCH_PROMPT
        assert "PREVIOUS SUMMARY:\n(none)" in request["messages"][1]["content"]
    assert ledger.total < b.config.threshold_tokens()


def test_500_leaves_the_transcript_and_backs_off(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.add_faults(500)
    first = b.compact(ledger)
    assert first.outcome == "summarize_failed" and first.record["error"] == "SummarizerUnavailable"
    assert ledger.messages == before and len(chat_server.requests) == 1
    clock.advance(20)
    assert b.compact(ledger).outcome == "cooldown" and len(chat_server.requests) == 1
    clock.advance(11)  # 30 s after the failure
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


def test_timeouts_back_off_longer_each_time(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock, timeout=0.5)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    cooldowns = []
    for _ in range(3):
        chat_server.add_faults("hang")
        result = b.compact(ledger)
        assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerTimeout"
        cooldowns.append(b.calls.backoff.until - clock())
        clock.advance(cooldowns[-1] - 1)
        assert b.compact(ledger).outcome == "cooldown"  # not yet
        clock.advance(1)
    assert cooldowns == [30.0, 60.0, 120.0]
    assert len(chat_server.requests) == 3
    assert b.compact(ledger).outcome == "compacted"
    assert b.calls.backoff.timeouts == 0  # success resets the growth


def test_malformed_output_backs_off_shorter(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    chat_server.add_faults("malformed")
    result = b.compact(ledger)
    assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerBadOutput"
    malformed_cooldown = b.calls.backoff.until - clock()
    assert 0 < malformed_cooldown < 30.0  # shorter than after a server error or a timeout
    clock.advance(malformed_cooldown)
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


@pytest.mark.parametrize("fault", [401, "quota"])
def test_auth_and_quota_errors_are_never_retried(
    chat_server: ChatServer, key: None, fault: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.add_faults(fault)
    outcomes = []
    for _ in range(5):
        outcomes.append(b.compact(ledger).outcome)
        clock.advance(3_600)
    assert outcomes == ["auth_failed"] * 5
    assert len(chat_server.requests) == 1, "retried after an authentication/quota error"
    assert ledger.messages == before
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "microcompact"]
    assert errors and KEY_ENV in errors[0]
    # near the limit the session goes on with the deterministic summary, still without asking the server
    ledger = Ledger(counter(), over_threshold(extra_turns=6))
    result = b.compact(ledger, prompt_tokens=16_000)
    assert result.outcome == "fallback" and result.record["summarizer"] == "extractive"
    assert len(chat_server.requests) == 1


def test_rate_limit_cools_down_then_retries(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    ledger = Ledger(counter(), over_threshold())
    chat_server.add_faults(429)
    assert b.compact(ledger).outcome == "summarize_failed"
    clock.advance(59)
    assert b.compact(ledger).outcome == "cooldown" and len(chat_server.requests) == 1
    clock.advance(1)
    again = b.compact(ledger)
    assert again.outcome == "compacted" and len(chat_server.requests) == 1 + again.record["summarizer_calls"]


def test_summary_longer_than_its_input_is_rejected(chat_server: ChatServer, key: None) -> None:
    clock = FakeClock()
    b = compactor(chat_server, clock)
    Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold())
    before = list(ledger.messages)
    chat_server.responder = lambda body: "### Completed actions\n" + "- a very long bullet\n" * 10_000
    result = b.compact(ledger)
    assert result.outcome == "summarize_failed" and result.record["error"] == "SummarizerBadOutput"
    assert ledger.messages == before and marker_count(ledger.messages, "batch") == 0


def test_fallback_near_the_limit(chat_server: ChatServer, key: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    clock = FakeClock()
    b = compactor(chat_server, clock)
    checked = Checked(b, b.config)
    ledger = Ledger(counter(), over_threshold(extra_turns=6))
    assert ledger.total >= 15_000  # halfway between the 10K threshold and the 20K limit
    chat_server.add_faults(500)
    result = b.compact(ledger)
    assert result.outcome == "fallback" and result.record["summarizer"] == "extractive"
    assert result.record["error"] == "SummarizerUnavailable" and len(chat_server.requests) == 1
    assert ledger.total < b.config.threshold_tokens()
    body = marker_body(next(m for m in ledger.messages if marker_kind(m) == "batch"))
    assert "### " in body and "make step" in body  # facts of the middle, extracted
    assert any("deterministic extractive summary" in r.getMessage() for r in caplog.records)
    # cooling down and at risk again: the fallback without asking the server
    ledger.splice(
        len(ledger.messages), len(ledger.messages), [m for t in range(6) for m in turn(30 + t, iterations=3, size=150)]
    )
    again = b.compact(ledger, prompt_tokens=15_500)
    assert again.outcome == "fallback" and len(chat_server.requests) == 1
    assert checked.outcomes() == ["fallback", "fallback"]
    # below the risk line a cooling summarizer changes nothing
    ledger2 = Ledger(counter(), over_threshold())
    assert b.compact(ledger2).outcome == "cooldown"


def test_secrets_in_the_middle_never_reach_the_server(chat_server: ChatServer, key: None) -> None:
    msgs = [*opening(), {"role": "user", "content": "deploy it"}]
    msgs += iteration(
        "s1",
        f"export OPENAI_API_KEY={OPENAI_KEY}\ndeployed, password=correcthorse42\nexit code 0",
        command=f"OPENAI_API_KEY={OPENAI_KEY} ./deploy.sh --password hunter2hunter2",
    )
    msgs += [
        {"role": "assistant", "content": f"Used token ghp_{'A1b2C3d4E5f6G7h8I9j0' * 2} to push."},
        {"role": "user", "content": "my db url is postgres://admin:s3cretPassw0rd@db:5432/app"},
    ]
    msgs += [m for n in range(14) for m in turn(n, size=200)]
    clock = FakeClock()
    b = compactor(chat_server, clock, batch_user_floor_ratio=0.0001)  # fold the user message too
    Checked(b, b.config)
    ledger = Ledger(counter(), msgs)
    result = b.compact(ledger, force=True, focus=f"the key {OPENAI_KEY}")
    assert result.outcome == "user_floor_exceeded"
    sent = json.dumps(chat_server.requests)
    assert "deploy.sh" in sent and "TOOL RESULT [s1]" in sent
    for secret in (OPENAI_KEY, "correcthorse42", "hunter2hunter2", "A1b2C3d4E5f6G7h8I9j0", "s3cretPassw0rd"):
        assert secret not in sent, secret


def test_focus_reaches_the_request_body(chat_server: ChatServer, key: None) -> None:
    s = Session(config(), openai(chat_server), counter=counter(), messages=build(10, size=150))
    result = s.compact(focus="the flaky auth test")
    assert result.outcome == "compacted" and result.record["reason"] == "on_demand"
    assert len(chat_server.requests) == result.record["summarizer_calls"] >= 2  # one per run of work
    for request in chat_server.requests:
        assert "FOCUS: the flaky auth test" in request["messages"][1]["content"]
        assert request["messages"][0]["content"] == BATCH_PROMPT
