"""Reading what the provider's cache did: usage fields from JSON and streams of both providers (from the
scripted upstream's own wire format), responses that lack them, bad figures (one log line, never a crash),
``Session.record_usage``'s new keywords, and the per-session observations scheduling reads."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.bill.cache_usage import CacheObservations, UsageReport, checked_report
from microcompact.bill.pricing import PRESETS
from microcompact.bill.session_bill import SessionBill
from microcompact.config import parse_config
from microcompact.server.anthropic_format import AnthropicFormat
from microcompact.server.gemini_format import GeminiFormat
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.usage_tap import UsageTap
from microcompact.session import Session
from upstream import anthropic_wire, openai_wire, text
from upstream.usage import PromptUsage

ANTHROPIC, OPENAI, GEMINI = AnthropicFormat(), OpenAIFormat(), GeminiFormat()


def tap_of(api: str, content_type: str, chunks: list[bytes]) -> UsageReport | None:
    provider = {"anthropic": ANTHROPIC, "gemini": GEMINI}.get(api, OPENAI)
    tap = UsageTap(content_type, provider)
    for chunk in chunks:
        for i in range(0, len(chunk), 7):  # split events across reads, as a network does
            tap.feed(chunk[i : i + 7])
    tap.finish()
    return tap.report(at=5.0)


def anthropic_message(usage: PromptUsage) -> dict:
    return anthropic_wire.message(text("hi"), "m", 1, usage, 3)


def openai_completion(prompt: int, cached: int | None) -> dict:
    usage = openai_wire.usage_json(prompt, 3)
    if cached is None:
        del usage["prompt_tokens_details"]
    else:
        usage["prompt_tokens_details"]["cached_tokens"] = cached
    return openai_wire.completion(text("hi"), "m", 1, usage)


def test_anthropic_json_and_stream_report_reads_and_writes():
    message = anthropic_message(
        PromptUsage(input_tokens=10, cache_creation_input_tokens=300, cache_read_input_tokens=5000)
    )
    as_json = tap_of("anthropic", "application/json", [json.dumps(message).encode()])
    streamed = tap_of("anthropic", "text/event-stream", anthropic_wire.stream_events(text("hi"), message))
    for report in (as_json, streamed):
        assert report == UsageReport(5310, 5000, 300, 5.0, turn_over=True)  # a text answer ends the turn


def test_an_anthropic_message_delta_with_cumulative_cache_figures_counts_the_largest():
    message = anthropic_message(PromptUsage(10, 0, 0))
    events = anthropic_wire.stream_events(text("hi"), message)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {
            "output_tokens": 3,
            "input_tokens": 10,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 40,
        },
    }
    events.insert(-1, f"event: message_delta\ndata: {json.dumps(delta)}\n\n".encode())
    report = tap_of("anthropic", "text/event-stream; charset=utf-8", events)
    assert report is not None and (report.cache_read_tokens, report.cache_write_tokens) == (900, 40)


def test_openai_json_and_stream_with_usage_report_cached_tokens():
    full = openai_completion(8000, 6144)
    expected = UsageReport(8000, 6144, None, 5.0, turn_over=True)
    assert tap_of("openai", "application/json", [json.dumps(full).encode()]) == expected
    chunks = openai_wire.stream_chunks(text("hi"), full, include_usage=True)
    assert tap_of("openai", "text/event-stream", chunks) == expected


def test_responses_without_cache_figures_report_the_prompt_only():
    assert tap_of("openai", "application/json", [json.dumps(openai_completion(900, None)).encode()]) == UsageReport(
        900, None, None, 5.0, turn_over=True
    )
    bare = {"type": "message", "usage": {"input_tokens": 700, "output_tokens": 2}}
    assert tap_of("anthropic", "application/json", [json.dumps(bare).encode()]) == UsageReport(700, None, None, 5.0)
    chunks = openai_wire.stream_chunks(text("hi"), openai_completion(900, 0), include_usage=False)
    assert tap_of("openai", "text/event-stream", chunks) is None  # no usage at all: nothing to report


def gemini_chunk(usage: dict | None, text_part: str = "hi") -> dict:
    chunk: dict = {"candidates": [{"content": {"role": "model", "parts": [{"text": text_part}]}, "index": 0}]}
    if usage is not None:
        chunk["usageMetadata"] = usage
    return chunk


def test_gemini_json_sse_and_array_report_the_cached_prefix():
    usage = {"promptTokenCount": 9000, "cachedContentTokenCount": 8192, "candidatesTokenCount": 3}
    expected = UsageReport(9000, 8192, None, 5.0)
    assert tap_of("gemini", "application/json", [json.dumps(gemini_chunk(usage)).encode()]) == expected
    sse = [f"data: {json.dumps(gemini_chunk(u))}\r\n\r\n".encode() for u in ({"promptTokenCount": 9000}, usage)]
    assert tap_of("gemini", "text/event-stream", sse) == expected
    array = json.dumps([gemini_chunk({"promptTokenCount": 9000}), gemini_chunk(usage, "!")]).encode()
    assert tap_of("gemini", "application/json", [array]) == expected


def test_gemini_leaves_a_zero_out_a_prompt_without_a_cached_count_read_nothing():
    chunk = gemini_chunk({"promptTokenCount": 700, "candidatesTokenCount": 2})
    assert tap_of("gemini", "application/json", [json.dumps(chunk).encode()]) == UsageReport(700, 0, None, 5.0)
    assert tap_of("gemini", "application/json", [json.dumps(gemini_chunk(None)).encode()]) is None


@pytest.mark.parametrize("cached", ["lots", -3, 1.5, 10_000])
def test_bad_gemini_cached_counts_are_ignored_with_one_line(caplog, cached):
    chunk = gemini_chunk({"promptTokenCount": 900, "cachedContentTokenCount": cached})
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        report = tap_of("gemini", "application/json", [json.dumps(chunk).encode()])
    assert report is not None and report.cache_read_tokens is None
    assert len(caplog.records) == 1 and "gemini response" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"input_tokens": 100, "cache_read_input_tokens": "lots"}, UsageReport(100, None, None, 5.0)),
        ({"input_tokens": 100, "cache_read_input_tokens": True}, UsageReport(100, None, None, 5.0)),
        ({"input_tokens": 100, "cache_creation_input_tokens": 1.5}, UsageReport(100, None, None, 5.0)),
        ({"input_tokens": 900, "cache_read_input_tokens": -5}, UsageReport(895, None, None, 5.0)),
    ],
)
def test_bad_anthropic_figures_are_ignored_with_one_line(caplog, usage, expected):
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        report = tap_of("anthropic", "application/json", [json.dumps({"usage": usage}).encode()])
    assert report == expected
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "ignoring usage field cache_" in lines[0] and "anthropic response" in lines[0]


def test_openai_cached_tokens_larger_than_the_prompt_are_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        report = tap_of("openai", "application/json", [json.dumps(openai_completion(1000, 5000)).encode()])
    assert report == UsageReport(1000, None, None, 5.0, turn_over=True)
    assert len(caplog.records) == 1 and "more than the prompt" in caplog.records[0].getMessage()


@given(
    st.one_of(st.none(), st.integers(-10, 10**7), st.text(max_size=5), st.floats(), st.booleans()),
    st.integers(1, 10**6),
)
def test_checked_report_never_raises_and_never_exceeds_the_prompt(value, prompt):
    report = checked_report(prompt, value, value)
    assert report is not None and report.prompt_tokens == prompt
    assert (report.cache_read_tokens or 0) + (report.cache_write_tokens or 0) <= prompt


def test_record_usage_keeps_the_old_call_and_takes_the_cache_figures():
    now = [100.0]
    session = Session(clock=lambda: now[0])
    session.record_usage(5000)  # the old call
    session.record_usage(None)
    now[0] = 110.0
    session.record_usage(6000, cache_read_tokens=5000, cache_write_tokens=900)
    assert session.cache.last == UsageReport(6000, 5000, 900, 110.0)
    assert session.cache.cached_prefix_tokens == 5900
    assert session.cache.request_interval() == pytest.approx(10.0)
    assert session.cache.warm(now=200.0, ttl_seconds=300) and not session.cache.warm(now=500.0, ttl_seconds=300)


def test_record_usage_with_bad_figures_logs_one_line(caplog):
    session = Session(parse_config({"model": {"context_length": 100_000}}))
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        session.record_usage(1000, cache_read_tokens=-1)  # type: ignore[arg-type]
    assert session.cache.last is not None and session.cache.last.cache_read_tokens is None
    assert len(caplog.records) == 1 and "record_usage" in caplog.records[0].getMessage()


def test_observations_tell_a_paid_fold_from_a_free_one_and_a_cold_cache():
    seen = CacheObservations()
    seen.record(UsageReport(20_000, 0, 20_000, at=0))
    seen.record(UsageReport(26_000, 20_000, 6_000, at=10))
    seen.note_fold()
    seen.record(UsageReport(15_000, 4_000, 11_000, at=20))  # warm: read the head, wrote the rest
    assert seen.last_fold_paid is True and seen.folds == 1 and seen.paid_folds == 1
    seen.note_fold()
    seen.record(UsageReport(16_000, 0, 16_000, at=900))  # cold: nothing read, the fold came free
    assert seen.last_fold_paid is False
    assert seen.growth_per_request() == pytest.approx((6_000 + 1_000) / 2)
    assert not seen.warm(now=1300, ttl_seconds=300)
    seen.record(UsageReport(17_000, 0, 0, at=1310))  # the upstream reads and writes nothing: no cache
    assert not seen.warm(now=1311, ttl_seconds=300)


def test_the_bill_prices_what_was_reported_against_the_uncompacted_counterfactual():
    bill = SessionBill()
    p = PRESETS["anthropic"]
    bill.add(p, UsageReport(20_000, 0, 20_000), 20_000)
    spent, uncompacted = bill.add(p, UsageReport(15_000, 4_000, 11_000), 40_000)
    assert spent == pytest.approx(p.prompt_cost(4_000, 11_000))
    assert uncompacted == pytest.approx(p.prompt_cost(20_000, 20_000))  # read the last full prompt, wrote the growth
    openai = PRESETS["openai"]
    spent, _ = SessionBill().add(openai, UsageReport(10_000, 8_000, None), 10_000)
    assert spent == pytest.approx((8_000 * 0.125 + 2_000 * 1.25) / 1e6)


def test_a_tool_call_answer_does_not_end_the_turn_and_a_bare_usage_says_nothing():
    from upstream import ToolCall
    from upstream.replies import Reply

    call = Reply((ToolCall("Bash", {"command": "ls"}, id="toolu_1"),))
    message = anthropic_wire.message(call, "m", 1, PromptUsage(10, 0, 0), 3)
    assert message["stop_reason"] == "tool_use"
    for report in (
        tap_of("anthropic", "application/json", [json.dumps(message).encode()]),
        tap_of("anthropic", "text/event-stream", anthropic_wire.stream_events(call, message)),
    ):
        assert report is not None and report.turn_over is False
    full = openai_wire.completion(call, "m", 1, openai_wire.usage_json(900, 3))
    chunks = openai_wire.stream_chunks(call, full, include_usage=True)
    for report in (
        tap_of("openai", "application/json", [json.dumps(full).encode()]),
        tap_of("openai", "text/event-stream", chunks),
    ):
        assert report is not None and report.turn_over is False
    bare = {"type": "message", "usage": {"input_tokens": 700, "output_tokens": 2}}
    report = tap_of("anthropic", "application/json", [json.dumps(bare).encode()])
    assert report is not None and report.turn_over is None


def test_gemini_says_its_turn_is_over_by_stop_unless_it_called_a_function():
    """Gemini ends a function call with finishReason STOP too: a call in any chunk means the turn goes on
    (issue 28: the Gemini turn end was not read at all)."""
    usage = {"promptTokenCount": 900, "candidatesTokenCount": 3}
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "done"}]}, "finishReason": "STOP"}]}
    call_part = {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
    call = {"candidates": [{"content": {"role": "model", "parts": [call_part]}}]}
    stop = {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}]}
    over = tap_of("gemini", "application/json", [json.dumps({**answer, "usageMetadata": usage}).encode()])
    assert over is not None and over.turn_over is True
    called = tap_of("gemini", "application/json", [json.dumps({**call, "usageMetadata": usage}).encode()])
    assert called is not None and called.turn_over is False
    # streamed: the call in a chunk of its own without usage, STOP and the usage in the last one
    sse = [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in (call, {**stop, "usageMetadata": usage})]
    streamed = tap_of("gemini", "text/event-stream", sse)
    assert streamed is not None and streamed.turn_over is False
    array = json.dumps([answer, {**stop, "usageMetadata": usage}]).encode()
    arrayed = tap_of("gemini", "application/json", [array])
    assert arrayed is not None and arrayed.turn_over is True
    unsaid = tap_of("gemini", "application/json", [json.dumps({"usageMetadata": usage}).encode()])
    assert unsaid is not None and unsaid.turn_over is None


def test_the_summarizer_counts_in_what_the_session_spent():
    pricing = PRESETS["anthropic"].model_copy(update={"summarizer_input": 1.0, "summarizer_output": 5.0})
    bill = SessionBill()
    dollars = bill.add_summarizer(pricing, 1_000_000, 100_000)
    assert dollars == pytest.approx(1.5) and bill.spent == pytest.approx(1.5) and bill.summarizer == pytest.approx(1.5)
    spent, _ = bill.add(pricing, UsageReport(10_000, 0, 10_000), 10_000)
    prompt_only = pricing.prompt_cost(0, 10_000, 0)
    assert spent == pytest.approx(prompt_only + 1.5), "the next request's figure carries the summarizer calls"
    assert bill.spent == pytest.approx(prompt_only + 1.5), "counted once in the total"
    spent, _ = bill.add(pricing, UsageReport(10_000, 10_000, 0), 10_000)
    assert spent == pytest.approx(pricing.prompt_cost(10_000, 0, 0))


def _stopped_after(api: str, chunks: list[bytes]) -> list[bool]:
    """Whether the tap had read the stream's final event after each chunk."""
    provider = {"anthropic": ANTHROPIC, "gemini": GEMINI}.get(api, OPENAI)
    tap = UsageTap("text/event-stream", provider)
    seen = []
    for chunk in chunks:
        tap.feed(chunk)
        seen.append(tap.stopped)
    return seen


