"""An ``authorization`` bearer is forwarded to Gemini (Google takes OAuth access tokens there), so it must reach
the Gemini upstream on Gemini's routes and on no other (issue 19).

Why it holds, from the code: ``app.upstream_url`` picks the base URL by ``route.api`` alone and
``forward.upstream_headers`` keeps a provider's own credential headers only toward that provider, and
``routes.match`` gives ``api == "gemini"`` to Gemini's paths (``/v1beta/...``, ``/v1alpha/...``,
``/upload/...``, ``/v1/models/M:method``) and, on the resources several providers share (``/v1/models``,
``/v1/files``), only to a request carrying ``x-goog-api-key`` or ``?key=``: a bearer alone there is OpenAI's.
Three recording upstreams check this from the outside: a Google OAuth token sent on every Gemini route
arrives at Gemini unchanged, the same header on every other route never reaches Gemini, and for arbitrary
paths and credential sets the Gemini upstream hears only requests whose route is Gemini's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.server import ProxySettings
from microcompact.server.routes import GEMINI, match
from support import local_http
from support.proxy_server import ProxyServer
from support.recording_upstream import Received, RecordingUpstream
from support.strategies import examples

TOKEN = "ya29.OAUTH-ROUTING-TOKEN"  # what a Google OAuth access token looks like
BEARER = {"authorization": f"Bearer {TOKEN}"}
CONTENTS = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}

GEMINI_ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1beta/models/gemini-x:generateContent", CONTENTS),
    ("POST", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", CONTENTS),
    ("POST", "/v1beta/models/gemini-x:countTokens", CONTENTS),
    ("POST", "/v1alpha/models/gemini-x:generateContent", CONTENTS),
    ("POST", "/v1/models/gemini-x:generateContent", CONTENTS),
    ("POST", "/v1beta/models/gemini-x:embedContent", CONTENTS),
    ("GET", "/v1beta/models", None),
    ("GET", "/v1beta/models/gemini-x", None),
    ("GET", "/v1beta/files/f-1", None),
    ("POST", "/upload/v1beta/files", {}),
]
# (method, path, body, the upstream it must reach: None for a 404 forwarded nowhere)
OTHER_ROUTES: list[tuple[str, str, Any, str | None]] = [
    ("POST", "/v1/chat/completions", CHAT, "openai"),
    ("POST", "/chat/completions", CHAT, "openai"),
    ("POST", "/v1/responses", {"model": "m", "input": "hi"}, "openai"),
    ("POST", "/responses", {"model": "m", "input": "hi"}, "openai"),
    ("POST", "/v1/embeddings", {"model": "e", "input": "x"}, "openai"),
    ("GET", "/v1/models", None, "openai"),  # shared: a bearer alone is OpenAI's
    ("GET", "/models", None, "openai"),
    ("GET", "/v1/models/gemini-x", None, "openai"),  # no ":method": OpenAI's model lookup
    ("GET", "/v1/models/ft:gpt-4o-mini:acme::AbC123", None, "openai"),  # a colon is no Gemini method
    ("DELETE", "/v1/models/ft:gpt-4o-mini:acme::AbC123", None, "openai"),
    ("DELETE", "/models/ft%3Agpt-4o-mini%3Aacme%3A%3AAbC123", None, "openai"),
    ("GET", "/v1/files", None, "openai"),
    ("POST", "/v1/messages", MESSAGES, "anthropic"),  # Anthropic takes OAuth bearers too
    ("POST", "/v1/messages/count_tokens", MESSAGES, "anthropic"),
    ("POST", "/v2beta/models/gemini-x:generateContent", CONTENTS, None),
    ("POST", "/beta/models/gemini-x:generateContent", CONTENTS, None),
    ("GET", "/api/hello", None, None),
]


class Upstreams:
    def __init__(self, tmp: Path) -> None:
        self.openai, self.anthropic, self.gemini = RecordingUpstream(), RecordingUpstream(), RecordingUpstream()
        self.proxy = ProxyServer(self.openai.base_url, tmp / "bearer.db").start()
        self.proxy.proxy.settings = ProxySettings(
            openai_upstream=f"{self.openai.base_url}/v1",
            anthropic_upstream=self.anthropic.base_url,
            gemini_upstream=self.gemini.base_url,
        )

    def send(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, list[Received]]]:
        """The status, and what reached each upstream because of this request."""
        upstreams = {"openai": self.openai, "anthropic": self.anthropic, "gemini": self.gemini}
        before = {name: len(u.received) for name, u in upstreams.items()}
        response = local_http.request(method, f"{self.proxy.base_url}{path}", headers=headers, json=body, timeout=10)
        return response.status_code, {name: u.received[before[name] :] for name, u in upstreams.items()}

    def close(self) -> None:
        self.proxy.close()
        for upstream in (self.openai, self.anthropic, self.gemini):
            upstream.close()


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstreams]:
    both = Upstreams(tmp_path_factory.mktemp("bearer"))
    yield both
    both.close()


@pytest.mark.parametrize(("method", "path", "body"), GEMINI_ROUTES)
def test_a_bearer_on_a_gemini_route_reaches_gemini_as_it_came(
    upstreams: Upstreams, method: str, path: str, body: Any
) -> None:
    _, reached = upstreams.send(method, path, BEARER, body)
    assert not reached["openai"] and not reached["anthropic"], f"{method} {path}: Gemini's route"
    [seen] = reached["gemini"]
    assert seen.headers.get("authorization") == f"Bearer {TOKEN}", "Gemini takes OAuth tokens in authorization"


@pytest.mark.parametrize(("method", "path", "body", "goes_to"), OTHER_ROUTES)
def test_a_bearer_on_any_other_route_never_reaches_gemini(
    upstreams: Upstreams, method: str, path: str, body: Any, goes_to: str | None
) -> None:
    status, reached = upstreams.send(method, path, BEARER, body)
    assert not reached["gemini"], f"{method} {path} is not Gemini's: the token must not reach it"
    assert all(TOKEN not in str(r) for r in reached["gemini"])
    if goes_to is None:
        assert status == 404 and not reached["openai"] and not reached["anthropic"]
        return
    [seen] = reached[goes_to]
    assert seen.headers.get("authorization") == f"Bearer {TOKEN}"


SEGMENTS = st.sampled_from(
    ["v1", "v1beta", "v1alpha", "v2beta", "upload", "models", "files", "m:generateContent", "m:countTokens",
     "chat", "completions", "responses", "messages", "count_tokens", "embeddings", "x:y", ""]
)  # fmt: skip


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    segments=st.lists(SEGMENTS, min_size=1, max_size=4),
    others=st.sets(st.sampled_from(["x-goog-api-key", "x-api-key", "anthropic-version", "openai-organization"])),
    key_param=st.booleans(),
)
def test_the_gemini_upstream_hears_a_bearer_only_on_routes_that_are_geminis(
    upstreams: Upstreams, method: str, segments: list[str], others: set[str], key_param: bool
) -> None:
    headers = {**{name: f"value-of-{name}" for name in others}, **BEARER}
    path = "/" + "/".join(segments)
    query = "key=goog-ROUTING" if key_param else ""
    status, reached = upstreams.send(
        method, f"{path}?{query}" if query else path, headers, {} if method == "POST" else None
    )
    assert status != 500
    sent_path = httpx.URL(f"{upstreams.proxy.base_url}{path}").path  # as httpx sends it ("a/.." removed)
    lowered = {name.lower(): value for name, value in headers.items()}
    route = match(method, sent_path, lowered, query)
    if reached["gemini"]:
        assert route.api == GEMINI, f"{method} {sent_path} {sorted(others)} reached Gemini off a Gemini route"
    elif route.api == GEMINI:
        assert status == 400, f"{method} {sent_path}: a Gemini route is forwarded unless the proxy refuses the body"
    for name in ("openai", "anthropic"):
        assert not reached[name] or route.api == name, f"{method} {sent_path} reached {name} on a {route.api} route"
