"""``summarizer: upstream`` through ``serve`` over real HTTP: the summary request is the client's last request
as it went up plus one instruction (so the scripted upstream's cache reads it), billed at the client's
model's prices, sent with that conversation's credential to its own upstream only; a refusal, a tool call,
an error or an answer the checks reject falls back to the extractive summary."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from microcompact.messages import MARKER_PREFIX
from microcompact.server.run import proxy_config
from support.proxy_server import ProxyServer
from upstream import Fault, RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.responses_server import ResponsesUpstream
from upstream.usage import PrefixCache

EPHEMERAL = {"type": "ephemeral"}
INSTRUCTION = "[microcompact] This message comes from microcompact"
TOOLS = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object", "properties": {}}}]
OPENAI_TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object", "properties": {}}}}]
STEPS = 30


def conversation(body: dict[str, Any] | None) -> list[Any]:
    """A request's messages (Chat, Messages) or input items (Responses)."""
    body = body or {}
    return list(body.get("messages") or body.get("input") or [])


def is_summary(record: RecordedRequest) -> bool:
    items = conversation(record.body)
    return bool(items) and INSTRUCTION in json.dumps(items[-1])


LISTED = re.compile(r"^E(\d+): the assistant turn that begins “Step (\d+)\.”", re.MULTILINE)


def notes(record: RecordedRequest) -> Reply:
    """The notes a model would write on the turns the instruction lists (each its step, in its own words)."""
    asked = conversation(record.body)[-1]
    shown = asked["content"] if isinstance(asked["content"], str) else asked["content"][0]["text"]
    blocks = ["### Goal\nRun the numbered steps."]
    for label, step in LISTED.findall(shown):
        blocks.append(
            f"### E{label}\nWork done: Step {step} ran with the Bash tool.\n"
            f"Findings: step {step} finished cleanly and step {step} printed numbered lines; nothing failed.\n"
            f"Next: run the step after step {step}."
        )
    return text("\n".join(blocks))


def scripted(summary: Any) -> Any:
    """Summary requests get ``summary`` (a Reply or a Fault); the agent's get the next step or a final text."""

    asked: dict[str, int] = {}  # requests so far, by conversation (its first message): the step counter

    def script(record: RecordedRequest) -> Any:
        if is_summary(record):
            return notes(record) if summary is None else summary
        first = json.dumps(conversation(record.body)[:1])
        n = asked[first] = asked.get(first, -1) + 1  # a fold shortens the history: count the requests
        if n >= STEPS:
            return text("done")
        return Reply((Text(f"Step {n}."), ToolCall("Bash", {"command": f"seq {n}"})))

    return script


def output(n: int) -> str:
    return "\n".join(f"{n} line {i} " + "x" * 60 for i in range(120))


