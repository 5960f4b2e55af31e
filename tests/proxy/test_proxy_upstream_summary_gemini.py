"""``summarizer: upstream`` on the Gemini routes, through ``serve`` over real HTTP in front of the scripted
Gemini upstream (``support.gemini_server``: implicit caching reports the prefix a request shares with the
previous one as ``cachedContentTokenCount``). The summary request is the client's last request as it went
up (``systemInstruction``, ``tools``, ``toolConfig`` and every content byte for byte) plus one ``user``
content, sent to ``:generateContent`` with the client's key only, billed at the client's model's prices
(the prefix at the read price); a blocked answer, a function call, garbage, a 500 or an answer that is not
JSON falls back to the extractive summary with one log line that never shows the key."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from microcompact.messages import MARKER_PREFIX
from microcompact.server.gemini_format import GeminiFormat
from microcompact.server.routes import GEMINI_COUNT_TOKENS, GENERATE_CONTENT, match
from microcompact.server.run import proxy_config
from microcompact.server.upstream_summary import structured, summary_url
from microcompact.summarizers.base import SummarizerBadOutput
from microcompact.summarizers.extractive import ExtractiveSummarizer
from microcompact.summarizers.upstream import UpstreamRequest, UpstreamSummarizer
from microcompact.summarizers.upstream_notes import request_turns, session_keys
from microcompact.summarizers.upstream_wire import GEMINI, THINKING_ALLOWANCE, read_answer, summary_body
from support.gemini_server import PLACEHOLDER_SIGNATURE as PLACEHOLDER
from support.gemini_server import Exchange, Fault, Finish, GeminiUpstream
from support.proxy_server import ProxyServer
from upstream import ScriptedUpstream

KEY = "AIzaSy-gemini-client-key-0001"
MODEL = "gemini-3-pro-test"
INSTRUCTION = "[microcompact] This message comes from microcompact"
SYSTEM = {"parts": [{"text": "system prompt " * 400}]}
TOOLS = [{"functionDeclarations": [{"name": "run_step", "parameters": {"type": "object", "properties": {}}}]}]
TOOL_CONFIG = {"functionCallingConfig": {"mode": "AUTO"}}
GENERATION = {"temperature": 0.2, "candidateCount": 1, "thinkingConfig": {"thinkingBudget": 512}}
STEPS = 30
LISTED = re.compile(r"^E(\d+): the assistant turn that begins “Step (\d+)\.”", re.MULTILINE)
# Prices of a Gemini Pro-class model: reads at a tenth of input, no write premium.
PRICING = {"preset": "openai", "input": 1.25, "cached_read": 0.125, "output": 10.0, "write_premium": False}


def asked(body: Any) -> str | None:
    """The instruction a summary request appends (its last content's text), else None."""
    contents = body.get("contents") if isinstance(body, dict) else None
    last = contents[-1] if contents else {}
    text = "".join(str(p.get("text", "")) for p in last.get("parts") or [])
    return text if last.get("role") == "user" and INSTRUCTION in text else None


def is_summary(exchange: Exchange) -> bool:
    return asked(exchange.body) is not None


def notes(instruction: str) -> list[dict[str, Any]]:
    """The notes a model would write on the turns the instruction lists (each its step, in its own words)."""
    blocks = ["### Goal\nRun the numbered steps."]
    for label, step in LISTED.findall(instruction):
        blocks.append(
            f"### E{label}\nWork done: Step {step} ran with the run_step tool.\n"
            f"Findings: step {step} finished cleanly and step {step} printed numbered lines; nothing failed.\n"
            f"Next: run the step after step {step}."
        )
    return [{"text": "\n".join(blocks)}]


def scripted(summary: Any = None) -> Any:
    """Summary requests get ``summary`` (parts, a Finish or a Fault; the notes when None); the agent's get
    the next step (counted per conversation: a fold shortens the history) or a final text."""
    counted: dict[str, int] = {}

    def script(step: int, body: dict[str, Any]) -> Any:
        instruction = asked(body)
        if instruction is not None:
            return notes(instruction) if summary is None else summary
        first = json.dumps(body["contents"][:1])
        n = counted[first] = counted.get(first, -1) + 1
        if n >= STEPS:
            return [{"text": "done"}]
        return [{"text": f"Step {n}."}, {"functionCall": {"name": "run_step", "args": {"step": n}}}]

    return script


def output(n: int) -> str:
    return "\n".join(f"{n} line {i} " + "x" * 60 for i in range(120))


def answer_parts(answer: httpx.Response, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return list(answer.json()["candidates"][0]["content"]["parts"])
    chunks = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
    return [p for c in chunks for p in c["candidates"][0].get("content", {}).get("parts", [])]


def gemini_loop(
    proxy: ProxyServer, *, stream: bool = False, key_in_query: bool = False, opening: str = "Run the steps."
) -> list[httpx.Response]:
    """A Gemini CLI-like loop: system instruction, tools, thought signatures returned as they came."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": opening}]}]
    params = {"alt": "sse"} if stream else {}
    headers = {}
    if key_in_query:
        params["key"] = KEY
    else:
        headers["x-goog-api-key"] = KEY
    method = "streamGenerateContent" if stream else "generateContent"
    answers = []
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        for _ in range(STEPS + 1):
            body = {
                "contents": contents,
                "systemInstruction": SYSTEM,
                "tools": TOOLS,
                "toolConfig": TOOL_CONFIG,
                "generationConfig": GENERATION,
            }
            answer = client.post(f"/v1beta/models/{MODEL}:{method}", params=params, json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            parts = answer_parts(answer, stream)
            contents.append({"role": "model", "parts": parts})
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            if not calls:
                break
            result = {"functionResponse": {"name": calls[0]["name"], "response": {"output": output(len(answers))}}}
            contents.append({"role": "user", "parts": [result]})
            proxy.settle()
    return answers


def serve(upstream: GeminiUpstream, tmp_path: Path, anthropic: str = "http://127.0.0.1:9") -> ProxyServer:
    config = proxy_config(None, 40_000, "upstream").with_overrides(pricing=PRICING)
    proxy = ProxyServer(anthropic, tmp_path / "s.db", config=config)
    proxy.proxy.settings = dataclasses.replace(proxy.proxy.settings, gemini_upstream=upstream.base_url)
    return proxy


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt in the order the model reads it (what implicit caching compares)."""
    return json.dumps([body.get(k) for k in ("systemInstruction", "tools", "contents")], ensure_ascii=False)


def shared_tokens(a: dict[str, Any], b: dict[str, Any]) -> int:
    x, y = prompt_text(a), prompt_text(b)
    n = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
    return n // 4


def preceding(exchanges: list[Exchange], summary: Exchange) -> Exchange:
    """The client request ``summary`` continues: one of the last two that went up before it, whose
    contents are exactly the summary request's but its last."""
    index = exchanges.index(summary)
    earlier = [e for e in exchanges[:index] if not is_summary(e)][-2:]
    prefix = orjson.dumps(summary.body["contents"][:-1])
    matching = [e for e in earlier if orjson.dumps(e.body["contents"]) == prefix]
    assert matching, f"summary request {index} continues none of the two requests before it"
    return matching[-1]


def markers(exchanges: list[Exchange]) -> list[str]:
    sent = [json.dumps(e.body["contents"]) for e in exchanges if not is_summary(e)]
    return [m for m in sent if MARKER_PREFIX in m]


# ------------------------------------------------------------------ the summary rides the cache


@pytest.mark.parametrize(
    ("stream", "key_in_query"),
    [
        pytest.param(False, False, id="generate-header-key"),
        pytest.param(True, True, id="stream-query-key", marks=pytest.mark.slow),  # make test: one of the two
    ],
)
def test_the_gemini_summary_rides_the_cache_and_is_billed_as_the_clients_model(
    tmp_path: Path, stream: bool, key_in_query: bool
) -> None:
    with GeminiUpstream(script=scripted(), api_key=KEY) as upstream, serve(upstream, tmp_path) as proxy:
        answers = gemini_loop(proxy, stream=stream, key_in_query=key_in_query)
        proxy.settle()
        bills = dict(proxy.proxy.compaction.bills)
        pricing = proxy.config.cache_pricing("gemini")
        bound = proxy.config.summarizer_output_tokens()
        (session,) = proxy.router.sessions()
        summarizer = session.summarizer
    sent = upstream.generations()
    assert all(e.status == 200 for e in sent), [e.response for e in sent if e.status != 200][:1]
    summaries = [e for e in sent if is_summary(e)]
    assert summaries, "no summary request went upstream"
    # Every merge wrote the model's notes (how many a request serves is the schedule's: see the test below).
    assert summarizer.calls == len(summaries) and summarizer.merged >= len(summaries) and summarizer.failures == 0
    client_method = "streamGenerateContent" if stream else "generateContent"
    assert all(e.path == f"/v1beta/models/{MODEL}:{client_method}" for e in sent if not is_summary(e))
    for summary in summaries:
        # Non-streaming generateContent of the same model, the key exactly where the client put it.
        assert summary.path == f"/v1beta/models/{MODEL}:generateContent"
        assert summary.query == ({"key": [KEY]} if key_in_query else {})
        assert summary.headers.get("x-goog-api-key") == (None if key_in_query else KEY)
        last = preceding(sent, summary)
        # The conversation exactly as it last went up, byte for byte, and one user content appended.
        assert orjson.dumps(summary.body["contents"][:-1]) == orjson.dumps(last.body["contents"])
        assert summary.body["contents"][-1]["role"] == "user" and len(summary.body["contents"][-1]["parts"]) == 1
        for key in ("systemInstruction", "tools", "toolConfig"):
            assert orjson.dumps(summary.body[key]) == orjson.dumps(last.body[key])
        # Only the output bound (plus the thinking budget) and the candidate count change.
        config = {k: v for k, v in GENERATION.items() if k != "candidateCount"}
        assert summary.body["generationConfig"] == {**config, "maxOutputTokens": bound + 512}
        # Read from the cache: everything the previous request left there.
        usage = summary.response["usageMetadata"]
        assert usage["cachedContentTokenCount"] >= shared_tokens(last.body, summary.body) > 0
        assert usage["promptTokenCount"] - usage["cachedContentTokenCount"] < 2 * len(asked(summary.body) or "")
    # The model's notes are what the markers say.
    assert any("nothing failed" in m for m in markers(sent))
    # Billed at the client's model's prices: the read, the rest as plain input (no write premium), output.
    assert pricing is not None
    expected = 0.0
    for summary in summaries:
        usage = summary.response["usageMetadata"]
        read = usage["cachedContentTokenCount"]
        expected += pricing.prompt_cost(read, 0, usage["promptTokenCount"] - read)
        expected += pricing.output_cost(usage["candidatesTokenCount"])
    (bill,) = bills.values()
    assert bill.summarizer == pytest.approx(expected) and expected > 0
    assert bill.spent > bill.summarizer
    assert 0 < float(answers[-1].headers["x-microcompact-cost"]) <= bill.spent + 1e-6 * len(answers)  # lines rounded


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize(
    "answer",
    [  # each failure kind a serve of its own: the fast suite (make test) keeps one, the rest run in CI
        pytest.param(Finish([], "SAFETY"), id="safety", marks=pytest.mark.slow),
        pytest.param(
            Finish([{"text": "### Goal\nQuoted text."}], "RECITATION"), id="recitation", marks=pytest.mark.slow
        ),
        pytest.param([{"text": "lol"}], id="garbage", marks=pytest.mark.slow),  # no sections: the checks reject it
        pytest.param(  # a call instead of a summary
            [{"functionCall": {"name": "run_step", "args": {"step": 99}}}], id="function-call", marks=pytest.mark.slow
        ),
        pytest.param(Fault(status=500), id="http-500"),
        pytest.param(Fault(garbage=b"not json at all"), id="not-json", marks=pytest.mark.slow),
    ],
)
def test_a_failed_gemini_summary_falls_back_to_the_extractive_one(tmp_path: Path, answer: Any, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="microcompact")
    with GeminiUpstream(script=scripted(answer), api_key=KEY) as upstream, serve(upstream, tmp_path) as proxy:
        answers = gemini_loop(proxy, key_in_query=True)
        proxy.settle()
        (session,) = proxy.router.sessions()
        summarizer = session.summarizer
    assert all(a.status_code == 200 for a in answers) and len(answers) == STEPS + 1
    sent = upstream.generations()
    assert any(is_summary(e) for e in sent)
    written = markers(sent)
    assert written, "no fold: the extractive summary should have been written"
    assert not any("nothing failed" in m for m in written)
    assert summarizer.failures >= 1 and summarizer.merged == 0 and summarizer.last_used == "extractive"
    lines = [r for r in caplog.records if "Summarizer upstream" in r.getMessage() and r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # once, however many passes fell back
    assert KEY not in caplog.text


# ------------------------------------------------------------------ credentials


def test_the_gemini_key_goes_only_to_the_gemini_upstream(tmp_path: Path) -> None:
    with (
        GeminiUpstream(script=scripted(), api_key=KEY) as gemini,
        ScriptedUpstream(lambda record: None, min_cacheable=0) as anthropic,
        serve(gemini, tmp_path, anthropic.base_url) as proxy,
    ):
        gemini_loop(proxy, stream=True, key_in_query=True)
        proxy.settle()
    assert any(is_summary(e) for e in gemini.generations())
    assert not anthropic.generation_requests()
    for exchange in gemini.exchanges:
        assert exchange.query.get("key") == [KEY] and "x-goog-api-key" not in exchange.headers
        assert "authorization" not in exchange.headers


# ------------------------------------------------------------------ keys


def test_a_gemini_turn_has_the_same_key_in_the_session_and_in_a_folded_request() -> None:
    """The session's messages (as gemini_format makes them from the client's contents) and the turns of a
    request that went up after a fold (absorbed contents gone, the marker merged into the next model
    content) name each turn alike, whether the client gave its calls ids or not."""
    fmt = GeminiFormat()
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run the steps."}]}]
    for n in range(6):
        call: dict[str, Any] = {"name": "run_step", "args": {"step": n, "path": f"src/{n}.py"}}
        if n % 2:
            call["id"] = f"client-id-{n}"
        parts: list[dict[str, Any]] = [{"text": "thinking", "thought": True}, {"text": f"Step {n}."}]
        contents.append({"role": "model", "parts": [*parts, {"functionCall": call, "thoughtSignature": "c2ln"}]})
        response = {"name": "run_step", "response": {"output": f"ran {n}"}}
        contents.append({"role": "user", "parts": [{"functionResponse": response}]})
    contents.append({"role": "model", "parts": [{"text": "All done."}]})
    history = fmt.history({"contents": contents})
    session = [m for content in history for m in fmt.convert(content)]
    keys = session_keys(session)
    assert len(keys) == 7 and len(set(keys)) == 7
    # A fold absorbed steps 0-2: the marker merged as its own part into the model content of step 3.
    marker = {"text": f"{MARKER_PREFIX}\n\n## Summary of earlier turns\n\nnotes"}
    kept = contents[7:]
    folded = [contents[0], {**kept[0], "parts": [marker, *kept[0]["parts"]]}, *kept[1:]]
    assert [t.key for t in request_turns(GEMINI, {"contents": folded})] == keys[3:]
    # The instruction names a call without an id by its tool and arguments, one with an id by it.
    turns = request_turns(GEMINI, {"contents": contents})
    assert turns[0].calls == ('run_step {"step": 0, "path": "src/0.py"}',)
    assert turns[1].calls == ("client-id-1 (run_step)",)
    assert turns[0].words == "Step 0." and turns[-1].calls == ()


def test_one_gemini_summary_request_notes_the_turns_a_fold_absorbs_one_by_one() -> None:
    """The summarizer on its own, against the scripted Gemini upstream over HTTP: the conversation's last
    request (already folded once, streamed, the key in the query) is sent once to ``:generateContent``;
    the merges of the next exchanges find their notes in that one answer."""
    fmt = GeminiFormat()
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run the steps."}]}]
    for n in range(6):
        call = {"functionCall": {"name": "run_step", "args": {"step": n}}, "thoughtSignature": PLACEHOLDER}
        contents.append({"role": "model", "parts": [{"text": f"Step {n}."}, call]})
        response = {"functionResponse": {"name": "run_step", "response": {"output": output(n)}}}
        contents.append({"role": "user", "parts": [response]})
    session = [m for content in fmt.history({"contents": contents}) for m in fmt.convert(content)]
    exchanges = [session[i : i + 2] for i in range(1, len(session), 2)]
    marker = {"text": f"{MARKER_PREFIX}\n\n## Summary of earlier turns\n\nSteps 0 and 1 ran."}
    folded = [contents[0], {**contents[5], "parts": [marker, *contents[5]["parts"]]}, *contents[6:]]
    body = {"contents": folded, "systemInstruction": SYSTEM, "tools": TOOLS, "generationConfig": GENERATION}
    with GeminiUpstream(script=scripted(), api_key=KEY) as upstream:
        url = httpx.URL(f"{upstream.base_url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={KEY}")
        summarizer = UpstreamSummarizer(ExtractiveSummarizer(), max_output_tokens=2000)
        request = UpstreamRequest(GEMINI, summary_url(GEMINI, url), (), orjson.dumps(body))
        summarizer.remember(request)
        summary = ""
        for exchange in exchanges[2:5]:
            summary = summarizer.merge(summary, exchange)
            assert summarizer.last_used == "upstream"
    (sent,) = upstream.generations()
    assert sent.path == f"/v1beta/models/{MODEL}:generateContent" and sent.query == {"key": [KEY]}
    assert LISTED.findall(asked(sent.body) or "") == [("1", "2"), ("2", "3"), ("3", "4"), ("4", "5")]
    assert summarizer.calls == 1 and summarizer.merged == 3
    for step in (2, 3, 4):
        assert f"step {step} finished cleanly" in summary


# ------------------------------------------------------------------ the wire, piece by piece


def test_a_gemini_answer_is_read_as_google_documents_it() -> None:
    """Visible text only (thought summaries left out), thinking billed as output, the cached part of the
    prompt read and nothing written; a blocked prompt or a stop other than STOP/MAX_TOKENS is no summary."""
    payload = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "pondering", "thought": True}, {"text": "### Goal"}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 9000,
            "cachedContentTokenCount": 8000,
            "candidatesTokenCount": 300,
            "thoughtsTokenCount": 200,
        },
    }
    answer = read_answer(GEMINI, payload, "upstream")
    assert "pondering" not in answer.text and "### Goal" in answer.text
    assert (answer.prompt_tokens, answer.cache_read_tokens, answer.cache_write_tokens) == (9000, 8000, 0)
    assert answer.output_tokens == 500
    for bad in (
        {"promptFeedback": {"blockReason": "SAFETY"}},
        {"candidates": [{"finishReason": "PROHIBITED_CONTENT"}]},
        {"candidates": [{**payload["candidates"][0], "finishReason": "BLOCKLIST"}]},
        {"candidates": []},
    ):
        with pytest.raises(SummarizerBadOutput):
            read_answer(GEMINI, bad, "upstream")


