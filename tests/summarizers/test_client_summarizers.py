"""summarizer_from: the caller's own OpenAI or Anthropic SDK client (sync and async) or a plain callable.

The real SDK clients talk HTTP to scripted servers on 127.0.0.1 (``chat_server.py`` for chat completions,
``anthropic_server.py`` for the Messages API); faults come from the servers, never from mocks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from microcompact import Session, summarizer_from
from microcompact.config import parse_config
from microcompact.messages import marker_body, marker_kind
from microcompact.redact import REDACTED
from microcompact.summarizers import (
    BATCH_PROMPT,
    MERGE_PROMPT,
    ExtractiveSummarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerError,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
    prompts,
)
from microcompact.tokens import EstimateCounter, TokenCounter
from support.anthropic_server import AnthropicServer
from support.chat_server import ChatServer
from support.lazy_sdk import lazy

anthropic = lazy("anthropic")
openai = lazy("openai")

SECRET = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ"
EXCHANGE = [
    {"role": "assistant", "content": f"Exporting OPENAI_API_KEY={SECRET} and running the tests."},
    {"role": "tool", "tool_call_id": "c1", "content": "3 passed"},
]


@pytest.fixture
def anthropic_server() -> Any:
    with AnthropicServer() as server:
        yield server


# The SDKs load at the first test that builds a client, not at collection (support.lazy_sdk).
SYNC_AND_ASYNC = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])


def openai_client(server: ChatServer, asynchronous: bool = False, **kw: Any) -> Any:
    cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return cls(api_key="test-key", base_url=server.base_url, **kw)


def anthropic_client(server: AnthropicServer, asynchronous: bool = False, **kw: Any) -> Any:
    cls = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
    return cls(api_key="test-key", base_url=server.base_url, **kw)


# --------------------------------------------------------------------------- OpenAI clients


@SYNC_AND_ASYNC
def test_an_openai_client_summarizes_with_the_prompts_and_redacts_what_it_sends(
    chat_server: ChatServer, asynchronous: bool
) -> None:
    summarizer = summarizer_from(openai_client(chat_server, asynchronous), model="cheap-model")
    out = summarizer.merge("", EXCHANGE)
    assert out.startswith("### Goal\nnone\n### Work done\nTest summary of a")
    body = chat_server.requests[-1]
    assert body["model"] == "cheap-model" and body["max_tokens"] == 1024 and "temperature" not in body
    assert body["messages"][0] == {"role": "system", "content": MERGE_PROMPT}
    assert "3 passed" in body["messages"][1]["content"]
    assert SECRET not in json.dumps(body) and REDACTED in body["messages"][1]["content"]
    summarizer.condense("### Files\n- a.py — read", 50)
    summarizer.batch("", EXCHANGE, focus="tests")
    condense_prompt = prompts.condense_system(prompts.condense_words(50))  # the stated length fits 50 tokens
    assert [r["messages"][0]["content"] for r in chat_server.requests[-2:]] == [condense_prompt, BATCH_PROMPT]
    assert summarizer.name == "cheap-model"


def test_options_reach_the_sdk_call_and_the_output_is_redacted(chat_server: ChatServer) -> None:
    chat_server.responder = lambda body: f"### Commands and results\n- exported {SECRET}"
    summarizer = summarizer_from(
        openai_client(chat_server), model="o-mini", temperature=0.2, options={"max_completion_tokens": 300}
    )
    out = summarizer.merge("", EXCHANGE)
    assert SECRET not in out and REDACTED in out
    body = chat_server.requests[-1]
    assert body["temperature"] == 0.2 and body["max_completion_tokens"] == 300 and "max_tokens" not in body


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (401, SummarizerAuthError),
        ("quota", SummarizerAuthError),
        (429, SummarizerRateLimited),
        (500, SummarizerUnavailable),
        ("malformed", SummarizerBadOutput),
        ("empty", SummarizerBadOutput),
    ],
)
@SYNC_AND_ASYNC
def test_openai_failures_become_summarizer_errors_without_sdk_retries(
    chat_server: ChatServer, asynchronous: bool, fault: Any, error: type
) -> None:
    summarizer = summarizer_from(openai_client(chat_server, asynchronous), model="m")
    chat_server.add_faults(fault)
    with pytest.raises(error) as caught:
        summarizer.merge("", EXCHANGE)
    assert len(chat_server.requests) == 1  # the client's own retries are off: the engine owns retrying
    assert "Rate limit reached" not in str(caught.value) and "Incorrect API key" not in str(caught.value)


def test_a_hanging_openai_endpoint_times_out(chat_server: ChatServer) -> None:
    for asynchronous in (False, True):
        chat_server.add_faults("hang")
        with pytest.raises(SummarizerTimeout):
            summarizer_from(openai_client(chat_server, asynchronous), model="m", timeout=0.3).merge("", EXCHANGE)


def test_the_callers_client_is_left_as_it_was(chat_server: ChatServer) -> None:
    client = openai_client(chat_server)
    summarizer_from(client, model="m", timeout=3)
    assert client.max_retries == openai.DEFAULT_MAX_RETRIES


# --------------------------------------------------------------------------- Anthropic clients


@SYNC_AND_ASYNC
def test_an_anthropic_client_summarizes_from_the_text_blocks(
    anthropic_server: AnthropicServer, asynchronous: bool
) -> None:
    summarizer = summarizer_from(anthropic_client(anthropic_server, asynchronous), model="claude-haiku")
    out = summarizer.merge("", EXCHANGE)
    assert out.startswith("### Summary\n- Anthropic test summary of a")  # the thinking block is not part of it
    body = anthropic_server.requests[-1]
    assert body["model"] == "claude-haiku" and body["system"] == MERGE_PROMPT and body["max_tokens"] == 1024
    assert body["messages"][0]["role"] == "user" and "3 passed" in body["messages"][0]["content"]
    assert SECRET not in json.dumps(body)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (401, SummarizerAuthError),
        ("credit", SummarizerAuthError),
        (429, SummarizerRateLimited),
        (500, SummarizerUnavailable),
        (529, SummarizerUnavailable),
        ("max_tokens", SummarizerBadOutput),
        ("thinking_only", SummarizerBadOutput),
    ],
)
@SYNC_AND_ASYNC
def test_anthropic_failures_become_summarizer_errors_without_sdk_retries(
    anthropic_server: AnthropicServer, asynchronous: bool, fault: Any, error: type
) -> None:
    summarizer = summarizer_from(anthropic_client(anthropic_server, asynchronous), model="claude-haiku")
    anthropic_server.add_faults(fault)
    with pytest.raises(error):
        summarizer.merge("", EXCHANGE)
    assert len(anthropic_server.requests) == 1


def test_a_hanging_anthropic_endpoint_times_out(anthropic_server: AnthropicServer) -> None:
    anthropic_server.add_faults("hang")
    with pytest.raises(SummarizerTimeout):
        summarizer_from(anthropic_client(anthropic_server, asynchronous=True), model="c", timeout=0.3).merge(
            "", EXCHANGE
        )


# --------------------------------------------------------------------------- callables


def test_a_plain_callable_gets_the_whole_prompt_as_one_text() -> None:
    prompts: list[str] = []

    def summarize(prompt: str) -> str:
        prompts.append(prompt)
        return "```markdown\n### Commands and results\n- tests: 3 passed\n```"

    summarizer = summarizer_from(summarize)
    assert summarizer.name == "summarize"
    assert summarizer.merge("", EXCHANGE) == "### Commands and results\n- tests: 3 passed"  # the fence is removed
    assert prompts[0].startswith(MERGE_PROMPT + "\n\n") and "3 passed" in prompts[0] and SECRET not in prompts[0]


def test_an_async_callable_runs_on_a_loop_and_its_failures_say_no_content() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def summarize(prompt: str) -> str:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        if len(loops) > 1:
            raise ValueError(f"the model choked on: {prompt[:40]}")
        return "### Decisions\n- run the tests"

    summarizer = summarizer_from(summarize, model="my-async-model")
    assert summarizer.merge("", EXCHANGE) == "### Decisions\n- run the tests"
    with pytest.raises(SummarizerError) as caught:
        summarizer.condense("### Decisions\n- run the tests", 10)
    assert "choked" not in str(caught.value) and "ValueError" in str(caught.value)
    assert loops[0] is loops[1]  # one private loop for every call: an async client's connections stay on it


@pytest.mark.parametrize("answer", [None, 42, "", "<think>only reasoning</think>"])
def test_a_callable_answer_that_is_no_summary_is_refused(answer: Any) -> None:
    with pytest.raises(SummarizerBadOutput):
        summarizer_from(lambda prompt: answer, model="m").merge("", EXCHANGE)


def test_an_async_summarizer_called_on_its_own_loop_thread_fails_instead_of_hanging() -> None:
    async def summarize(prompt: str) -> str:
        return "### Decisions\n- x"

    summarizer = summarizer_from(summarize)

    async def main() -> None:
        summarizer.bind_loop(asyncio.get_running_loop())  # type: ignore[attr-defined]
        with pytest.raises(SummarizerError, match="own event loop"):
            summarizer.merge("", EXCHANGE)

    asyncio.run(main())


def test_what_summarizer_from_refuses() -> None:
    with pytest.raises(ValueError, match="model is required"):
        summarizer_from(openai.OpenAI(api_key="k"))
    with pytest.raises(TypeError, match="expected an OpenAI or Anthropic client"):
        summarizer_from("gpt-4o-mini")
    extractive = ExtractiveSummarizer()
    assert summarizer_from(extractive) is extractive


# --------------------------------------------------------------------------- in a Session


def test_a_session_compacts_with_the_callers_anthropic_client(anthropic_server: AnthropicServer) -> None:
    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
        }
    )
    summarizer = summarizer_from(anthropic_client(anthropic_server), model="claude-haiku")
    session = Session(config, summarizer, counter=TokenCounter(EstimateCounter()))
    session.append({"role": "system", "content": "You are a coding agent."})
    for n in range(4):
        session.append({"role": "user", "content": f"request {n}"})
        session.append({"role": "assistant", "content": f"Working on request {n}. " + "detail " * 700})
        session.finalize_turn()
    markers = [m for m in session.transcript if marker_kind(m) == "micro"]
    assert len(markers) == 1 and "Anthropic test summary" in marker_body(markers[0])
    assert anthropic_server.requests and all(r["system"] == MERGE_PROMPT for r in anthropic_server.requests)
    assert [m["content"] for m in session.messages if m["role"] == "user"] == [f"request {n}" for n in range(4)]
