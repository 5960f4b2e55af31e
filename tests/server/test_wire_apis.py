"""Every wire API and every upstream has its entry in each place that handles one (CONTRIBUTING.md, "Add a
wire API"): a member added to ``WireApi`` or ``Upstream`` fails here until each registry, route and summary
wire names it, and the tables of this file gain its samples."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from microcompact.bill.pricing import API_PRESETS
from microcompact.launch import SPECS
from microcompact.server.app import _PROVIDERS, FORMATS, ProxySettings
from microcompact.server.errors import ERROR_SHAPES, error_body
from microcompact.server.routes import CREDENTIALS, WIRE_OF, match
from microcompact.server.session_key import CREDENTIAL_HEADERS, DERIVED_KEY, SessionKeys
from microcompact.summarizers.upstream_notes import request_turns
from microcompact.summarizers.upstream_wire import APIS, read_answer, summary_body
from microcompact.wire import UPSTREAM_OF, Upstream, WireApi

NOTES = "### Goal\nFix the failing build.\n### E1\nWork done: ran make test.\nFindings: 1 failure.\nNext: fix it."

# One compacted route per wire API: (method, path).
ROUTES: dict[WireApi, tuple[str, str]] = {
    WireApi.CHAT: ("POST", "/v1/chat/completions"),
    WireApi.RESPONSES: ("POST", "/v1/responses"),
    WireApi.MESSAGES: ("POST", "/v1/messages"),
    WireApi.GEMINI: ("POST", "/v1beta/models/gemini-x:generateContent"),
}

# One request as it went upstream, and one answer to its summary request, per wire API.
CALL = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
REQUESTS: dict[WireApi, dict[str, Any]] = {
    WireApi.CHAT: {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [CALL]}]},
    WireApi.RESPONSES: {
        "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": "{}"},
        ]
    },
    WireApi.MESSAGES: {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}]},
        ]
    },
    WireApi.GEMINI: {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "Bash", "args": {}}}]},
        ]
    },
}
ANSWERS: dict[WireApi, dict[str, Any]] = {
    WireApi.CHAT: {
        "choices": [{"message": {"content": NOTES}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 80},
    },
    WireApi.RESPONSES: {
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": NOTES}]}],
        "usage": {"input_tokens": 900, "output_tokens": 80},
    },
    WireApi.MESSAGES: {
        "content": [{"type": "text", "text": NOTES}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 900, "output_tokens": 80},
    },
    WireApi.GEMINI: {
        "candidates": [{"content": {"role": "model", "parts": [{"text": NOTES}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 80},
    },
}


def test_the_tables_of_this_test_name_every_wire_api() -> None:
    for table in (ROUTES, REQUESTS, ANSWERS):
        assert set(table) == set(WireApi)


def test_every_wire_api_has_an_upstream_a_format_and_a_route() -> None:
    assert set(UPSTREAM_OF) == set(WireApi)
    assert set(FORMATS) == set(WireApi) and set(WIRE_OF.values()) == set(WireApi)
    for wire in WireApi:
        provider = FORMATS[wire]
        assert (provider.wire, provider.name) == (wire, wire.upstream)
        route = match(*ROUTES[wire], {})
        assert (route.wire, route.api) == (wire, wire.upstream), route
        assert "tools" in provider.fixed_fields, "the model window counts each API's tools as fixed"
    binding = {wire for wire in WireApi if FORMATS[wire].binds_thinking}
    assert binding == {WireApi.MESSAGES}, "only Anthropic's thinking blocks are bound to their prefix"


def test_every_upstream_has_credentials_an_error_shape_prices_and_an_option() -> None:
    settings = {f.name for f in dataclasses.fields(ProxySettings)}
    for upstream in Upstream:
        assert upstream in CREDENTIALS and upstream in CREDENTIAL_HEADERS and upstream in ERROR_SHAPES
        assert API_PRESETS.get(upstream) == str(upstream), "a price preset of the upstream's name"
        assert _PROVIDERS[upstream].name is upstream, "forwards to it are answered in its shape"
        assert f"{upstream}_upstream" in settings
        assert "boom" in str(error_body(upstream, 400, "boom"))
    assert {wire.upstream for wire in WireApi} == set(Upstream), "every upstream serves a compacted route"


@pytest.mark.parametrize("wire", list(WireApi))
def test_every_wire_api_has_a_summary_wire(wire: WireApi) -> None:
    assert wire in APIS
    body = summary_body(wire, REQUESTS[wire], "notes please", 500)
    assert "notes please" in str(body) and body.get("stream") in (False, None)
    assert read_answer(wire, ANSWERS[wire], "upstream").text.startswith("### Goal")
    assert [t.key for t in request_turns(wire, REQUESTS[wire])] == ["c1"]


def test_the_serialized_names_stay_what_stored_rows_and_labels_say() -> None:
    """Conversation keys, metrics labels and price presets were written with these strings."""
    assert [str(u) for u in Upstream] == ["openai", "anthropic", "gemini"]
    assert [str(w) for w in WireApi] == ["chat", "responses", "messages", "gemini"]
    key = SessionKeys(bytes(32)).key(Upstream.ANTHROPIC, {"x-api-key": "k"}, "", ["system", "hi"])
    assert key.startswith("anthropic-") and DERIVED_KEY.fullmatch(key)
    # A string from a config or a stored row names the same conversation as the member.
    assert SessionKeys(None).key(Upstream.OPENAI, {}, "", ["s", "u"]) == SessionKeys(None).key(
        "openai", {}, "", ["s", "u"]
    )


def test_the_agents_speak_wire_apis() -> None:
    assert {spec.api for spec in SPECS.values()} <= set(WireApi)
