"""Micro-compaction through a Session whose summarizer is an OpenAISummarizer talking HTTP to a local server.

What production does, end to end: the engine picks an exchange, the official SDK sends it to a real
chat-completions endpoint (``tests/chat_server.py``), the answer becomes the rolling-summary marker. Faults
come from the server (HTTP errors, hangs, empty or echoed output), never from mocks.
"""

from __future__ import annotations

import json
import logging
import random
import string
import time
from functools import partial
from typing import Any

import pytest

from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import marker_body, marker_count, marker_kind
from microcompact.redact import REDACTED
from microcompact.session import Session
from microcompact.summarizers import BATCH_PROMPT, MERGE_PROMPT, OpenAISummarizer
from microcompact.telemetry import parse_line
from microcompact.tokens import EstimateCounter, TokenCounter
from support import builders
from support.chat_server import ChatServer, notes
from support.secrets_table import OPENAI_PROJECT

KEY_ENV = "MICROCOMPACT_TEST_HTTP_SUMMARIZER_KEY"
MODEL = "test-model"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


# 20K tokens: a tail budget of 2,000
config = partial(builders.config, protect_first_n=3, micro_compact_max_exchange_tokens=4000)


def session(server: ChatServer, *, timeout: float = 2.0, **compression: Any) -> Session:
    summarizer = OpenAISummarizer(MODEL, base_url=server.base_url, api_key_env=KEY_ENV, timeout=timeout)
    return Session(config(**compression), summarizer, counter=TokenCounter(EstimateCounter()), session_id="http")


def call(cid: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": json.dumps(arguments)}}


def turn(n: int, iterations: int = 2, size: int = 200) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"request {n}: keep going"}]
    for k in range(iterations):
        cid = f"c{n}_{k}"
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {k} of request {n}",
                "tool_calls": [call(cid, {"command": f"ls dir{n}_{k}"})],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"entry{n} " * size})
    msgs.append({"role": "assistant", "content": f"request {n} done"})
    return msgs


def prefill(s: Session, turns: int) -> list[dict[str, Any]]:
    """``turns`` turns appended without hooks: the next ``finalize_turn`` has exchanges to absorb."""
    msgs = [m for i in range(turns) for m in turn(i)]
    s.extend(msgs)
    return msgs


def end_turn(s: Session, n: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """Append turn ``n`` and finalize it; returns (results, the turn's messages)."""
    msgs = turn(n)
    s.extend(msgs)
    return s.finalize_turn(), msgs


def ids_in(request: dict[str, Any]) -> set[str]:
    """Tool-call ids a merge request carries (``TOOL CALL [id]``)."""
    text = request["messages"][1]["content"]
    return {part.split("]", 1)[0] for part in text.split("TOOL CALL [")[1:]}


def the_marker(s: Session) -> dict[str, Any]:
    (marker,) = [m for m in s.transcript if marker_kind(m) == "micro"]
    return marker


def strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if not k.startswith("_")}


def check(s: Session, original: list[dict[str, Any]]) -> None:
    out = s.transcript
    assert user_message_errors(original, out) == []
    assert role_sequence_errors(out) == []
    assert marker_count(out, "micro") <= 1


# --------------------------------------------------------------------------- success and latency


def test_success_marker_body_is_what_the_server_returned_redacted(chat_server: ChatServer) -> None:
    def responder(request: dict[str, Any]) -> str:
        n = len(chat_server.requests)
        return notes(f"Pass {n}: moved the cache to Redis.", findings=f"Deploy with password=hunter2hunter{n}")

    chat_server.responder = responder
    s = session(chat_server)
    original = prefill(s, 8)
    results, msgs = end_turn(s, 8)
    original += msgs
    assert [r.outcome for r in results] == ["absorbed"]
    assert results[0].record["aux_model"] == MODEL
    expected = notes("Pass 1: moved the cache to Redis.", findings=f"Deploy with password={REDACTED}")
    assert marker_body(the_marker(s)) == expected
    (request,) = chat_server.requests
    assert request["model"] == MODEL
    system, user = request["messages"]
    assert system == {"role": "system", "content": MERGE_PROMPT}
    assert "(empty: this is the first excerpt)" in user["content"]
    assert ids_in(request), "the exchange's tool calls were not sent"

    # The next pass folds a new exchange into the (redacted) rolling summary the server wrote.
    results, msgs = end_turn(s, 9)
    original += msgs
    assert [r.outcome for r in results] == ["absorbed"]
    second = chat_server.requests[1]
    assert (
        f"moved the cache to Redis.\n### Findings\nDeploy with password={REDACTED}" in second["messages"][1]["content"]
    )
    assert not ids_in(second) & ids_in(request), "an exchange was summarized twice"
    assert "### Work done\nPass 2: moved" in marker_body(the_marker(s))
    check(s, original)