def test_a_stream_is_stopped_at_its_final_event_and_no_sooner():
    message = anthropic_message(PromptUsage(10, 0, 500))
    events = anthropic_wire.stream_events(text("hi"), message)
    assert b"message_stop" in events[-1] and _stopped_after("anthropic", events) == [False] * (len(events) - 1) + [True]
    chunks = openai_wire.stream_chunks(text("hi"), openai_completion(900, 0), include_usage=True)
    assert chunks[-1].strip() == b"data: [DONE]"
    assert _stopped_after("openai", chunks) == [False] * (len(chunks) - 1) + [True]
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 900, "output_tokens": 2}}}
    responses = [b'data: {"type": "response.created"}\n\n', f"data: {json.dumps(done)}\n\n".encode()]
    assert _stopped_after("openai", responses) == [False, True]
    finished = gemini_chunk({"promptTokenCount": 9000})
    finished["candidates"][0]["finishReason"] = "STOP"
    gemini = [f"data: {json.dumps(c)}\n\n".encode() for c in (gemini_chunk({"promptTokenCount": 9000}), finished)]
    assert _stopped_after("gemini", gemini) == [False, True]
    whole = UsageTap("application/json", OPENAI)
    whole.feed(json.dumps(openai_completion(900, 0)).encode())
    whole.finish()
    assert not whole.stopped, "only a stream stops early: a JSON answer is read whole anyway"


