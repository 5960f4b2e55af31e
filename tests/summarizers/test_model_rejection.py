"""A model's answer is checked before use, over real HTTP: rejected answers get one changed retry, then the
deterministic summary absorbs the exchange at once (outcome ``model_rejected``, never ``absorbed``, never a
skip); a server's "does not fit my context" error shrinks the input instead of being retried as it was.

The server here is a small scripted OpenAI-compatible endpoint on 127.0.0.1: each test gives it a function
from the request body to (HTTP status, JSON body), so it can answer like llama.cpp, vLLM or OpenAI do.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.events import Outcome
from microcompact.messages import marker_body, marker_kind
from microcompact.report import build_report
from microcompact.session import Session
from microcompact.summarizers import OpenAISummarizer, SummaryRejected
from microcompact.tokens import EstimateCounter, TokenCounter
from support.chat_server import notes

Script = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
KEY_ENV = "MICROCOMPACT_TEST_REJECTION_KEY"


class ScriptedServer:
    """POST /v1/chat/completions answered by ``script``; every request body is kept."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                server.requests.append(body)
                status, payload = server.script(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script) -> ScriptedServer:
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def completion(content: str, finish_reason: str = "stop") -> tuple[int, dict[str, Any]]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
    return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}


def user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def summarizer(server: ScriptedServer, **kw: Any) -> OpenAISummarizer:
    return OpenAISummarizer("m", base_url=server.base_url, api_key_env=KEY_ENV, timeout=5.0, **kw)


def bash(cid: str, command: str, output: str, text: str) -> list[dict[str, Any]]:
    call = {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"command": command})}}
    return [
        {"role": "assistant", "content": text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def turn(n: int, size: int = 150) -> list[dict[str, Any]]:
    """A user request and the agent's work on it: a test run in src/mod{n}.py, with a long output."""
    return [
        {"role": "user", "content": f"request {n}: fix src/mod{n}.py"},
        *bash(f"c{n}", f"pytest tests/test_mod{n}.py", f"tests/test_mod{n}.py ok\n" * size + "3 passed", "Testing."),
        {"role": "assistant", "content": f"Fixed src/mod{n}.py."},
    ]


def session(server: ScriptedServer, **kw: Any) -> Session:
    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
        }
    )
    return Session(config, summarizer(server, **kw), counter=TokenCounter(EstimateCounter()), session_id="rej")


# --------------------------------------------------------------------------- rejection, one changed retry