def test_latency_within_timeout_is_fine_and_timings_reflect_it(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    chat_server.latency = 0.3
    s = session(chat_server, timeout=2.0)
    prefill(s, 8)
    results, _ = end_turn(s, 8)
    assert [r.outcome for r in results] == ["absorbed"]
    record = results[0].record
    assert 300 <= record["summarizer_ms"] < 2000
    assert record["duration_ms"] >= record["summarizer_ms"]
    assert record["engine_ms"] < record["summarizer_ms"]
    assert abs(record["duration_ms"] - record["summarizer_ms"] - record["engine_ms"]) < 1.0
    assert s.micro.summarizer_ms_total >= 300
    lines = [parse_line(r.getMessage()) for r in caplog.records if r.name == "microcompact.telemetry"]
    assert [rec["summarizer_ms"] for kind, rec in lines if kind == "micro"] == [record["summarizer_ms"]]


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    "fault, error",
    [
        (429, "SummarizerRateLimited"),
        (500, "SummarizerUnavailable"),
        ("empty", "SummarizerBadOutput"),
        ("malformed", "SummarizerBadOutput"),
    ],
)
def test_failed_call_leaves_transcript_unchanged_then_succeeds(chat_server: ChatServer, fault: Any, error: str) -> None:
    s = session(chat_server)
    original = prefill(s, 8)
    first, msgs = end_turn(s, 8)  # one marker already, so "unchanged" covers the marker too
    original += msgs
    assert [r.outcome for r in first] == ["absorbed"]

    s.extend(turn(9))
    original += turn(9)
    before = json.dumps(s.transcript)
    chat_server.add_faults(fault)
    results = s.finalize_turn()  # never raises
    assert [r.outcome for r in results] == ["summarize_failed"]
    assert results[0].record["error"] == error
    assert results[0].record["tokens_delta"] == 0
    assert json.dumps(s.transcript) == before
    assert s.micro.state.passes_total == 1

    results, msgs = end_turn(s, 10)
    original += msgs
    assert [r.outcome for r in results] == ["absorbed"]
    failed, retried = chat_server.requests[1], chat_server.requests[2]
    assert failed["messages"] == retried["messages"], "the retry should carry the same exchange and summary"
    check(s, original)


def test_429_then_500_then_success_on_the_same_exchange(chat_server: ChatServer) -> None:
    s = session(chat_server)
    original = prefill(s, 8)
    chat_server.add_faults(429, 500)
    outcomes = []
    for n in (8, 9, 10):
        before = json.dumps(s.transcript)
        results, msgs = end_turn(s, n)
        original += msgs
        outcomes += [r.outcome for r in results]
        if results[0].outcome == "summarize_failed":
            after_append = json.loads(before) + msgs
            assert [strip(m) for m in s.transcript] == [strip(m) for m in after_append]
    assert outcomes == ["summarize_failed", "summarize_failed", "absorbed"]
    r1, r2, r3 = chat_server.requests
    assert r1["messages"] == r2["messages"] == r3["messages"]
    check(s, original)


def test_hang_longer_than_timeout_fails_the_pass_without_raising(chat_server: ChatServer) -> None:
    s = session(chat_server, timeout=0.5)
    original = prefill(s, 8)
    s.extend(turn(8))
    original += turn(8)
    before = json.dumps(s.transcript)
    chat_server.add_faults("hang")
    start = time.monotonic()
    results = s.finalize_turn()
    elapsed = time.monotonic() - start
    assert [r.outcome for r in results] == ["summarize_failed"]
    assert results[0].record["error"] == "SummarizerTimeout"
    assert 0.5 <= elapsed < 3.0
    assert results[0].record["summarizer_ms"] >= 500
    assert json.dumps(s.transcript) == before
    # the endpoint answers again: the next turn absorbs
    results, msgs = end_turn(s, 9)
    original += msgs
    assert [r.outcome for r in results] == ["absorbed"]
    check(s, original)


