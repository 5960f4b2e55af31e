"""Every format of the shared secrets table, planted in a transcript, stays out of what compaction produces.

A micro pass and a batch compaction with the offline extractive summarizer leave none in the markers, and
the HTTP summarizer's requests to a real chat-completions server on 127.0.0.1 carry none. Each test also
runs once with the summarizer's redaction hook switched off, to show the planted secrets would otherwise
get through (so the test can fail).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import microcompact.summarizers.http as summarizer_http
import microcompact.summarizers.input as summarizer_input
import microcompact.summarizers.validation as summarizer_validation
from microcompact.config import parse_config
from microcompact.messages import marker_kind
from microcompact.session import Session
from microcompact.summarizers import OpenAISummarizer
from microcompact.tokens import EstimateCounter, TokenCounter
from support.chat_server import ChatServer
from support.secrets_table import SECRET_FORMATS


def _no_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summarizer_input, "redact_message", lambda m: dict(m))
    for module in (summarizer_http, summarizer_validation):  # the request, the reply, the accepted summary
        monkeypatch.setattr(module, "redact_text", lambda t: t)


def planted_turn(n: int, text: str, padding: int = 0) -> list[dict[str, Any]]:
    """One exchange carrying ``text`` in a command, a tool output and the final answer."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"command": text})}}
    return [
        {"role": "user", "content": f"request {n}: show the config"},
        {"role": "assistant", "content": f"Let me check config {n}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"{text}\n{'ok ' * padding}exit code 0"},
        {"role": "assistant", "content": f"Found it: {text}"},
    ]


def leaked(text: str, rows: list[tuple[str, str, str]] = SECRET_FORMATS) -> list[str]:
    """Names of the formats whose secret appears in ``text`` (as is, or JSON-escaped)."""
    return [name for name, _, secret in rows if secret in text or json.dumps(secret)[1:-1] in text]


def counter() -> TokenCounter:
    return TokenCounter(EstimateCounter())


MICRO = {
    "compression": {"micro_compact": True, "protect_first_n": 1, "target_ratio": 0.05},
    "model": {"context_length": 20_000},
}  # a 500-token tail: each exchange leaves it a few turns later
FILLER_TURNS = 12


def run_micro(s: Session, rows: list[tuple[str, str, str]]) -> list[str]:
    """One planted exchange per row, then filler turns until every planted one was absorbed; returns every
    micro marker seen along the way."""
    s.append({"role": "system", "content": "be brief"})
    seen: list[str] = []
    turns = [planted_turn(n, text) for n, (_, text, _) in enumerate(rows)]
    turns += [planted_turn(len(rows) + k, "nothing to see") for k in range(FILLER_TURNS)]
    for messages in turns:
        s.extend(messages)
        s.finalize_turn()
        seen += [m["content"] for m in s.transcript if marker_kind(m) == "micro"]
    assert seen, "micro passes should have run"
    return seen


def micro_markers(rows: list[tuple[str, str, str]]) -> str:
    return "\n".join(run_micro(Session(parse_config(MICRO), counter=counter()), rows))


def batch_marker(rows: list[tuple[str, str, str]]) -> str:
    cfg = parse_config(
        {
            "compression": {"protect_first_n": 1, "threshold": 0.5, "target_ratio": 0.05},
            "model": {"context_length": 4096},
        }
    )
    s = Session(cfg, counter=counter())
    s.append({"role": "system", "content": "be brief"})
    for n, (_, text, _) in enumerate(rows):
        s.extend(planted_turn(n, text, padding=800))
    s.before_request()
    markers = [m["content"] for m in s.transcript if marker_kind(m) == "batch"]
    assert markers, "batch compaction should have run"
    return "\n".join(markers)


# The extractive summarizer keeps the newest few items per section: a batch over the whole table would
# show only some rows, so the table is compacted in groups.
# Six rows a batch compaction (a short last group joins the one before: a batch needs enough to compact).
GROUPS = [SECRET_FORMATS[i : i + 6] for i in range(0, len(SECRET_FORMATS), 6)]
if len(GROUPS) > 1 and len(GROUPS[-1]) < 6:
    GROUPS[-2:] = [GROUPS[-2] + GROUPS[-1]]


def test_micro_markers_hold_no_secret() -> None:
    assert leaked(micro_markers(SECRET_FORMATS)) == []


def test_micro_markers_would_hold_them_without_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_redaction(monkeypatch)
    assert len(leaked(micro_markers(SECRET_FORMATS))) >= len(SECRET_FORMATS) // 2


@pytest.mark.parametrize("rows", GROUPS, ids=[f"rows{i * 6}-{i * 6 + len(g) - 1}" for i, g in enumerate(GROUPS)])
def test_batch_marker_holds_no_secret(rows: list[tuple[str, str, str]]) -> None:
    assert leaked(batch_marker(rows), rows) == []


def test_batch_marker_would_hold_them_without_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_redaction(monkeypatch)
    found = sum(len(leaked(batch_marker(rows), rows)) for rows in GROUPS)
    assert found >= len(SECRET_FORMATS) // 2


def http_requests(server: ChatServer) -> str:
    summarizer = OpenAISummarizer(
        "test-model", base_url=server.base_url, api_key_env="MICROCOMPACT_NO_KEY", timeout=5.0
    )
    run_micro(Session(parse_config(MICRO), summarizer, counter=counter()), SECRET_FORMATS)
    assert server.requests, "the summarizer should have been called"
    return json.dumps(server.requests, ensure_ascii=False)


def test_http_summarizer_requests_hold_no_secret(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MICROCOMPACT_NO_KEY", raising=False)
    assert leaked(http_requests(chat_server)) == []


def test_http_summarizer_requests_would_hold_them_without_redaction(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MICROCOMPACT_NO_KEY", raising=False)
    _no_redaction(monkeypatch)
    assert len(leaked(http_requests(chat_server))) >= len(SECRET_FORMATS) - 2