def anthropic_loop(
    proxy: ProxyServer, key: str, opening: str = "Run the steps.", tool_seconds: float = 0.0
) -> list[httpx.Response]:
    """An agent loop like Claude Code's: breakpoints on the system prompt and the newest message; each tool
    call takes ``tool_seconds`` (the price schedule plans its folds by the gaps between requests)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": opening}]}]
    answers = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for _ in range(STEPS + 1):
            last = messages[-1]
            marked = {**last, "content": [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]}
            body = {
                "model": "claude-sonnet-4-5",
                "max_tokens": 300,
                "tools": TOOLS,
                "system": [{"type": "text", "text": "system prompt " * 400, "cache_control": EPHEMERAL}],
                "messages": [*messages[:-1], marked],
            }
            headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
            answer = client.post("/v1/messages", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            reply = answer.json()
            messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            if not calls:
                break
            result = {"type": "tool_result", "tool_use_id": calls[0]["id"], "content": output(len(answers))}
            messages.append({"role": "user", "content": [result]})
            proxy.settle()
            time.sleep(tool_seconds)
    return answers


def openai_loop(proxy: ProxyServer, key: str) -> list[httpx.Response]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "system prompt " * 400},
        {"role": "user", "content": "Run the steps."},
    ]
    answers = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for _ in range(STEPS + 1):
            body = {"model": "gpt-5", "max_tokens": 300, "tools": OPENAI_TOOLS, "messages": messages}
            answer = client.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            message = answer.json()["choices"][0]["message"]
            messages = [*messages, {k: v for k, v in message.items() if v is not None}]
            if not message.get("tool_calls"):
                break
            call = message["tool_calls"][0]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output(len(answers))})
            proxy.settle()
    return answers


def serve(upstream: ScriptedUpstream, tmp_path: Path, **config: Any) -> ProxyServer:
    cfg = proxy_config(None, 40_000, "upstream")
    if config:
        cfg = cfg.with_overrides(**config)
    return ProxyServer(upstream.base_url, tmp_path / "s.db", config=cfg)


def preceding(requests: list[RecordedRequest], summary: RecordedRequest) -> RecordedRequest:
    """The client request ``summary`` continues: one of the last two that went up before it (a pass that
    started after one answer may send its request while the client's next one is on its way), whose
    messages are exactly the summary request's but its last."""
    earlier = [r for r in requests if r.number < summary.number and not is_summary(r)][-2:]
    prefix = orjson.dumps(conversation(summary.body)[:-1])
    matching = [r for r in earlier if orjson.dumps(conversation(r.body)) == prefix]
    assert matching, f"summary request {summary.number} continues none of requests {[r.number for r in earlier]}"
    return matching[-1]


def markers(requests: list[RecordedRequest]) -> list[str]:
    sent = [json.dumps(conversation(r.body)) for r in requests if not is_summary(r)]
    return [m for m in sent if MARKER_PREFIX in m]


# ------------------------------------------------------------------ Anthropic


def test_the_summary_rides_the_cache_and_is_billed_as_the_clients_model(tmp_path: Path):
    with ScriptedUpstream(scripted(None), min_cacheable=0) as upstream, serve(upstream, tmp_path) as proxy:
        # An agent's tool takes a moment: a loop that sends its next request the instant the last answer
        # is in looks to the price schedule like a summarizer that cannot keep up, one exchange per fold.
        answers = anthropic_loop(proxy, "sk-ant-one", tool_seconds=0.05)
        proxy.settle()
        bills = dict(proxy.proxy.compaction.bills)
        pricing = proxy.config.cache_pricing("anthropic", "claude-sonnet-4-5")
        (session,) = proxy.router.sessions()
        summarizer = session.summarizer
    sent = upstream.generation_requests()
    summaries = [r for r in sent if is_summary(r)]
    assert summaries, "no summary request went upstream"
    # One request writes the notes of several exchanges: a fold reads the cached prefix once, not per exchange.
    assert summarizer.calls == len(summaries) and summarizer.merged > len(summaries), (
        summarizer.calls,
        summarizer.merged,
    )
    for summary in summaries:
        last = preceding(sent, summary)
        # The conversation exactly as it last went up: system, tools and every message, byte for byte.
        assert orjson.dumps(summary.body["messages"][:-1]) == orjson.dumps(last.body["messages"])
        for key in ("system", "tools", "model"):
            assert orjson.dumps(summary.body[key]) == orjson.dumps(last.body[key])
        assert summary.body["stream"] is False and summary.body["max_tokens"] == proxy.config.summarizer_output_tokens()
        assert "tool_choice" not in summary.body  # not added: a change of it would invalidate the cached messages
        assert summary.headers["x-api-key"] == "sk-ant-one"
        # Read from the cache: everything the previous request left there, nothing written again.
        assert summary.usage["cache_read_input_tokens"] == (
            last.usage["cache_read_input_tokens"] + last.usage["cache_creation_input_tokens"]
        )
        assert summary.usage["cache_creation_input_tokens"] == 0
    # The model's notes are what the markers say.
    assert any("nothing failed" in m for m in markers(sent))
    # Billed at the client's model's prices: read, plain input (the instruction) and output.
    assert pricing is not None
    expected = sum(
        pricing.prompt_cost(s.usage["cache_read_input_tokens"], 0, s.usage["input_tokens"])
        + pricing.output_cost(s.usage["output_tokens"])
        for s in summaries
    )
    (bill,) = bills.values()
    assert bill.summarizer == pytest.approx(expected)
    assert bill.spent > bill.summarizer > 0
    assert 0 < float(answers[-1].headers["x-microcompact-cost"]) <= bill.spent + 1e-6 * len(answers)  # lines rounded


@pytest.mark.parametrize(
    "answer",
    [  # each failure kind a serve of its own: the fast suite (make test) keeps one, the rest run in CI
        pytest.param(
            text("I can't help with summarizing this conversation.", stop_reason="refusal"),
            id="refusal",
            marks=pytest.mark.slow,
        ),
        pytest.param(text("lol"), id="garbage", marks=pytest.mark.slow),  # no sections: the checks reject it
        pytest.param(  # a tool call instead of a summary
            Reply((ToolCall("Bash", {"command": "ls"}),)), id="tool-call", marks=pytest.mark.slow
        ),
        pytest.param(Fault(status=500, message="overloaded"), id="http-500"),
        pytest.param(Fault(garbage=b"not json at all"), id="not-json", marks=pytest.mark.slow),
    ],
)
def test_a_failed_summary_falls_back_to_the_extractive_one(tmp_path: Path, answer: Any, caplog):
    caplog.set_level(logging.WARNING, logger="microcompact")
    with ScriptedUpstream(scripted(answer), min_cacheable=0) as upstream, serve(upstream, tmp_path) as proxy:
        answers = anthropic_loop(proxy, "sk-ant-one")
        proxy.settle()
        (session,) = proxy.router.sessions()
        summarizer = session.summarizer
    assert all(a.status_code == 200 for a in answers) and len(answers) == STEPS + 1
    sent = upstream.generation_requests()
    assert any(is_summary(r) for r in sent)
    written = markers(sent)
    assert written, "no fold: the extractive summary should have been written"
    assert not any("nothing failed" in m for m in written)
    assert summarizer.failures >= 1 and summarizer.last_used == "extractive"
    lines = [r for r in caplog.records if "Summarizer upstream" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # once, however many passes fell back
    assert "sk-ant-one" not in caplog.text


@pytest.mark.slow
def test_the_credential_goes_only_to_its_own_conversation_and_upstream(tmp_path: Path):
    with (
        ScriptedUpstream(scripted(None), min_cacheable=0) as anthropic,
        ScriptedUpstream(scripted(None), openai_cache=True) as openai,
        serve(anthropic, tmp_path) as proxy,
    ):
        proxy.proxy.settings = dataclasses.replace(proxy.proxy.settings, openai_upstream=openai.openai_base_url)
        anthropic_loop(proxy, "sk-ant-one", "Run the steps, first.")
        anthropic_loop(proxy, "sk-ant-two", "Run the steps, second.")
        openai_loop(proxy, "sk-openai-three")
        proxy.settle()
    ant = anthropic.generation_requests()
    oai = openai.generation_requests()
    assert any(is_summary(r) for r in ant) and any(is_summary(r) for r in oai)
    for record in ant:
        first = json.dumps(record.body["messages"][0])
        own = "sk-ant-one" if "first." in first else "sk-ant-two"
        assert record.headers.get("x-api-key") == own
        assert "sk-openai-three" not in json.dumps(record.headers)
        assert "authorization" not in record.headers
    for record in oai:
        assert record.headers.get("authorization") == "Bearer sk-openai-three"
        assert "sk-ant" not in json.dumps(record.headers)
    assert all(r.path == "/v1/messages" for r in ant) and all(r.path == "/v1/chat/completions" for r in oai)


# ------------------------------------------------------------------ OpenAI Chat Completions


def test_openai_chat_summary_reuses_the_prefix_and_reads_cached_tokens(tmp_path: Path):
    with (
        ScriptedUpstream(scripted(None), openai_cache=True) as upstream,
        serve(upstream, tmp_path) as proxy,
    ):
        openai_loop(proxy, "sk-openai-three")
        proxy.settle()
        bills = dict(proxy.proxy.compaction.bills)
        pricing = proxy.config.cache_pricing("openai", "gpt-5")
    sent = upstream.generation_requests()
    summaries = [r for r in sent if is_summary(r)]
    assert summaries
    for summary in summaries:
        last = preceding(sent, summary)
        assert orjson.dumps(summary.body["messages"][:-1]) == orjson.dumps(last.body["messages"])
        assert orjson.dumps(summary.body["tools"]) == orjson.dumps(last.body["tools"])
        assert summary.body["max_tokens"] == proxy.config.summarizer_output_tokens()
        assert summary.body["stream"] is False
        cached = summary.usage["prompt_tokens_details"]["cached_tokens"]
        # All of the previous request is read: what a cache that saw only it reads of the summary request.
        alone = PrefixCache()
        alone.cached_tokens(last.body)
        assert cached == alone.cached_tokens(summary.body) > 0
        # Uncached: the instruction (with the overhead) and what the 128-token steps leave of the prefix.
        instruction_alone = upstream.prompt_tokens({"messages": summary.body["messages"][-1:]})
        assert summary.usage["prompt_tokens"] - cached < instruction_alone + 128
    assert any("nothing failed" in m for m in markers(sent))
    assert pricing is not None
    expected = sum(
        pricing.prompt_cost(
            s.usage["prompt_tokens_details"]["cached_tokens"],
            s.usage["prompt_tokens"] - s.usage["prompt_tokens_details"]["cached_tokens"],
        )
        + pricing.output_cost(s.usage["completion_tokens"])
        for s in summaries
    )
    (bill,) = bills.values()
    assert bill.summarizer == pytest.approx(expected)


# ------------------------------------------------------------------ OpenAI Responses

RESPONSES_TOOLS = [{"type": "function", "name": "Bash", "parameters": {"type": "object", "properties": {}}}]


def responses_loop(proxy: ProxyServer, key: str) -> list[httpx.Response]:
    """A Codex-like loop: instructions, stateless input items (store false), function calls and outputs."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Run the steps."}]}
    ]
    answers = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for _ in range(STEPS + 1):
            body = {
                "model": "gpt-5",
                "instructions": "system prompt " * 400,
                "input": items,
                "tools": RESPONSES_TOOLS,
                "store": False,
                "max_output_tokens": 300,
            }
            answer = client.post("/v1/responses", json=body, headers={"authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            said = answer.json()["output"]
            items = [*items, *said]
            calls = [i for i in said if i["type"] == "function_call"]
            if not calls:
                break
            result = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": output(len(answers))}
            items.append(result)
            proxy.settle()
    return answers


def test_responses_summary_reuses_the_input_and_reads_cached_tokens(tmp_path: Path):
    with ResponsesUpstream(scripted(None)) as upstream, serve(upstream, tmp_path) as proxy:
        proxy.proxy.settings = dataclasses.replace(proxy.proxy.settings, openai_upstream=upstream.openai_base_url)
        answers = responses_loop(proxy, "sk-openai-four")
        proxy.settle()
        bills = dict(proxy.proxy.compaction.bills)
    assert len(answers) == STEPS + 1
    sent = upstream.responses_requests()
    summaries = [r for r in sent if is_summary(r)]
    assert summaries
    for summary in summaries:
        last = preceding(sent, summary)
        assert orjson.dumps(summary.body["input"][:-1]) == orjson.dumps(last.body["input"])
        for key in ("instructions", "tools", "model"):
            assert orjson.dumps(summary.body[key]) == orjson.dumps(last.body[key])
        assert summary.body["store"] is False and summary.body["stream"] is False
        assert summary.body["max_output_tokens"] == proxy.config.summarizer_output_tokens()
        assert summary.headers["authorization"] == "Bearer sk-openai-four"
        cached = summary.usage["input_tokens_details"]["cached_tokens"]
        assert (
            cached > 0
            and summary.usage["input_tokens"] - cached
            < upstream.input_tokens({"input": summary.body["input"][-1:]}) + 128
        )
    assert any("nothing failed" in m for m in markers(sent))
    (bill,) = bills.values()
    assert bill.summarizer > 0
