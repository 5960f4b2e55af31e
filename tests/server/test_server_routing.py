"""Routing (issue 19): every path goes to exactly one API, and no key reaches another provider's upstream.

Three recording upstreams stand in for OpenAI, Anthropic and Gemini; each keeps the method, path, query and
headers of what reached it. Every route of every API is sent with the credentials a real client sends plus every
other provider's, and a property test sends arbitrary paths with arbitrary credential sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from microcompact.server import ProxySettings
from microcompact.server.routes import CREDENTIALS, GEMINI_COMPACTED
from support import local_http
from support.proxy_server import ProxyServer
from support.recording_upstream import Received, RecordingUpstream
from support.strategies import examples

OPENAI_KEY, ANTHROPIC_KEY, GOOGLE_KEY = "sk-openai-ROUTING", "sk-ant-ROUTING", "goog-ROUTING"
BEARER = {"authorization": f"Bearer {OPENAI_KEY}"}
ANTHROPIC = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
GOOGLE = {"x-goog-api-key": GOOGLE_KEY}
FOREIGN_TO_OPENAI = {"x-api-key", "x-goog-api-key", "x-goog-user-project"}
FOREIGN_TO_ANTHROPIC = {"x-goog-api-key", "x-goog-user-project", "openai-organization", "openai-project", "api-key"}
FOREIGN_TO_GEMINI = {"x-api-key", "openai-organization", "openai-project", "api-key"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
MESSAGES = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
CONTENTS = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
FT_MODEL = "ft:gpt-4o-mini-2024-07-18:acme-org::AbC123xy"


class Upstreams:
    def __init__(self, tmp: Path) -> None:
        self.openai = RecordingUpstream()
        self.anthropic = RecordingUpstream()
        self.gemini = RecordingUpstream()
        self.proxy = ProxyServer(self.openai.base_url, tmp / "routing.db").start()
        self.proxy.proxy.settings = ProxySettings(
            openai_upstream=f"{self.openai.base_url}/v1",
            anthropic_upstream=self.anthropic.base_url,
            gemini_upstream=self.gemini.base_url,
        )

    def send(
        self, method: str, path: str, headers: dict[str, str], body: Any = None
    ) -> tuple[httpx.Response, list[Received], list[Received], list[Received]]:
        """The answer, and what reached each upstream (OpenAI, Anthropic, Gemini) because of this request."""
        before = len(self.openai.received), len(self.anthropic.received), len(self.gemini.received)
        response = local_http.request(method, f"{self.proxy.base_url}{path}", headers=headers, json=body, timeout=10)
        return (
            response,
            self.openai.received[before[0] :],
            self.anthropic.received[before[1] :],
            self.gemini.received[before[2] :],
        )

    def close(self) -> None:
        self.proxy.close()
        self.openai.close()
        self.anthropic.close()
        self.gemini.close()


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstreams]:
    both = Upstreams(tmp_path_factory.mktemp("routing"))
    yield both
    both.close()


# (method, path, the client's own headers, body, where it must go, the path it must arrive at)
ROUTES: list[tuple[str, str, dict[str, str], Any, str | None, str]] = [
    ("POST", "/v1/chat/completions", BEARER, CHAT, "openai", "/v1/chat/completions"),
    ("POST", "/chat/completions", BEARER, CHAT, "openai", "/v1/chat/completions"),
    ("GET", "/v1/chat/completions/chatcmpl-1", BEARER, None, "openai", "/v1/chat/completions/chatcmpl-1"),
    ("POST", "/v1/responses", BEARER, RESPONSES, "openai", "/v1/responses"),
    ("POST", "/responses", BEARER, RESPONSES, "openai", "/v1/responses"),
    ("POST", "/v1/responses/compact", BEARER, RESPONSES, "openai", "/v1/responses/compact"),
    ("GET", "/v1/responses/resp_1", BEARER, None, "openai", "/v1/responses/resp_1"),
    ("DELETE", "/v1/responses/resp_1", BEARER, None, "openai", "/v1/responses/resp_1"),
    ("GET", "/v1/responses/resp_1/input_items", BEARER, None, "openai", "/v1/responses/resp_1/input_items"),
    ("POST", "/v1/embeddings", BEARER, {"model": "e", "input": "x"}, "openai", "/v1/embeddings"),
    ("GET", "/v1/models", BEARER, None, "openai", "/v1/models"),
    ("GET", "/models", BEARER, None, "openai", "/v1/models"),
    ("GET", "/v1/files", BEARER, None, "openai", "/v1/files"),
    ("POST", "/v1/messages", ANTHROPIC, MESSAGES, "anthropic", "/v1/messages"),
    ("POST", "/messages", ANTHROPIC, MESSAGES, "anthropic", "/v1/messages"),
    ("POST", "/v1/messages", BEARER | {"anthropic-version": "2023-06-01"}, MESSAGES, "anthropic", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens", ANTHROPIC, MESSAGES, "anthropic", "/v1/messages/count_tokens"),
    ("POST", "/v1/messages/batches", ANTHROPIC, {"requests": []}, "anthropic", "/v1/messages/batches"),
    ("GET", "/v1/models", ANTHROPIC, None, "anthropic", "/v1/models"),
    ("GET", "/v1/models/claude-x", {"x-api-key": ANTHROPIC_KEY}, None, "anthropic", "/v1/models/claude-x"),
    ("GET", "/v1/files", ANTHROPIC, None, "anthropic", "/v1/files"),
    # OpenAI's fine-tuned model ids hold colons: the path's API decides, never a colon (issue 28)
    ("GET", f"/v1/models/{FT_MODEL}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("DELETE", f"/v1/models/{FT_MODEL}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("GET", f"/models/{FT_MODEL}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("DELETE", f"/models/{FT_MODEL}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("GET", f"/v1/models/{FT_MODEL.replace(':', '%3A')}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("DELETE", f"/v1/models/{FT_MODEL.replace(':', '%3A')}", BEARER, None, "openai", f"/v1/models/{FT_MODEL}"),
    ("GET", "/v1/models/ft:claude-x:custom", ANTHROPIC, None, "anthropic", "/v1/models/ft:claude-x:custom"),
    ("POST", "/v1/complete", ANTHROPIC, {}, "anthropic", "/v1/complete"),
    (
        "POST",
        "/v1beta/models/gemini-x:generateContent",
        GOOGLE,
        CONTENTS,
        "gemini",
        "/v1beta/models/gemini-x:generateContent",
    ),
    (
        "POST",
        "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
        GOOGLE,
        CONTENTS,
        "gemini",
        "/v1beta/models/gemini-x:streamGenerateContent",
    ),
    ("POST", "/v1beta/models/gemini-x:countTokens", GOOGLE, CONTENTS, "gemini", "/v1beta/models/gemini-x:countTokens"),
    (
        "POST",
        "/v1alpha/models/gemini-x:generateContent",
        GOOGLE,
        CONTENTS,
        "gemini",
        "/v1alpha/models/gemini-x:generateContent",
    ),
    ("POST", "/v1/models/gemini-x:generateContent", GOOGLE, CONTENTS, "gemini", "/v1/models/gemini-x:generateContent"),
    (
        "POST",
        "/v1beta/models/gemini-x:embedContent",
        GOOGLE,
        CONTENTS,
        "gemini",
        "/v1beta/models/gemini-x:embedContent",
    ),
    ("GET", "/v1beta/models", GOOGLE, None, "gemini", "/v1beta/models"),
    ("GET", "/v1beta/models?key=" + GOOGLE_KEY, {}, None, "gemini", "/v1beta/models"),
    ("GET", "/v1/models", GOOGLE, None, "gemini", "/v1/models"),
    ("GET", "/v1/models?key=" + GOOGLE_KEY, {}, None, "gemini", "/v1/models"),
    ("POST", "/upload/v1beta/files", GOOGLE, {}, "gemini", "/upload/v1beta/files"),
    ("HEAD", "/api/hello", {}, None, None, ""),
    ("GET", "/v1/nowhere", BEARER, None, None, ""),
    ("POST", "/v2/chat/completions", BEARER, CHAT, None, ""),
    ("POST", "/foo/chat/completions", BEARER, CHAT, None, ""),
    ("POST", "/v1/v1/messages", ANTHROPIC, MESSAGES, None, ""),
    ("GET", "/", {}, None, None, ""),
]


def _assert_no_foreign_key(openai: list[Received], anthropic: list[Received], gemini: list[Received]) -> None:
    for seen in openai:
        assert not FOREIGN_TO_OPENAI & set(seen.headers), seen
        assert ANTHROPIC_KEY not in str(seen) and GOOGLE_KEY not in str(seen), seen
    for seen in anthropic:
        assert not FOREIGN_TO_ANTHROPIC & set(seen.headers), seen
        assert GOOGLE_KEY not in str(seen), seen
    for seen in gemini:
        assert not FOREIGN_TO_GEMINI & set(seen.headers), seen
        assert ANTHROPIC_KEY not in str(seen), seen


@pytest.mark.parametrize(("method", "path", "own", "body", "goes_to", "arrives_at"), ROUTES)
def test_every_route_reaches_its_own_upstream_with_only_its_own_keys(
    upstreams: Upstreams, method: str, path: str, own: dict[str, str], body: Any, goes_to: str | None, arrives_at: str
) -> None:
    # The client's own headers, plus other providers' credential headers it must not leak. On a resource
    # several providers have (models, files) a key header says whose it is, so only the others are added.
    extras = {"openai-organization": "org-ROUTING", "x-goog-user-project": "p"}
    if goes_to == "gemini":
        # a Gemini route is Gemini's whatever else it carries (authorization is Gemini's own: OAuth tokens)
        extras = {"openai-organization": "org-ROUTING", "openai-project": "proj", "api-key": OPENAI_KEY}
        if not any(f"/{shared}" in path for shared in ("v1/models", "v1/files")):
            extras["x-api-key"] = ANTHROPIC_KEY
    elif not any(f"/{shared}" in path for shared in ("models", "files")):
        extras["x-goog-api-key"] = GOOGLE_KEY
        if goes_to == "openai":
            extras["x-api-key"] = ANTHROPIC_KEY  # an OpenAI route is one whatever else the request carries
    headers = {**extras, **own} if goes_to is not None else own
    response, openai, anthropic, gemini = upstreams.send(method, path, headers, body)
    _assert_no_foreign_key(openai, anthropic, gemini)
    reached = {"openai": openai, "anthropic": anthropic, "gemini": gemini}
    if goes_to is None:
        assert not openai and not anthropic and not gemini, f"{method} {path} must reach no upstream"
        assert response.status_code == 404
        if method != "HEAD":
            assert "microcompact" in response.json()["error"]["message"]
        assert response.headers["x-microcompact-mode"] == "passthrough; reason=unknown_route"
        return
    [seen] = reached[goes_to]
    assert not any(reached[other] for other in reached if other != goes_to), f"{method} {path}: only {goes_to}"
    assert (seen.method, seen.path) == (method, arrives_at)
    if goes_to == "gemini":
        assert OPENAI_KEY not in str(seen), seen
        assert seen.query == path.partition("?")[2], "the query (key= too) must reach Gemini as it came"
    else:
        assert "key=" not in seen.query
    for name, value in own.items():
        assert seen.headers.get(name) == value, f"{name} must reach {goes_to}"
    compacted = method == "POST" and arrives_at in ("/v1/chat/completions", "/v1/responses", "/v1/messages")
    gemini_compacted = method == "POST" and arrives_at.rsplit(":", 1)[-1] in GEMINI_COMPACTED
    counted = arrives_at.endswith("count_tokens")
    expected_mode = "compacted" if compacted or gemini_compacted or counted else "passthrough; reason=endpoint"
    assert response.headers["x-microcompact-mode"] == expected_mode


def test_a_bad_gemini_request_is_refused_in_geminis_shape(upstreams: Upstreams) -> None:
    response, openai, anthropic, gemini = upstreams.send("POST", "/v1beta/models/g:generateContent", GOOGLE, {})
    assert response.status_code == 400 and not openai and not anthropic and not gemini
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "contents" in error["message"] and error["code"] == 400
    assert response.headers["x-microcompact-mode"] == "passthrough; reason=invalid_request"


def test_an_unknown_route_is_refused_in_a_neutral_shape(upstreams: Upstreams) -> None:
    response, _, _, _ = upstreams.send("POST", "/api/v9/generate", BEARER, {})
    body = response.json()
    assert response.status_code == 404
    assert body["type"] == "error" and body["error"]["code"] == "unknown_route"
    assert "no route for POST /api/v9/generate" in body["error"]["message"]


def test_the_proxys_refusals_are_counted_in_metrics(upstreams: Upstreams) -> None:
    upstreams.send("GET", "/nowhere-at-all", {})
    upstreams.send("POST", "/v1beta/models/g:generateContent", GOOGLE, {})
    upstreams.send("GET", "/v1beta/models", GOOGLE)
    page = local_http.get(f"{upstreams.proxy.base_url}/metrics").text
    assert 'microcompact_mode_total{api="none",mode="passthrough",reason="unknown_route"}' in page
    assert 'microcompact_mode_total{api="gemini",mode="passthrough",reason="invalid_request"}' in page
    assert 'microcompact_mode_total{api="gemini",mode="passthrough",reason="endpoint"}' in page
    assert 'microcompact_requests_total{api="none",status="404"}' in page


SEGMENTS = st.sampled_from(
    ["v1", "v1beta", "v1alpha", "upload", "chat", "completions", "responses", "messages", "count_tokens", "models",
     "files", "embeddings", "batches", "api", "hello", "m:generateContent", "x:y", "resp_1", "compact", "", "..",
     "skills", "organizations", "organization", "threads", "v2"]
)  # fmt: skip
CREDENTIAL_HEADERS = sorted(frozenset().union(*CREDENTIALS.values()) | {"anthropic-version"})


@example(method="GET", segments=["", "v1beta"], sent={"x-goog-api-key"}, key_param=False)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
    segments=st.lists(SEGMENTS, min_size=0, max_size=4),
    sent=st.sets(st.sampled_from(CREDENTIAL_HEADERS)),
    key_param=st.booleans(),
)
def test_no_path_and_no_credential_set_sends_a_key_to_another_provider(
    upstreams: Upstreams, method: str, segments: list[str], sent: set[str], key_param: bool
) -> None:
    values = {
        "authorization": f"Bearer {OPENAI_KEY}",
        "x-api-key": ANTHROPIC_KEY,
        "anthropic-version": "2023-06-01",
        "x-goog-api-key": GOOGLE_KEY,
    }
    headers = {name: values.get(name, f"value-of-{name}") for name in sent}
    path = "/" + "/".join(segments) + (f"?key={GOOGLE_KEY}" if key_param else "")
    response, openai, anthropic, gemini = upstreams.send(
        method, path, headers, {} if method in ("POST", "PUT") else None
    )
    assert response.status_code != 500, response.text
    assert len(openai) + len(anthropic) + len(gemini) <= 1
    for seen in gemini:
        assert not FOREIGN_TO_GEMINI & set(seen.headers) and ANTHROPIC_KEY not in str(seen), seen
        sent_path = httpx.URL(f"{upstreams.proxy.base_url}{path}").path  # as httpx sends it ("a/.." removed)
        assert seen.path == sent_path, "a Gemini route goes up with its full path"
        assert ("key=" in seen.query) == key_param, "key= is Gemini's and goes to Gemini as it came"
    for seen in anthropic:
        assert not FOREIGN_TO_ANTHROPIC & set(seen.headers) and GOOGLE_KEY not in str(seen), seen
        assert seen.path.startswith("/v1/"), seen
    for seen in openai:
        assert not FOREIGN_TO_OPENAI & set(seen.headers), seen
        assert ANTHROPIC_KEY not in str(seen) and GOOGLE_KEY not in str(seen), seen
        assert seen.path.startswith("/v1/"), seen
    if "x-goog-api-key" in sent and not {"x-api-key", "anthropic-version"} & sent and openai + anthropic:
        # a Google key (with no Anthropic header) on a shared resource is Gemini's: never forwarded elsewhere
        assert (segments[1:2] if segments[:1] == ["v1"] else segments[:1])[0] not in ("models", "files")