def test_three_failures_on_one_exchange_skip_it(chat_server: ChatServer) -> None:
    s = session(chat_server)
    original = prefill(s, 8)
    chat_server.add_faults(500, 500, 500)
    outcomes = []
    for n in (8, 9, 10, 11):
        results, msgs = end_turn(s, n)
        original += msgs
        outcomes += [r.outcome for r in results]
    assert outcomes == ["summarize_failed", "summarize_failed", "exchange_skipped", "absorbed"]
    r1, r2, r3, r4 = chat_server.requests
    assert r1["messages"] == r2["messages"] == r3["messages"]
    skipped = ids_in(r1)
    assert skipped and not skipped & ids_in(r4), "the skipped exchange was sent again"
    # the skipped exchange stays verbatim in the transcript
    kept = {tc["id"] for m in s.transcript for tc in (m.get("tool_calls") or [])}
    assert skipped <= kept
    check(s, original)


@pytest.mark.parametrize("fault", [401, "quota"])
def test_auth_errors_stop_micro_compaction_calls(chat_server: ChatServer, fault: Any) -> None:
    s = session(chat_server)
    prefill(s, 8)
    chat_server.add_faults(*[fault] * 50)
    outcomes = []
    for n in range(8, 20):
        results, _ = end_turn(s, n)
        outcomes += [r.outcome for r in results]
    assert "absorbed" not in outcomes
    assert len(chat_server.requests) <= s.config.compression.micro_compact_max_failures, (
        f"{len(chat_server.requests)} requests with a rejected key over 12 turns: {outcomes}"
    )


# --------------------------------------------------------------------------- defrag with an echoing model


def merge_or_echo(chat_server: ChatServer, echo: str):
    """Merges append one ~60-token bullet; condense requests (told apart by their system prompt) echo."""

    def responder(request: dict[str, Any]) -> str:
        system, user = (m["content"] for m in request["messages"])
        if system.startswith("You shorten"):  # a condense (its stated length varies)
            if echo == "summary":  # hands the summary back unchanged
                return user.split("NOTES TO SHORTEN:\n", 1)[1].split("\n\nNow write", 1)[0]
            return user  # the whole prompt, like the server's "echo" fault
        assert system == MERGE_PROMPT
        current = user.split("NOTES SO FAR:\n", 1)[1].split("\n\nNEW EXCERPT:", 1)[0]
        if current.startswith("(empty"):
            current = notes("Started.")
        n = len(chat_server.requests)
        return f"{current} Merge {n} moved item{n} to slot{n}: " + "noted " * 40

    return responder


@pytest.mark.parametrize("echo", ["summary", "whole prompt"])
def test_defrag_converges_with_an_echoing_model(chat_server: ChatServer, echo: str) -> None:
    threshold = 200
    chat_server.responder = merge_or_echo(chat_server, echo)
    s = session(chat_server, micro_compact_defrag_threshold_tokens=threshold)
    original = prefill(s, 6)
    records = []
    for n in range(6, 36):
        results, msgs = end_turn(s, n)
        original += msgs
        records += [r.record for r in results]
        # bounded at all times: at most one merge's growth above the threshold, never runaway
        assert s.micro.state.text_tokens <= threshold + 80
    defrags = [r for r in records if r["mode"] == "defrag"]
    absorbed = [r for r in records if r["outcome"] == "absorbed"]
    assert len(absorbed) >= 20
    assert len(defrags) >= 3
    assert len(defrags) <= len(absorbed) // 2, "defrag ran (almost) every turn"
    for r in defrags:
        assert r["outcome"] == ("defrag" if echo == "summary" else "defrag_failed")
        assert r["defrag_method"] == "deterministic"
        assert r["rolling_summary_tokens"] <= threshold // 2 < r["summary_tokens_before"]
    condense = [r for r in chat_server.requests if r["messages"][0]["content"].startswith("You shorten")]
    assert len(condense) == len(defrags), "every defrag asks the model first"
    assert marker_body(the_marker(s)).startswith("### Goal")
    check(s, original)


# --------------------------------------------------------------------------- secrets


def _secrets(rng: random.Random) -> dict[str, str]:
    alnum = string.ascii_letters + string.digits

    def rand(chars: str, n: int) -> str:
        while True:  # mixed letters and digits, like real generated keys
            s = "".join(rng.choice(chars) for _ in range(n))
            if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
                return s

    b64 = string.ascii_letters + string.digits + "+/"
    pem_lines = [rand(b64, 64) for _ in range(4)]
    return {
        "openai": "sk-proj-" + rand(alnum, 40),
        "aws": "AKIA" + rand(string.ascii_uppercase + string.digits, 16),
        "pg_password": rand(alnum, 18),
        "pem": "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(pem_lines) + "\n-----END RSA PRIVATE KEY-----",
        "pem_lines": "\n".join(pem_lines),
    }