def test_an_echoing_model_gets_one_changed_retry_then_the_deterministic_summary_absorbs(
    serve: Callable[[Script], ScriptedServer], caplog: pytest.LogCaptureFixture
) -> None:
    """The 0.5B's failure: the previous summary back, unchanged, every time."""
    caplog.set_level(logging.INFO, logger="microcompact")

    def echo_previous(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        previous = user_text(body).split("NOTES SO FAR:\n", 1)[1].split("\n\nNEW EXCERPT:", 1)[0]
        if previous.startswith("(empty"):
            return completion(notes("Ran `pytest tests/test_mod0.py`: 3 passed.", goal="Fix src/mod0.py."))
        return completion(previous + " password=hunter2hunter2")  # the previous notes, and a secret

    server = serve(echo_previous)
    s = session(server)
    s.extend([{"role": "system", "content": "You are an agent."}, *turn(0), *turn(1), *turn(2)])
    outcomes: list[str] = []
    for n in range(3, 9):
        s.extend(turn(n))
        outcomes += [r.outcome for r in s.finalize_turn()]
    assert outcomes[0] == Outcome.ABSORBED  # the first notes are new: accepted
    assert Outcome.MODEL_REJECTED in outcomes
    assert "exchange_skipped" not in outcomes and "summarize_failed" not in outcomes
    rejected_passes = outcomes.count(Outcome.MODEL_REJECTED)
    assert len(server.requests) == 1 + 2 * rejected_passes  # one retry per rejected answer, no more
    bodies = [json.dumps(r["messages"]) for r in server.requests]
    assert len(set(bodies)) == len(bodies), "the same request was sent twice"
    retry = user_text(server.requests[2])
    assert "Your previous answer was rejected (repeats the previous summary" in retry

    # the rejections are logged with the check's reason and a redacted excerpt
    logged = [r.getMessage() for r in caplog.records if "answer rejected" in r.getMessage()]
    assert len(logged) == 2 * rejected_passes
    assert all("unchanged: repeats the previous summary" in line for line in logged)
    assert all("hunter2hunter2" not in line and "[REDACTED]" in line for line in logged)

    # the deterministic summary took over: the marker names what the model's answers dropped
    (marker,) = [m for m in s.transcript if marker_kind(m) == "micro"]
    assert "test_mod3.py" in marker_body(marker)


def test_model_rejected_is_reported_apart_from_absorbed(
    serve: Callable[[Script], ScriptedServer], tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    server = serve(lambda body: completion("### Summary\nAll good."))  # never the template: always rejected
    s = session(server)
    s.extend([{"role": "system", "content": "You are an agent."}, *turn(0), *turn(1), *turn(2)])
    results = []
    for n in range(3, 6):
        s.extend(turn(n))
        results += s.finalize_turn()
    assert [r.outcome for r in results] == [Outcome.MODEL_REJECTED] * 3
    assert all(r.record["rejected"] == "missing_sections" for r in results)
    assert all(r.record["tokens_delta"] < 0 for r in results)  # the exchanges were absorbed all the same
    log = tmp_path / "agent.log"
    log.write_text("\n".join(r.getMessage() for r in caplog.records if "telemetry" in r.getMessage()) + "\n")
    report = build_report([log])
    assert report["activity"]["model_rejected"] == 3
    assert report["activity"]["rejections"] == {"missing_sections": 3}
    (row,) = report["per_session"]
    assert (row["absorbed"], row["model_rejected"], row["committed_passes"]) == (0, 3, 3)


def test_a_cut_off_answer_is_retried_once_with_a_smaller_input(serve: Callable[[Script], ScriptedServer]) -> None:
    answers = iter(["### Goal\nCopying the input: tests/test_mod3.py ok tests/test_mod3.py ok", None])

    def script(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        first = next(answers)
        if first is not None:
            return completion(first, finish_reason="length")
        return completion(notes("Ran `pytest tests/test_mod3.py`: 3 passed."))

    server = serve(script)
    out = summarizer(server).merge("", turn(3, size=400)[1:])
    assert out.startswith("### Goal\nnone\n### Work done\nRan `pytest tests/test_mod3.py`")
    first, retry = (user_text(r) for r in server.requests)
    assert len(retry) < 0.7 * len(first)  # the changed request: half the exchange
    assert "characters omitted by microcompact" in retry


def test_a_cut_off_condense_is_retried_once_with_a_note(serve: Callable[[Script], ScriptedServer]) -> None:
    answers = iter(
        [("### Goal\nFix src/mod3.py. " + "Fix src/mod3.py. " * 50, "length"), (notes("Fixed src/mod3.py."), "stop")]
    )
    server = serve(lambda body: completion(*next(answers)))
    out = summarizer(server).condense(notes("Fixed src/mod3.py after a long search."), 400)
    assert out == notes("Fixed src/mod3.py.")
    first, retry = (user_text(r) for r in server.requests)
    assert retry.startswith(first) and "Your previous answer was rejected (m: output was cut off" in retry


def test_a_second_rejection_raises_with_the_reason(serve: Callable[[Script], ScriptedServer]) -> None:
    server = serve(lambda body: completion(notes("Edited lib/spotter_services/waiting_summary.ex.")))
    exchange = bash("c1", "cat lib/spotter/services/waiting_summary.ex", "defmodule Spotter.Services", "Reading.")
    with pytest.raises(SummaryRejected) as caught:
        summarizer(server).merge("", exchange)
    assert caught.value.rejection.code == "unknown_path"
    assert len(server.requests) == 2
    assert "lib/spotter_services/waiting_summary.ex, which the input does not show" in user_text(server.requests[1])


# --------------------------------------------------------------------------- the facts hook


def test_facts_from_the_hook_sit_beside_the_notes_and_are_trusted(serve: Callable[[Script], ScriptedServer]) -> None:
    server = serve(lambda body: completion(notes("Ran the tests; src/ledger_only.py is unchanged.")))
    calls: list[tuple[str | None, int]] = []

    def facts(previous: str | None, messages: Any) -> str:
        calls.append((previous, len(messages)))
        return "### Files\n- src/ledger_only.py: edited 3x"

    hooked = summarizer(server, facts=facts)
    previous = "### Work done\nEarlier work.\n### Requirements\n- keep the API\n### Files\n- src/old.py: read"
    out = hooked.merge(previous, turn(3)[1:3])
    # the notes, the previous summary's other sections as they were, the hook's ledger instead of the old one
    kept = "### Requirements\n- keep the API\n\n### Files\n- src/ledger_only.py: edited 3x"
    assert out == notes("Ran the tests; src/ledger_only.py is unchanged.") + "\n\n" + kept
    assert calls == [(previous, 2)]
    # the model sees its own notes only, never the facts: it cannot corrupt them
    sent = user_text(server.requests[0])
    assert "Earlier work." in sent and "src/old.py" not in sent
    # without the hook the path is unknown (the model made it up): rejected
    with pytest.raises(SummaryRejected):
        summarizer(server).merge("", turn(3)[1:3])


# --------------------------------------------------------------------------- context-size errors


def llama_cpp(n_ctx: int, n_prompt: int) -> dict[str, Any]:
    message = "the request exceeds the available context size, try increasing it"
    return {
        "error": {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n_prompt,
            "n_ctx": n_ctx,
        }
    }


def llama_cpp_old(n_ctx: int, n_prompt: int) -> dict[str, Any]:
    return {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "invalid_request_error",
        }
    }


def vllm(n_ctx: int, n_prompt: int) -> dict[str, Any]:
    message = (
        f"This model's maximum context length is {n_ctx} tokens. However, you requested {n_prompt + 512} tokens "
        f"({n_prompt} in the messages, 512 in the completion). Please reduce the length of the messages or completion."
    )
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


def openai_shape(n_ctx: int, n_prompt: int) -> dict[str, Any]:
    message = (
        f"This model's maximum context length is {n_ctx} tokens. However, your messages resulted in {n_prompt} "
        "tokens. Please reduce the length of the messages."
    )
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def context_server(shape: Callable[[int, int], dict[str, Any]], n_ctx: int) -> Script:
    """A server with a real context: a request whose prompt (4 characters a token) plus max_tokens does not
    fit ``n_ctx`` gets HTTP 400 in ``shape``; one that fits gets a summary."""

    def script(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        if prompt + body["max_tokens"] > n_ctx:
            return 400, shape(n_ctx, prompt)
        test_files = re.findall(r"tests/test_mod\d+\.py", user_text(body).split("NEW EXCERPT:")[-1])
        assert test_files, "the shrunk request lost the exchange's command"
        return completion(notes(f"Ran `pytest {test_files[0]}` ({prompt} tokens read).", findings="3 passed."))

    return script


@pytest.mark.parametrize("shape", [llama_cpp, llama_cpp_old, vllm, openai_shape])
def test_a_context_size_error_shrinks_the_input_to_fit_at_once(
    serve: Callable[[Script], ScriptedServer], shape: Callable[[int, int], dict[str, Any]]
) -> None:
    server = serve(context_server(shape, n_ctx=2048))
    model = summarizer(server, max_output_tokens=512)
    exchange = turn(3, size=400)[1:3]  # about 3,000 tokens: does not fit 2,048
    start = time.monotonic()
    out = model.merge("", exchange)
    assert time.monotonic() - start < 3.0, "a context error was waited on, not shrunk"
    assert "Ran `pytest tests/test_mod3.py`" in out
    first, second = server.requests
    assert len(user_text(second)) < len(user_text(first))
    if shape is not llama_cpp_old:  # the server said its size: remembered, the next call fits the first time
        assert model.context_limit == 2048
        model.merge("", turn(4, size=400)[1:3])
        assert len(server.requests) == 3


def test_a_context_too_small_for_any_exchange_says_what_to_change(serve: Callable[[Script], ScriptedServer]) -> None:
    server = serve(context_server(llama_cpp, n_ctx=1100))
    with pytest.raises(SummaryRejected) as caught:
        summarizer(server, max_output_tokens=1024).merge("", turn(3, size=400)[1:3])
    assert caught.value.rejection.code == "context_size"
    assert "raise the server's context size or lower max_output_tokens" in str(caught.value)
    assert len(server.requests) == 1  # nothing that could fit was sent again


def test_through_a_session_a_context_error_never_costs_a_failed_pass(serve: Callable[[Script], ScriptedServer]) -> None:
    server = serve(context_server(vllm, n_ctx=1800))
    s = session(server, max_output_tokens=512)
    s.extend([{"role": "system", "content": "You are an agent."}, *turn(0, 400), *turn(1, 400), *turn(2, 400)])
    outcomes = []
    for n in range(3, 6):
        s.extend(turn(n, 400))
        outcomes += [r.outcome for r in s.finalize_turn()]
    assert outcomes and set(outcomes) == {Outcome.ABSORBED}
    statuses_400 = len(server.requests) - len(outcomes)
    assert statuses_400 == 1  # learned once, then every request fits


# --------------------------------------------------------------------------- the configured model keeps the ledger


def test_a_configured_model_summary_keeps_the_file_ledger_beside_its_notes(
    serve: Callable[[Script], ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auxiliary.compression`` with a model: session.summarizer_for wires the deterministic facts in, so the
    marker names the files and failing commands whatever the model wrote."""
    server = serve(lambda body: completion(notes("Fixed the modules.")))
    monkeypatch.setenv(KEY_ENV, "sk-test")
    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
            "auxiliary": {
                "compression": {
                    "provider": "openai",
                    "model": "m",
                    "base_url": server.base_url,
                    "api_key_env": KEY_ENV,
                    "timeout": 5,
                }
            },
        }
    )
    s = Session(config, counter=TokenCounter(EstimateCounter()), session_id="facts")
    edit = {
        "id": "e1",
        "type": "function",
        "function": {"name": "Edit", "arguments": json.dumps({"file_path": "src/ledger_file.py", "old_string": "a"})},
    }
    s.extend(
        [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "Editing.", "tool_calls": [edit]},
            {"role": "tool", "tool_call_id": "e1", "content": "The file src/ledger_file.py has been updated."},
            *bash("c9", "make check", "error: missing symbol\nexit status 2", "Checking."),
            {"role": "assistant", "content": "Done."},
        ]
    )
    for n in range(1, 6):
        s.extend(turn(n))
        s.finalize_turn()
    body = next(marker_body(m) for m in s.transcript if marker_kind(m) == "micro")
    assert "Fixed the modules." in body
    assert "src/ledger_file.py" in body and "### Files" in body
    assert server.requests, "the model was asked"
