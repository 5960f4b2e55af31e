"""What a caller gets from a summarizer: the model's own answer (not a canned one), the settings it configured,
every fact of the exchange sent, and the summarizer it asked ``make_summarizer`` for, working.

These replace tests that checked the fake server's canned reply, ``isinstance`` and a ``name`` attribute. The
server here answers with text computed from each request, so an answer can only match when the summarizer
really sent that request and really returned what came back.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest

from microcompact.config import parse_config
from microcompact.messages import marker_body, marker_kind
from microcompact.session import Session
from microcompact.summarizers import MERGE_PROMPT, OpenAISummarizer, make_summarizer
from microcompact.tokens import EstimateCounter, TokenCounter
from support.chat_server import ChatServer, notes

KEY_ENV = "MICROCOMPACT_TEST_CONTRACT_KEY"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


def exchange(call_id: str, command: str, output: str, text: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": command})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def digest_answer(request: dict[str, Any]) -> str:
    """An answer no canned reply can match: it names the request's model and a digest of what was sent."""
    sent = request["messages"][-1]["content"]
    return notes(f"{request['model']} read {hashlib.sha256(sent.encode()).hexdigest()[:16]}")


EXCHANGE = exchange(
    "call_migrate",
    "alembic upgrade head",
    "Running upgrade 41c -> 7fa, add index on users.email",
    "Applying the pending migration.",
)


def test_the_summary_is_the_models_answer_to_the_request_carrying_every_fact(chat_server: ChatServer) -> None:
    chat_server.responder = digest_answer
    summarizer = OpenAISummarizer(
        "summarizer-small",
        base_url=chat_server.base_url,
        api_key_env=KEY_ENV,
        timeout=2.0,
        max_output_tokens=300,
        temperature=0.1,
    )
    previous = "### Decisions\n- keep the API stable"

    summary = summarizer.merge(previous, EXCHANGE)

    (request,) = chat_server.requests
    # what the model said, for this very request, with the previous summary's facts kept beside it by code
    assert summary == digest_answer(request) + "\n\n" + previous
    assert (request["model"], request["max_tokens"], request["temperature"]) == ("summarizer-small", 300, 0.1)
    system, user = request["messages"]
    assert system == {"role": "system", "content": MERGE_PROMPT}
    for fact in (
        "keep the API stable",
        "call_migrate",
        "alembic upgrade head",
        "Running upgrade 41c -> 7fa",
        "Applying the pending migration.",
    ):
        assert fact in user["content"], fact


def test_a_slow_model_within_the_timeout_still_gives_its_answer(chat_server: ChatServer) -> None:
    chat_server.responder = digest_answer
    chat_server.latency = 0.3
    summarizer = OpenAISummarizer("m", base_url=chat_server.base_url, api_key_env=KEY_ENV, timeout=2.0)
    start = time.monotonic()
    summary = summarizer.merge("", EXCHANGE)
    assert time.monotonic() - start >= 0.3  # it really waited for the answer
    assert summary == digest_answer(chat_server.requests[0])


def test_make_summarizer_gives_a_working_summarizer_of_the_kind_asked_for(chat_server: ChatServer) -> None:
    chat_server.responder = digest_answer
    remote = make_summarizer(
        "openai", model="ops-model", base_url=chat_server.base_url, api_key_env=KEY_ENV, timeout=2.0
    )
    assert remote.merge("", EXCHANGE) == digest_answer(chat_server.requests[0])
    assert chat_server.requests[0]["model"] == "ops-model"

    local = make_summarizer("extractive", count_text=EstimateCounter().count)
    offline = local.merge("", EXCHANGE)  # no request: the extractive summarizer never calls out
    assert len(chat_server.requests) == 1
    assert "alembic upgrade head" in offline

    with pytest.raises(ValueError, match=r"unknown summarizer kind 'anthropic' \(expected 'extractive' or 'openai'\)"):
        make_summarizer("anthropic")


def test_the_extractive_summarizer_compacts_a_session_offline_and_names_itself_in_telemetry() -> None:
    """The default summarizer, through a Session: the exchange's command and result end up in the marker, and
    the pass record names the summarizer (``aux_model``), which ``microcompact report`` shows per pass."""
    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "micro_compact_max_exchange_tokens": 4000},
            "model": {"context_length": 20_000},
        }
    )
    session = Session(config, counter=TokenCounter(EstimateCounter()), session_id="contract")
    session.extend(
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "apply the pending migration"},
            *EXCHANGE,
            {"role": "assistant", "content": "Migration applied."},
        ]
    )
    results = []
    for n in range(8):  # enough later turns (about 300 tokens each) to push the first exchange out of the tail
        session.extend(
            [
                {"role": "user", "content": f"next task {n}"},
                *exchange(f"call_{n}", f"pytest -k case_{n}", f"case_{n} passed " * 80, f"Testing {n}."),
                {"role": "assistant", "content": f"task {n} done"},
            ]
        )
        results += session.finalize_turn()
    absorbed = [r for r in results if r.outcome == "absorbed"]
    assert absorbed and {r.record["aux_model"] for r in absorbed} == {"extractive"}
    (marker,) = [m for m in session.transcript if marker_kind(m) == "micro"]
    assert "alembic upgrade head" in marker_body(marker)