def test_only_a_gemini_generate_request_that_is_not_structured_output_is_reused() -> None:
    # The generating routes are prepared (their wire, GEMINI, is the summary wire); a count never is.
    for method in ("generateContent", "streamGenerateContent"):
        assert match("POST", f"/v1beta/models/m:{method}", {}).kind == GENERATE_CONTENT
    assert match("POST", "/v1beta/models/m:countTokens", {}).kind == GEMINI_COUNT_TOKENS
    plain = orjson.dumps({"contents": [], "generationConfig": {"temperature": 0, "responseMimeType": "text/plain"}})
    assert not structured(plain)
    for config in ({"responseMimeType": "application/json"}, {"responseJsonSchema": {"type": "object"}}):
        assert structured(orjson.dumps({"contents": [], "generationConfig": config}))
    # Thinking by level (or dynamic) gets the allowance on top of the bound; a budget of 0 adds nothing.
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    levelled = summary_body(
        GEMINI, {**body, "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}}}, "x", 100
    )
    assert levelled["generationConfig"]["maxOutputTokens"] == 100 + THINKING_ALLOWANCE
    off = summary_body(GEMINI, {**body, "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, "x", 100)
    assert off["generationConfig"] == {"thinkingConfig": {"thinkingBudget": 0}, "maxOutputTokens": 100}
    assert off["contents"][:1] == body["contents"] and off["contents"][1] == {"role": "user", "parts": [{"text": "x"}]}
