"""FallbackChain: the first summarizer that succeeds wins; failing links are logged, rested or dropped.

The model links are real SDK clients talking to local servers that fail on cue; the last link is the
offline extractive summarizer.
"""

from __future__ import annotations

import logging

import pytest

from microcompact import FallbackChain, Session, summarizer_from
from microcompact.config import parse_config
from microcompact.messages import marker_body, marker_kind
from microcompact.summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummarizerAuthError,
    SummarizerUnavailable,
)
from microcompact.tokens import EstimateCounter, TokenCounter
from support.anthropic_server import AnthropicServer
from support.chat_server import ChatServer
from support.lazy_sdk import lazy

anthropic = lazy("anthropic")
openai = lazy("openai")

CANARY = "zebra-canary-7731"  # exchange content that must never reach a log line
EXCHANGE = [
    {
        "role": "assistant",
        "content": f"Reading {CANARY}.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": '{"path": "src/app.py"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": f"def main(): pass  # {CANARY}"},
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def model(server: ChatServer, name: str = "cheap-model") -> Summarizer:
    return summarizer_from(openai.OpenAI(api_key="k", base_url=server.base_url), model=name)


def chain_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Summarizer chain:")]


def test_the_first_link_that_answers_wins(chat_server: ChatServer) -> None:
    chain = FallbackChain(model(chat_server), ExtractiveSummarizer())
    assert chain.name == "cheap-model>extractive"
    assert chain.merge("", EXCHANGE).startswith("### Goal\nnone\n### Work done\nTest summary")
    assert chain.last_used == "cheap-model"


def test_a_failing_model_falls_back_with_one_line_and_rests(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="microcompact")
    clock = Clock()
    chain = FallbackChain(model(chat_server), ExtractiveSummarizer(), cooldown=30, clock=clock)
    chat_server.add_faults(500)
    out = chain.merge("", EXCHANGE)
    assert "src/app.py" in out and chain.last_used == "extractive"
    assert chain_logs(caplog) == [
        "Summarizer chain: cheap-model failed on merge (SummarizerUnavailable); trying extractive"
    ]
    assert not any(CANARY in r.getMessage() for r in caplog.records)
    chain.merge("", EXCHANGE)  # resting: the endpoint is not asked again within the cooldown
    assert len(chat_server.requests) == 1 and chain.last_used == "extractive"
    clock.now += 31
    assert chain.merge("", EXCHANGE).startswith("### Goal") and chain.last_used == "cheap-model"
    assert len(chat_server.requests) == 2


def test_a_timeout_falls_through_to_a_second_model(chat_server: ChatServer) -> None:
    with AnthropicServer() as second:
        fast = summarizer_from(anthropic.Anthropic(api_key="k", base_url=second.base_url), model="claude-haiku")
        slow = summarizer_from(openai.OpenAI(api_key="k", base_url=chat_server.base_url), model="m", timeout=0.3)
        chat_server.add_faults("hang")
        chain = FallbackChain(slow, fast, ExtractiveSummarizer())
        assert "Anthropic test summary" in chain.batch("", EXCHANGE)
        assert chain.last_used == "claude-haiku"


def test_a_refused_key_is_never_tried_again(chat_server: ChatServer) -> None:
    clock = Clock()
    chain = FallbackChain(model(chat_server), ExtractiveSummarizer(), clock=clock)
    chat_server.add_faults(401)
    chain.merge("", EXCHANGE)
    clock.now += 10_000
    chain.merge("", EXCHANGE)
    chain.condense("### Files\n- src/app.py — read", 100)
    assert len(chat_server.requests) == 1 and chain.last_used == "extractive"


def test_bad_output_does_not_rest_the_link(chat_server: ChatServer) -> None:
    chain = FallbackChain(model(chat_server), ExtractiveSummarizer(), clock=Clock())
    chat_server.add_faults("empty")
    chain.merge("", EXCHANGE)
    assert chain.last_used == "extractive"
    chain.merge("", EXCHANGE)
    assert chain.last_used == "cheap-model" and len(chat_server.requests) == 2


def test_when_every_link_fails_the_last_error_is_raised(chat_server: ChatServer) -> None:
    with ChatServer() as other:
        clock = Clock()
        chain = FallbackChain(model(chat_server, "a"), model(other, "b"), clock=clock)
        chat_server.add_faults(500)
        other.add_faults(429)
        with pytest.raises(Exception) as caught:
            chain.merge("", EXCHANGE)
        assert type(caught.value).__name__ == "SummarizerRateLimited"
        with pytest.raises(SummarizerUnavailable, match="cooling down"):  # both resting: nothing is asked
            chain.merge("", EXCHANGE)
        assert len(chat_server.requests) == len(other.requests) == 1


def test_an_auth_error_is_raised_only_when_every_link_refused(chat_server: ChatServer) -> None:
    with ChatServer() as other:
        chain = FallbackChain(model(chat_server, "a"), model(other, "b"), clock=Clock())
        chat_server.add_faults(401)
        other.add_faults(500)
        with pytest.raises(SummarizerUnavailable):  # "a" refused, "b" only resting: the engine may retry later
            chain.merge("", EXCHANGE)
        chain2 = FallbackChain(model(chat_server, "a"), model(other, "b"), clock=Clock())
        chat_server.add_faults(401)
        other.add_faults("quota")
        with pytest.raises(SummarizerAuthError):
            chain2.merge("", EXCHANGE)


def test_a_session_reports_a_failed_chain_as_any_failed_summarizer(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="microcompact")
    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
        }
    )
    with ChatServer() as other:
        chain = FallbackChain(model(chat_server, "a"), model(other, "b"), cooldown=0)
        session = Session(config, chain, counter=TokenCounter(EstimateCounter()))
        session.append({"role": "system", "content": "You are a coding agent."})
        outcomes = []
        for n in range(5):
            if n == 3:
                chat_server.add_faults(500)
                other.add_faults(500)
            session.append({"role": "user", "content": f"request {n}"})
            session.append({"role": "assistant", "content": f"Working on {n} ({CANARY}): " + "detail " * 700})
            outcomes += [(r.outcome, r.record.get("error"), r.record["aux_model"]) for r in session.finalize_turn()]
        assert outcomes == [
            ("absorbed", None, "a>b"),
            ("summarize_failed", "SummarizerUnavailable", "a>b"),
            ("absorbed", None, "a>b"),
        ]
        (marker,) = [m for m in session.transcript if marker_kind(m) == "micro"]
        assert marker_body(marker).startswith("### Goal")
        assert len(chain_logs(caplog)) == 2 and not any(CANARY in r.getMessage() for r in caplog.records)


def test_a_chain_needs_a_link() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FallbackChain()