def secret_needles(secrets: dict[str, str]) -> list[str]:
    """What must never be seen: each key, the password, every base64 line of the PEM body."""
    return [secrets["openai"], secrets["aws"], secrets["pg_password"], *secrets["pem_lines"].split("\n")]


def secret_turn(n: int, sec: dict[str, str]) -> list[dict[str, Any]]:
    url = f"postgres://app_user:{sec['pg_password']}@db.internal:5432/prod"
    cid_a, cid_b = f"s{n}_a", f"s{n}_b"
    return [
        {"role": "user", "content": f"request {n}: set up the deployment"},
        {
            "role": "assistant",  # secrets in assistant text
            "content": f"I'll use the key {sec['openai']} and AWS key {sec['aws']} against {url}.",
            "tool_calls": [
                call(
                    cid_a,
                    {
                        "command": f"OPENAI_API_KEY={sec['openai']} AWS_ACCESS_KEY_ID={sec['aws']} "
                        f"psql {url} -c 'select 1'"
                    },
                )
            ],
        },  # in tool-call arguments
        {
            "role": "tool",
            "tool_call_id": cid_a,  # in tool output
            "content": f"connected to {url}\nusing {sec['openai']} / {sec['aws']}\n" + "row ok\n" * 150,
        },
        {
            "role": "assistant",
            "content": "Writing the deploy key.",
            "tool_calls": [call(cid_b, {"path": "deploy/key.pem", "content": sec["pem"]})],
        },  # PEM in arguments
        {"role": "tool", "tool_call_id": cid_b, "content": f"wrote deploy/key.pem:\n{sec['pem']}\n" + "ok\n" * 150},
        {"role": "assistant", "content": f"Done; the key starts {sec['pem'][:80]}"},
    ]


def test_secrets_never_leave_and_never_come_back(chat_server: ChatServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="microcompact")
    rng = random.Random(20261130)
    returned = _secrets(rng)  # what a careless model puts in its summary

    def responder(request: dict[str, Any]) -> str:
        n = len(chat_server.requests)
        system = request["messages"][0]["content"]
        head = "### Goal\n- deploy" if system == BATCH_PROMPT else "### Decisions"
        return (
            f"{head}\n- pass {n}: used {returned['openai']} and {returned['aws']}\n"
            f"- db postgres://app_user:{returned['pg_password']}@db.internal:5432/prod\n"
            f"- key:\n{returned['pem']}"
        )

    chat_server.responder = responder
    s = session(chat_server)
    sent_secrets: list[str] = []
    transcript: list[dict[str, Any]] = []
    for n in range(14):
        sec = _secrets(rng)
        sent_secrets += secret_needles(sec)
        msgs = secret_turn(n, sec)
        transcript += msgs
        for m in msgs:
            if m["role"] == "user" and n:
                s.finalize_turn()
            if m["role"] == "assistant":
                s.before_request()
            s.append(m)
    s.finalize_turn()
    merges = [r for r in chat_server.requests if r["messages"][0]["content"] == MERGE_PROMPT]
    assert len(merges) >= 5
    batch = s.compact(focus="deployment")  # one batch request too
    assert batch.outcome in ("compacted", "user_floor_exceeded")
    assert chat_server.requests[-1]["messages"][0]["content"] == BATCH_PROMPT

    wire = json.dumps(chat_server.requests)
    contents = "\n".join(m["content"] for r in chat_server.requests for m in r["messages"])
    assert REDACTED in contents
    for needle in sent_secrets + secret_needles(returned):
        assert needle in json.dumps(transcript) or needle in json.dumps(returned)
        assert needle not in wire, f"secret {needle[:12]}... reached the summarizer endpoint"
        assert needle not in contents
    # what the server said comes back redacted in the marker(s)
    markers = [m for m in s.transcript if marker_kind(m) is not None]
    assert markers
    for m in markers:
        body = marker_body(m)
        assert REDACTED in body
        for needle in secret_needles(returned):
            assert needle not in body
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for needle in sent_secrets + secret_needles(returned):
        assert needle not in logged


def test_an_error_answer_quoting_a_secret_is_redacted_in_the_log(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's error message may quote what it was sent or a header; it reaches the log redacted."""
    secret = OPENAI_PROJECT
    s = session(chat_server)
    prefill(s, 8)
    end_turn(s, 8)
    s.extend(turn(9))
    chat_server.add_faults((400, f"Invalid 'Authorization' value near {secret} in the request"))
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        results = s.finalize_turn()
    assert [r.outcome for r in results] == ["summarize_failed"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Invalid 'Authorization' value" in logged and REDACTED in logged
    assert secret not in logged
    assert secret[-12:] not in logged
