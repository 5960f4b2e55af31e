"""Thinking blocks bound to their prefix: the signing upstream behaves as the docs describe, and the proxy
never sends a block it will refuse (``server/thinking.py``).

The upstream (``upstream/signing.py``) is checked edit by edit against the docs' lists: appending, moving
``cache_control`` and removing thinking blocks (from the start, the end, all) keep a request valid;
shortening an earlier tool result, editing, reordering or deleting an earlier message and changing
``system`` or ``tools`` break it (the documented 400), unless the request asks ``drop_block`` with the beta
value. Then the proxy: the ``anthropic`` SDK's long tool loop with thinking (streaming and not) through
``serve``'s app at a 32K window in each mode, the retry path, provider-side compaction, and the OpenAI side.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from microcompact.config import Config
from microcompact.server.run import proxy_config
from microcompact.server.thinking import BINDING_BETA, family_of, merged_beta, without_thinking
from support import local_http
from support.anthropic_contract import binds_thinking, marker_texts, thinking_errors
from support.numbered_steps import NumberedSteps
from support.proxy_server import ProxyServer
from support.thinking_loop import API_KEY, CONTEXT_MANAGEMENT, MODEL, PROMPT, request, tool_loop
from upstream import Fault, RecordedRequest
from upstream.signing import SigningUpstream, binding_message

CONTEXT_LIMIT = 32_768
STEPS = 30
LINES = 1000


# ---------------------------------------------------------------------------------------------- the upstream


@pytest.fixture(scope="module")
def signed_history() -> Iterator[tuple[SigningUpstream, list[dict[str, Any]]]]:
    """A conversation the signing upstream answered (4 steps, signed and redacted thinking), ended in text."""
    with SigningUpstream(NumberedSteps("e", 5, lines=20)) as upstream:
        loop = tool_loop(upstream.base_url, 5, stream=False)
        assert loop.final and set(loop.statuses) == {200}
        yield upstream, loop.messages


def post(upstream: SigningUpstream, body: dict[str, Any], beta: str | None = None) -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"}
    if beta:
        headers["anthropic-beta"] = beta
    return local_http.post(f"{upstream.base_url}/v1/messages", json=body, headers=headers, timeout=30)


def next_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return request([*messages, {"role": "user", "content": "Thanks. Anything else?"}])


def strip_thinking(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "content": [b for b in message["content"] if b["type"] not in ("thinking", "redacted_thinking")]}


def assistant_positions(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def valid_edits(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    turns = assistant_positions(messages)
    moved = copy.deepcopy(messages)
    moved[2]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    start, end, every = copy.deepcopy(messages), copy.deepcopy(messages), copy.deepcopy(messages)
    start[turns[0]] = strip_thinking(start[turns[0]])
    start[turns[1]] = strip_thinking(start[turns[1]])
    end[turns[-1]] = strip_thinking(end[turns[-1]])
    end[turns[-2]] = strip_thinking(end[turns[-2]])
    for i in turns:
        every[i] = strip_thinking(every[i])
    return {"appending": messages, "moving cache_control": moved, "thinking removed from the start": start,
            "thinking removed from the end": end, "all thinking removed": every}  # fmt: skip


def invalid_edits(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    shortened = copy.deepcopy(messages)
    shortened[3]["content"][0]["content"] = shortened[3]["content"][0]["content"][:10]
    cleared = copy.deepcopy(messages)
    cleared[3]["content"][0]["content"] = ""
    edited = copy.deepcopy(messages)
    edited[2]["content"] = [b if b["type"] != "text" else {**b, "text": "Edited."} for b in edited[2]["content"]]
    reordered = [messages[1], messages[0], *messages[2:]]
    deleted = [messages[0], *messages[2:]]
    return {"an earlier tool result shortened": shortened, "an earlier tool result cleared": cleared,
            "an earlier message edited": edited, "earlier messages reordered": reordered,
            "an earlier message deleted": deleted}  # fmt: skip


def test_the_docs_valid_edits_keep_every_block_valid(signed_history: tuple[SigningUpstream, Any]) -> None:
    upstream, messages = signed_history
    for name, edited in valid_edits(messages).items():
        answer = post(upstream, next_turn(edited))
        assert answer.status_code == 200, f"{name}: {answer.text}"


@pytest.mark.parametrize("drop", [False, True])
def test_the_docs_invalid_edits_are_refused_unless_the_request_asks_to_drop(
    signed_history: tuple[SigningUpstream, Any], drop: bool
) -> None:
    upstream, messages = signed_history
    cases = {name: next_turn(edited) for name, edited in invalid_edits(messages).items()}
    cases["system changed"] = {**next_turn(messages), "system": "Another system prompt."}
    cases["tools changed"] = {**next_turn(messages), "tools": []}
    for name, body in cases.items():
        if drop:
            body = {
                **body,
                "thinking": {**body["thinking"], "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
            }
        seen = len(upstream.verdicts)
        answer = post(upstream, body, beta=f"interleaved-thinking-2025-05-14,{BINDING_BETA}" if drop else None)
        verdict = upstream.verdicts[seen][1]
        if drop:
            assert answer.status_code == 200 and verdict.dropped == len(verdict.invalid) > 0, name
            continue
        assert answer.status_code == 400, name
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"] == binding_message(verdict.invalid[0], error["message"].split("`")[3]), name


def test_drop_block_without_the_beta_value_is_refused_naming_the_header(
    signed_history: tuple[SigningUpstream, Any],
) -> None:
    upstream, messages = signed_history
    body = next_turn(invalid_edits(messages)["an earlier message edited"])
    body["thinking"] = {**body["thinking"], "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    answer = post(upstream, body, beta="interleaved-thinking-2025-05-14")
    assert answer.status_code == 400 and BINDING_BETA in answer.json()["error"]["message"]


def test_an_assistant_message_left_empty_is_refused(signed_history: tuple[SigningUpstream, Any]) -> None:
    upstream, messages = signed_history
    emptied = copy.deepcopy(messages)
    emptied[assistant_positions(messages)[-1]]["content"] = []
    assert post(upstream, next_turn(emptied)).status_code == 400


# ---------------------------------------------------------------------------------------------- the proxy


def config_with(mode: str | None) -> Config:
    config = proxy_config(None, CONTEXT_LIMIT)
    return config if mode is None else config.with_overrides(thinking={"families": {"opus-5-5": mode}})


def first_prompt_kept(record: RecordedRequest) -> bool:
    first = record.messages[0]["content"]
    return PROMPT in ([first] if isinstance(first, str) else [b.get("text") for b in first])


@pytest.mark.parametrize(
    ("mode", "stream"),
    [  # make test runs each mode and each answer shape once; CI the other two pairs as well
        pytest.param(None, False, id="default-remove-json"),
        pytest.param(None, True, id="default-remove-stream", marks=pytest.mark.slow),
        pytest.param("drop_block", False, id="drop_block-json", marks=pytest.mark.slow),
        pytest.param("drop_block", True, id="drop_block-stream"),
    ],
)
def test_sdk_tool_loop_with_thinking_through_the_proxy_is_never_refused(
    tmp_path: Path, stream: bool, mode: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="microcompact.telemetry")
    with SigningUpstream(NumberedSteps("s", STEPS, lines=LINES)) as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(mode)) as proxy:
            loop = tool_loop(
                proxy.base_url, STEPS, stream=stream, extra_body={"context_management": CONTEXT_MANAGEMENT}
            )
            page = proxy.proxy.metrics.render()
        requests = upstream.generation_requests()
    assert loop.final == "Run s: all steps are done." and set(loop.statuses) == {200}
    assert upstream.refused() == [] and all(r.status == 200 for r in requests)
    assert len({h["x-microcompact-session"] for h in loop.headers}) == 1, "one session, never forked"
    assert sum(1 for r in requests if marker_texts(r.messages)) >= STEPS // 2, "compaction still happens"
    assert all(first_prompt_kept(r) for r in requests)
    assert all(r.body["context_management"] == CONTEXT_MANAGEMENT for r in requests), "forwarded untouched"
    verdicts = [v for _, v in upstream.verdicts]
    header = "x-microcompact-thinking-removed" if mode is None else "x-microcompact-thinking-dropped"
    told = sum(int(h.get(header, 0)) for h in loop.headers)
    action = "removed" if mode is None else "dropped"
    assert told > 0 and f'microcompact_thinking_blocks_total{{action="{action}"}} {told}' in page
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("thinking compaction telemetry: ")]
    last = json.loads(lines[-1].split(": ", 1)[1])
    assert last[f"{action}_total"] == told, "the telemetry line carries the session's running total"
    if mode is None:
        assert all(not v.invalid for v in verdicts), "every block that went up was valid"
        assert all(
            "anthropic-beta" not in r.headers or BINDING_BETA not in r.headers["anthropic-beta"] for r in requests
        )
    else:
        assert told == sum(v.dropped for v in verdicts), "the proxy's count is what the upstream dropped"
        asked = [r for r in requests if "block_binding" in r.body["thinking"]]
        assert asked and all(BINDING_BETA in r.headers["anthropic-beta"] for r in asked)
        assert all(r.body["thinking"]["type"] == "adaptive" for r in asked), "the client's own settings kept"


def test_count_tokens_of_a_compacted_conversation_sends_no_stale_block(tmp_path: Path) -> None:
    with SigningUpstream(NumberedSteps("c", STEPS, lines=LINES)) as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
            loop = tool_loop(proxy.base_url, STEPS, stream=False)
            proxy.settle()
            body = {k: v for k, v in request(loop.messages).items() if k != "max_tokens"}
            answer = local_http.post(
                f"{proxy.base_url}/v1/messages/count_tokens",
                json=body,
                headers={"anthropic-version": "2023-06-01", "x-api-key": API_KEY},  # the loop's conversation
                timeout=30,
            )
            page = proxy.proxy.metrics.render()
        counted = [r for r in upstream.requests if r.path == "/v1/messages/count_tokens"]
    assert answer.status_code == 200, answer.text
    assert marker_texts(counted[0].messages), "the compacted view was counted"
    assert 'microcompact_thinking_refusals_retried_total{retry="stripped"} 0' in page


def test_a_request_forwarded_unchanged_keeps_every_block(tmp_path: Path) -> None:
    with SigningUpstream(NumberedSteps("u", 4, lines=20)) as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
            loop = tool_loop(proxy.base_url, 4, stream=False)
            sent = proxy.received
        requests = upstream.generation_requests()
    assert set(loop.statuses) == {200} and not any(marker_texts(r.messages) for r in requests)
    assert [r.raw for r in requests] == [body for _, body in sent], "byte for byte"
    assert sum(v.checked for _, v in upstream.verdicts) > 0


def binding_refusals(count: int, marked_only: bool = True):  # type: ignore[no-untyped-def]
    """A script wrapper: the first ``count`` compacted requests get the binding 400 whatever they send."""
    state = {"left": count}
    script = NumberedSteps("r", STEPS, lines=LINES)

    def answer(record: RecordedRequest) -> Any:
        if state["left"] and (marker_texts(record.messages) or not marked_only):
            state["left"] -= 1
            return Fault(
                status=400,
                error_type="invalid_request_error",
                message=binding_message("messages.2.content.0", "thinking"),
            )
        return script(record)

    return answer


def test_an_unknown_model_refused_anyway_is_retried_without_the_changed_parts_thinking(tmp_path: Path) -> None:
    """A model of no listed family (``keep``) behind an upstream that binds every model: each refusal is
    retried once with all thinking removed from the changed part, which the upstream accepts."""
    upstream = SigningUpstream(NumberedSteps("k", STEPS, lines=LINES), binding=lambda model: True)
    with upstream, ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
        loop = tool_loop(proxy.base_url, STEPS, stream=True, extra_body={"model": "claude-unknown-9"})
        page = proxy.proxy.metrics.render()
    refused = upstream.refused()
    assert loop.final == "Run k: all steps are done." and set(loop.statuses) == {200}, "the client saw no error"
    retried = [h for h in loop.headers if h.get("x-microcompact-thinking-retry") == "stripped"]
    assert refused and len(retried) == len(refused)
    assert f'microcompact_thinking_refusals_retried_total{{retry="stripped"}} {len(refused)}' in page
    assert len({h["x-microcompact-session"] for h in loop.headers}) == 1


def test_a_retry_refused_too_sends_the_clients_own_request(tmp_path: Path) -> None:
    """``keep`` (the blocks go as sent) and an upstream refusing the first compacted request and its retry."""
    with SigningUpstream(binding_refusals(2), binding=lambda model: False) as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with("keep")) as proxy:
            loop = tool_loop(proxy.base_url, STEPS, stream=False)
            sent = [body for path, body in proxy.received if path == "/v1/messages"]
            page = proxy.proxy.metrics.render()
        requests = upstream.generation_requests()
    assert set(loop.statuses) == {200} and loop.final
    told = [i for i, h in enumerate(loop.headers) if h.get("x-microcompact-thinking-retry")]
    assert len(told) == 1 and loop.headers[told[0]]["x-microcompact-thinking-retry"] == "client"
    assert [r.status for r in requests].count(400) == 2 and len(requests) == len(sent) + 2
    refused_at = [i for i, r in enumerate(requests) if r.status == 400]
    assert refused_at[1] == refused_at[0] + 1
    assert requests[refused_at[1] + 1].raw == sent[told[0]], "the client's own request, byte for byte"
    assert 'microcompact_thinking_refusals_retried_total{retry="stripped"} 1' in page
    assert 'microcompact_thinking_refusals_retried_total{retry="client"} 1' in page
    assert len({h["x-microcompact-session"] for h in loop.headers}) == 1, "the retry forked nothing"


def test_a_refusal_of_an_unchanged_request_is_the_clients(tmp_path: Path) -> None:
    with SigningUpstream(binding_refusals(1, marked_only=False), binding=lambda model: False) as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
            loop = tool_loop(proxy.base_url, 2, stream=False)
        assert loop.statuses == [400] and len(upstream.generation_requests()) == 1
        assert "x-microcompact-thinking-retry" not in loop.headers[0]


def test_a_provider_compaction_block_is_left_to_the_provider(tmp_path: Path) -> None:
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [{"type": "compaction", "content": "Summary of the work so far."}]},
        {"role": "user", "content": "Go on."},
    ]
    body = {**request(history), "context_management": {"edits": [{"type": "compact_20260112"}]}}
    raw = json.dumps(body).encode()
    with SigningUpstream() as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
            answer = local_http.post(
                f"{proxy.base_url}/v1/messages",
                content=raw,
                headers={"anthropic-version": "2023-06-01", "anthropic-beta": "compact-2026-01-12", "x-api-key": "k"},
                timeout=30,
            )
            page = proxy.proxy.metrics.render()
        received = upstream.generation_requests()
    assert answer.status_code == 200 and answer.headers["x-microcompact-provider-compaction"] == "stepped-aside"
    assert received[0].raw == raw and received[0].headers["anthropic-beta"] == "compact-2026-01-12"
    assert "x-microcompact-session" not in answer.headers, "no session took that history"
    assert "microcompact_provider_compaction_total 1" in page


def test_openai_reasoning_fields_stay_on_kept_messages(tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You run commands."},
        {"role": "user", "content": PROMPT},
    ]
    for n in range(40):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "Bash", "arguments": json.dumps({"command": f"seq {n}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call], "reasoning": f"plan {n}",
                         "reasoning_details": [{"type": "reasoning.encrypted", "data": f"enc-{n}"}]})  # fmt: skip
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{n}",
                "content": "\n".join(map(str, range(n * 1000, n * 1000 + 900))),
            }
        )
    with SigningUpstream() as upstream:
        with ProxyServer(upstream.base_url, tmp_path / "s.db", config=config_with(None)) as proxy:
            answer = local_http.post(
                f"{proxy.base_url}/v1/chat/completions", json={"model": "gpt-x", "messages": messages}, timeout=60
            )
        forwarded = upstream.generation_requests()[0].messages
    assert answer.status_code == 200
    assert forwarded != messages, "the history was compacted"
    originals = {m["tool_calls"][0]["id"]: m for m in messages if m.get("tool_calls")}
    kept = [m for m in forwarded if m.get("tool_calls")]
    assert kept
    for message in kept:
        original = originals[message["tool_calls"][0]["id"]]
        assert message["reasoning"] == original["reasoning"]
        assert message["reasoning_details"] == original["reasoning_details"]


# ---------------------------------------------------------------------------------------------- helpers


def test_the_beta_value_is_merged_into_the_clients_own_header() -> None:
    headers = [("x-api-key", "k"), ("anthropic-beta", "a-1, b-2"), ("anthropic-beta", "c-3")]
    assert merged_beta(headers, BINDING_BETA) == [("x-api-key", "k"), ("anthropic-beta", f"a-1,b-2,c-3,{BINDING_BETA}")]
    assert merged_beta([("anthropic-beta", BINDING_BETA)], BINDING_BETA) == [("anthropic-beta", BINDING_BETA)]
    assert merged_beta([], BINDING_BETA) == [("anthropic-beta", BINDING_BETA)]


def test_model_families() -> None:
    assert family_of(MODEL) == "opus-5-5"
    assert family_of("claude-fable-5-1-20261101") == "fable-5-1"
    assert family_of("claude-haiku-5-20261001") == "haiku-5"
    assert family_of("claude-sonnet-4-5-20250929") == "sonnet-4-5"
    assert family_of("gpt-5") is None and family_of(None) is None


def test_removing_thinking_never_sends_an_empty_assistant_message() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "d"}, {"type": "text", "text": "c"}]},
        {"role": "user", "content": "d"},
    ]
    out, removed = without_thinking(messages, len(messages))
    assert removed == 2 and [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["content"] == [{"type": "text", "text": "c"}]


def _turns(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for k in range(n):
        thought = {"type": "thinking", "thinking": f"t{k}", "signature": f"s{k}"}
        call = {"type": "tool_use", "id": f"toolu_{k}", "name": "Bash", "input": {}}
        out.append({"role": "assistant", "content": [thought, call]})
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": "ok"}]})
    return out


def test_the_contract_lets_a_binding_model_leave_out_the_oldest_turns_thinking_only() -> None:
    client = _turns(4)
    start = [strip_thinking(m) if m["role"] == "assistant" and i < 5 else m for i, m in enumerate(client)]
    middle = [strip_thinking(m) if i == 3 else m for i, m in enumerate(client)]
    forged = copy.deepcopy(client)
    forged[3]["content"][0]["signature"] = "forged"
    assert thinking_errors(client, start, removable=True) == []
    assert any("left out between" in e for e in thinking_errors(client, middle, removable=True))
    assert any("is not the client's" in e for e in thinking_errors(client, forged, removable=True))
    assert any("is not the client's" in e for e in thinking_errors(client, start, removable=False))
    assert binds_thinking(MODEL) and not binds_thinking("claude-sonnet-4-5")
