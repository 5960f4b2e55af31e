"""The upstream summarizer against the scripted upstream over HTTP on 127.0.0.1: what it appends, what it
never adds (secrets), when it does not ask at all, how it rests and stops after failures, and the
request body it builds for each API; plus the config and command-line errors of ``summarizer: upstream``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.config import parse_config
from microcompact.messages import MARKER_END, MARKER_PREFIX
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.summarizers.configured import summarizer_for
from microcompact.summarizers.upstream import REST_SECONDS, UpstreamRequest, UpstreamSummarizer
from microcompact.summarizers.upstream_notes import parse_notes, request_turns, session_keys, text_key
from microcompact.summarizers.upstream_wire import (
    ANTHROPIC,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    Answer,
    read_answer,
    summary_body,
)
from upstream import Fault, RecordedRequest, ScriptedUpstream, text

SECRET = "sk-ant-api03-" + "Q" * 80
NOTE = (
    "Work done: The assistant ran make test and read the build log.\n"
    "Findings: The build log showed 1 failure in test_build.\nNext: Fix the failure."
)
NOTES = f"### Goal\nFix the failing build.\n### E1\n{NOTE}"


def exchange(call_id: str = "toolu_01", said: str = "Reading the build log.") -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "Bash", "arguments": '{"command": "make test"}'}}
    return [
        {"role": "assistant", "content": said, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "make test\nbuild log: 1 failure in test_build"},
    ]


def last_request(call_id: str = "toolu_01", said: str = "Reading the build log.") -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 8000,
        "stream": True,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Fix the failing build."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": said},
                    {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "make test"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "build log: 1 failure"}],
            },
        ],
    }


def told(summarizer: UpstreamSummarizer, upstream: ScriptedUpstream, body: dict[str, Any], key: str = "k1") -> None:
    summarizer.remember(
        UpstreamRequest(
            ANTHROPIC,
            f"{upstream.base_url}/v1/messages",
            (("x-api-key", key), ("anthropic-version", "2023-06-01"), ("content-length", "1")),
            orjson.dumps(body),
        )
    )


def instruction(record: RecordedRequest) -> str:
    return str(record.body["messages"][-1]["content"][0]["text"])


def test_the_notes_of_the_named_exchange_come_back_with_the_facts(tmp_path: Path):
    with ScriptedUpstream(lambda r: text(NOTES)) as upstream:
        summarizer = UpstreamSummarizer(
            ExtractiveSummarizer(), facts=lambda previous, messages: "### Files\n- build.log"
        )
        told(summarizer, upstream, last_request())
        out = summarizer.merge("", exchange())
    (sent,) = upstream.generation_requests()
    assert out == (
        "### Goal\n- Fix the failing build.\n\n### Work done\n- The assistant ran make test and read the build log."
        "\n\n### Findings\n- The build log showed 1 failure in test_build.\n\n### Next\n- Fix the failure.\n\n"
        "### Files\n- build.log"
    )
    assert summarizer.last_used == "upstream" and summarizer.calls == 1 and summarizer.merged == 1
    asked = instruction(sent)
    assert "E1: the assistant turn that begins “Reading the build log.” and calls toolu_01 (Bash)" in asked
    assert sent.headers["x-api-key"] == "k1" and sent.body["stream"] is False
    assert sent.body["messages"][:-1] == last_request()["messages"]


def test_one_request_writes_the_notes_of_the_exchanges_after_it_too():
    body = last_request()
    body["messages"] += [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Opening the failing test."},
                {"type": "tool_use", "id": "toolu_02", "name": "Read", "input": {"path": "test_build.py"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02", "content": "def test_build"}]},
    ]
    second = (
        "### E2\nWork done: The assistant read test_build.py.\nFindings: none\nNext: Fix test_build in test_build.py."
    )
    read = {
        "id": "toolu_02",
        "type": "function",
        "function": {"name": "Read", "arguments": '{"path": "test_build.py"}'},
    }
    later = [
        {"role": "assistant", "content": "Opening the failing test.", "tool_calls": [read]},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "def test_build"},
    ]
    with ScriptedUpstream(lambda r: text(f"{NOTES}\n{second}")) as upstream:
        summarizer = UpstreamSummarizer(ExtractiveSummarizer())
        told(summarizer, upstream, body)
        first = summarizer.merge("", exchange())
        out = summarizer.merge(first, later)
        (sent,) = upstream.generation_requests()  # the second merge found its note ready
    assert "E2: the assistant turn that begins “Opening the failing test.” and calls toolu_02 (Read)" in instruction(
        sent
    )
    assert "- The assistant read test_build.py." in out and "make test" in out
    assert out.endswith("### Next\n- Fix test_build in test_build.py.") and summarizer.merged == 2


def test_no_secret_is_added_by_the_instruction(tmp_path: Path):
    said = f"Using the key {SECRET} to read the log."
    with ScriptedUpstream(lambda r: text(NOTES)) as upstream:
        summarizer = UpstreamSummarizer(ExtractiveSummarizer())
        told(summarizer, upstream, last_request(said=said))
        summarizer.merge(f"### Goal\nThe key {SECRET} was set.", exchange(said=said))
    (sent,) = upstream.generation_requests()
    assert SECRET not in instruction(sent)
    # What the client sent itself goes back as it was (its own provider has it already).
    assert SECRET in json.dumps(sent.body["messages"][:-1])


def test_an_exchange_not_in_the_last_request_is_never_asked_about(caplog):
    caplog.set_level(logging.WARNING, logger="microcompact")
    with ScriptedUpstream(lambda r: text(NOTES)) as upstream:
        summarizer = UpstreamSummarizer(ExtractiveSummarizer())
        told(summarizer, upstream, last_request(call_id="toolu_other"))
        out = summarizer.merge("", exchange())
        assert upstream.generation_requests() == []
        assert out and summarizer.last_used == "extractive" and summarizer.failures == 1
        told(summarizer, upstream, last_request())  # about that input only: the next exchange is asked at once
        assert summarizer.merge("", exchange()).startswith("### Goal") and summarizer.last_used == "upstream"
        assert len(upstream.generation_requests()) == 1
    assert "not in the conversation's last request" in caplog.text


def test_without_any_request_the_extractive_summary_is_written_and_said_once(caplog):
    caplog.set_level(logging.WARNING, logger="microcompact")
    summarizer = UpstreamSummarizer(ExtractiveSummarizer())
    for _ in range(3):
        assert summarizer.merge("", exchange())
    lines = [r for r in caplog.records if "Summarizer upstream" in r.getMessage()]
    assert len(lines) == 1 and "only serve has one" in lines[0].getMessage()


def test_a_refused_credential_stops_the_asking_and_an_outage_rests_it():
    now = [0.0]
    with ScriptedUpstream() as upstream:
        upstream.enqueue(Fault(status=503, message="overloaded"), text(NOTES))
        summarizer = UpstreamSummarizer(ExtractiveSummarizer(), clock=lambda: now[0])

        def fold(n: int) -> str:  # exchange n, the newest of the conversation's last request
            told(summarizer, upstream, last_request(call_id=f"toolu_0{n}"))
            return summarizer.merge("", exchange(call_id=f"toolu_0{n}"))

        fold(1)  # 503: rests
        fold(2)  # resting: not asked
        assert len(upstream.generation_requests()) == 1
        now[0] = REST_SECONDS + 1
        assert fold(3).startswith("### Goal\n- Fix the failing build.")
        assert len(upstream.generation_requests()) == 2
        upstream.enqueue(Fault(status=401, message="invalid x-api-key"))
        fold(4)
        now[0] += 10 * REST_SECONDS
        fold(5)
        assert len(upstream.generation_requests()) == 3  # refused once: never asked again
    assert summarizer.last_used == "extractive"


def test_a_redirect_is_not_followed_so_the_credential_stays_with_its_upstream():
    with ScriptedUpstream() as elsewhere, ScriptedUpstream() as upstream:
        moved = f"{elsewhere.base_url}/v1/messages"
        upstream.enqueue(Fault(status=307, message="moved", headers={"location": moved}))
        summarizer = UpstreamSummarizer(ExtractiveSummarizer())
        told(summarizer, upstream, last_request())
        assert summarizer.merge("", exchange())
        assert elsewhere.requests == [] and summarizer.last_used == "extractive"


def test_condense_and_batch_are_extractive():
    summarizer = UpstreamSummarizer(ExtractiveSummarizer())
    long = "### Goal\n" + "\n".join(f"- item {i} " + "word " * 30 for i in range(40))
    assert len(summarizer.condense(long, 100)) < len(long)
    assert summarizer.batch("", exchange()) and summarizer.last_used == "extractive"


# ------------------------------------------------------------------ the wire


def test_the_anthropic_body_keeps_everything_but_the_stream_and_the_bound():
    body = {**last_request(), "thinking": {"type": "enabled", "budget_tokens": 4000}, "tool_choice": {"type": "auto"}}
    out = summary_body(ANTHROPIC, body, "notes please", 2000)
    assert list(out) == list(body)  # key order kept: the cached parts serialize as they did
    assert out["max_tokens"] == 6000 and out["stream"] is False
    assert out["tool_choice"] == body["tool_choice"] and out["thinking"] == body["thinking"]
    assert out["messages"][:-1] == body["messages"]
    assert out["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "notes please"}]}


def test_the_openai_body_bounds_the_output_in_the_field_the_client_used():
    base = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "stream": True, "n": 2}
    plain = summary_body(OPENAI_CHAT, {**base, "max_tokens": 100, "stream_options": {"include_usage": True}}, "x", 500)
    assert plain["max_tokens"] == 500 and "max_completion_tokens" not in plain
    assert "stream_options" not in plain and "n" not in plain and plain["stream"] is False
    reasoning = summary_body(OPENAI_CHAT, {**base, "max_completion_tokens": 9000}, "x", 500)
    assert reasoning["max_completion_tokens"] == 500 and "max_tokens" not in reasoning
    assert summary_body(OPENAI_CHAT, base, "x", 500)["max_completion_tokens"] == 500
    with pytest.raises(ValueError):
        summary_body(ANTHROPIC, {"messages": []}, "x", 500)


def test_the_responses_body_appends_one_message_item_and_stores_nothing():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "call_1", "name": "Bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    ]
    body = {"model": "gpt", "instructions": "sys", "input": items, "store": True, "stream": True, "tools": []}
    out = summary_body(OPENAI_RESPONSES, body, "notes please", 700)
    assert out["input"][:-1] == items and out["input"][-1]["content"] == [
        {"type": "input_text", "text": "notes please"}
    ]
    assert out["store"] is False and out["stream"] is False and out["max_output_tokens"] == 700
    assert out["instructions"] == "sys" and list(out)[: len(body)] == list(body)
    assert [t.key for t in request_turns(OPENAI_RESPONSES, body)] == ["call_1"]
    with pytest.raises(ValueError):
        summary_body(OPENAI_RESPONSES, {"input": "a string"}, "x", 5)


def test_a_responses_answer_is_read_and_its_calls_and_cutoffs_refused():
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": NOTES}]}
    usage = {"input_tokens": 9000, "input_tokens_details": {"cached_tokens": 8192}, "output_tokens": 90}
    done = {"status": "completed", "output": [{"type": "reasoning", "summary": []}, message], "usage": usage}
    assert read_answer(OPENAI_RESPONSES, done, "u") == Answer(NOTES, 9000, 8192, None, 90)
    call = {"status": "completed", "output": [{"type": "function_call", "call_id": "c", "name": "Bash"}]}
    with pytest.raises(Exception, match="called a tool"):
        read_answer(OPENAI_RESPONSES, call, "u")
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [message]}
    with pytest.raises(Exception, match="cut off"):
        read_answer(OPENAI_RESPONSES, cut, "u")
    refused = {"status": "completed", "output": [{**message, "content": [{"type": "refusal", "refusal": "no"}]}]}
    with pytest.raises(Exception, match="refused"):
        read_answer(OPENAI_RESPONSES, refused, "u")


@pytest.mark.parametrize(
    ("api", "payload", "error"),
    [
        (ANTHROPIC, {"content": [{"type": "text", "text": "no"}], "stop_reason": "refusal"}, "refusal"),
        (ANTHROPIC, {"content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]}, "called a tool"),
        (ANTHROPIC, {"content": [{"type": "text", "text": "### Goal\n- a"}], "stop_reason": "max_tokens"}, "cut off"),
        (
            OPENAI_CHAT,
            {"choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}]},
            "refused",
        ),
        (
            OPENAI_CHAT,
            {"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]},
            "content_filter",
        ),
        (OPENAI_CHAT, [], "not a JSON object"),
    ],
)
def test_an_answer_that_is_not_a_summary_is_refused(api: str, payload: Any, error: str):
    with pytest.raises(Exception, match=error):
        read_answer(api, payload, "upstream")


def test_the_usage_of_an_answer_is_read_for_the_bill():
    anthropic = {
        "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": NOTES}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 700,
            "cache_read_input_tokens": 90_000,
            "cache_creation_input_tokens": 0,
            "output_tokens": 150,
        },
    }
    assert read_answer(ANTHROPIC, anthropic, "u") == Answer(NOTES, 90_700, 90_000, 0, 150)
    openai = {
        "choices": [{"message": {"content": NOTES}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9000, "completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 8064}},
    }
    assert read_answer(OPENAI_CHAT, openai, "u") == Answer(NOTES, 9000, 8064, None, 80)


def test_the_turns_of_a_request_are_keyed_as_the_session_keys_them():
    body = last_request()
    marker = f"{MARKER_PREFIX}\n\n## Summary\n\n- x\n\n{MARKER_END}"
    body["messages"][1]["content"].insert(0, {"type": "text", "text": marker})  # a marker merged in front
    body["messages"].append({"role": "assistant", "content": "All done."})
    turns = request_turns(ANTHROPIC, body)
    assert [t.key for t in turns] == ["toolu_01", text_key("All done.")]
    assert turns[0].words == "Reading the build log." and turns[0].calls == ("toolu_01 (Bash)",)
    assert session_keys([*exchange(), {"role": "assistant", "content": "All done."}]) == [t.key for t in turns]
    said = request_turns(ANTHROPIC, last_request(said=SECRET))
    assert SECRET not in said[0].words


def test_a_note_lacking_a_line_is_no_note():
    turns = request_turns(ANTHROPIC, last_request())
    assert parse_notes(NOTES, turns)["toolu_01"].work == "The assistant ran make test and read the build log."
    assert parse_notes("### E1\nWork done: ran it.\nNext: more.", turns) == {}
    assert parse_notes("### E7\n" + NOTE, turns) == {}  # a label that was not asked for


# ------------------------------------------------------------------ config and command line


def test_the_config_builds_the_upstream_summarizer_with_the_extractive_behind_it():
    cfg = parse_config({"auxiliary": {"compression": {"provider": "upstream"}}})
    assert cfg.auxiliary.compression.kind == "upstream"
    summarizer = summarizer_for(cfg)
    assert isinstance(summarizer, UpstreamSummarizer) and summarizer.fallback.name == "extractive"
    assert summarizer.max_output_tokens == cfg.summarizer_output_tokens()
    pricing = cfg.cache_pricing("anthropic", "claude-sonnet-4-5")
    assert pricing is not None and pricing.summarizer_input == 0.0  # its calls are billed from their usage


def test_replay_refuses_the_upstream_summarizer_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    config = tmp_path / "c.yaml"
    config.write_text("auxiliary:\n  compression:\n    provider: upstream\n")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    result = CliRunner().invoke(app, ["replay", str(transcript), "--config", str(config)])
    assert result.exit_code != 0
    assert "provider: upstream" in result.output and "replay has no upstream" in result.output
    assert "Traceback" not in result.output


def test_serve_refuses_an_unknown_summarizer_in_one_line():
    result = CliRunner().invoke(app, ["serve", "--summarizer", "gpt"])
    assert result.exit_code != 0 and "--summarizer: expected extractive or upstream, got 'gpt'" in result.output


def test_serve_summarizer_option_beats_the_config_file(tmp_path: Path):
    from microcompact.server.run import proxy_config

    config = tmp_path / "c.yaml"
    config.write_text("auxiliary:\n  compression:\n    provider: extractive\n")
    assert proxy_config(config, None, "upstream").auxiliary.compression.provider == "upstream"
    assert proxy_config(config, None).auxiliary.compression.provider == "extractive"


def test_the_request_never_shows_its_credential_or_body():
    request = UpstreamRequest(ANTHROPIC, "https://x/v1/messages", (("x-api-key", SECRET),), b'{"secret": 1}')
    assert SECRET not in repr(request) and "secret" not in repr(request)
    assert httpx.URL(request.url).host == "x"