def test_responses_json_and_stream_report_cached_tokens_and_the_turn_end():
    """The Responses API reports its cache read as ``input_tokens_details.cached_tokens``, a stream in its
    final ``response.completed`` event, and ends a turn with an answer, not with a function call."""
    from microcompact.server.responses_format import ResponsesFormat
    from upstream import ToolCall, responses_wire
    from upstream.replies import Reply

    body = {"model": "m", "input": [{"role": "user", "content": "hi"}]}
    call = Reply((ToolCall("shell", {"command": ["ls"]}, id="call_1"),))
    for reply, turn_over in ((text("done"), True), (call, False)):
        full = responses_wire.response(body, reply, 1, responses_wire.usage_json(8000, 6144, 3))
        taps = []
        for content_type, chunks in (
            ("application/json", [json.dumps(full).encode()]),
            ("text/event-stream", responses_wire.stream_events(full, 5)),
        ):
            tap = UsageTap(content_type, ResponsesFormat())
            for chunk in chunks:
                for i in range(0, len(chunk), 7):
                    tap.feed(chunk[i : i + 7])
            tap.finish()
            taps.append(tap.report(at=5.0))
        assert taps == [UsageReport(8000, 6144, None, 5.0, turn_over=turn_over)] * 2


@pytest.mark.parametrize(
    "details, logged",
    [
        ({"cached_tokens": 9000}, "more than the prompt"),
        ({"cached_tokens": "lots"}, "cache_read_tokens"),
        ("cached_tokens", None),  # not an object: no figure at all
        ({"cached_tokens": -5}, "cache_read_tokens"),
    ],
)
def test_bad_responses_cache_figures_are_ignored_with_at_most_one_line(caplog, details, logged):
    """A Responses answer whose cache figure is not a count, or more than the prompt, bills the prompt only."""
    from microcompact.server.responses_format import ResponsesFormat
    from upstream import responses_wire

    usage = {"input_tokens": 1000, "input_tokens_details": details, "output_tokens": 3}
    full = responses_wire.response({"model": "m"}, text("done"), 1, usage)
    tap = UsageTap("application/json", ResponsesFormat())
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        tap.feed(json.dumps(full).encode())
        tap.finish()
        report = tap.report(at=5.0)
    assert report == UsageReport(1000, None, None, 5.0, turn_over=True)
    lines = [r.getMessage() for r in caplog.records]
    if logged is None:
        assert lines == []
    else:
        assert len(lines) == 1 and logged in lines[0], lines
