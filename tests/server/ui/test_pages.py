"""The conversation page over plain HTTP: a conversation driven through the proxy (OpenAI Chat against the
scripted upstream, tool outputs large enough to fold) shows up in the list and on its own page with one
chart point per request, its folds, its marker and its cache figures, the same figures as JSON; hostile
transcript text renders as text under a strict CSP; and with a proxy key nothing answers without it."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from microcompact.messages import MARKER_HEADING
from support import local_http
from support.proxy_server import ProxyServer
from support.ui_pages import SECRET, drive
from upstream import ScriptedUpstream

KEY = "proxy-key-for-the-page"


class Text(HTMLParser):
    """The page's visible text and its elements (tag, attributes), as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> Text:
    parser = Text()
    parser.feed(html)
    return parser


@pytest.fixture
def served(upstream: ScriptedUpstream, tmp_path: Path) -> Any:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=16_000) as proxy:
        history: list[dict[str, Any]] = []
        session, requests = drive(proxy, history=history)
        yield proxy, session, requests, history


def test_the_json_has_every_request_and_fold(served: Any) -> None:
    proxy, session, requests, _ = served
    listed = local_http.get(f"{proxy.base_url}/ui/api/conversations").json()["conversations"]
    [row] = [c for c in listed if c["id"] == session]
    assert row["requests"] == requests and row["client"] == "page-test/1.0" and row["model"] == "gpt-4o"
    assert row["api"] == "openai" and row["folds"] >= 1
    assert row["spent"] is not None and row["uncompacted"] is not None and row["spent"] < row["uncompacted"]
    assert row["prompt_tokens"] < row["uncompacted_tokens"]
    detail = local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": session}).json()
    figures = detail["requests_figures"]
    assert [r["request"] for r in figures] == list(range(1, requests + 1))
    assert all(isinstance(r["occupancy_pct"], float) and r["prompt_tokens"] > 0 for r in figures)
    assert sum(1 for r in figures if r["folded"]) == row["folds"]
    folds = detail["folds_detail"]
    assert [f["request"] for f in folds] == [r["request"] for r in figures if r["folded"]]
    assert sum(f["passes"] for f in folds) <= len(detail["passes"]) and folds[0]["passes"] >= 1
    assert all(f["prompt_after"] < f["prompt_before"] for f in folds if f["saving_per_request"])
    absorbed = [p for p in detail["passes"] if p["outcome"] in ("absorbed", "model_rejected", "compacted")]
    assert absorbed and all(p["removed_tokens"] > 0 and p["saving_per_request"] > 0 for p in absorbed)
    assert detail["markers_now"] and all(MARKER_HEADING in m["text"] for m in detail["markers_now"])
    assert detail["messages"]["absorbed"] > 0
    hits = local_http.get(f"{proxy.base_url}/ui/api/search", params={"id": session, "q": "needle0"}).json()["hits"]
    [hit] = hits
    original = local_http.get(f"{proxy.base_url}/ui/api/original", params={"id": session, "row": hit["row"]}).json()
    assert "needle0 line 0-0 line 0-1" in original["text"] and original["state"] == "absorbed"
    assert SECRET not in original["text"] and "OPENAI_API_KEY=[REDACTED]" in original["text"]
    [found] = local_http.get(f"{proxy.base_url}/ui/api/search", params={"id": session, "q": "OPENAI_API_KEY"}).json()[
        "hits"
    ]
    assert found["row"] == hit["row"] and SECRET not in found["snippet"]
    page = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}", params={"q": "needle0", "open": hit["row"]})
    assert SECRET not in page.text and "[REDACTED]" in page.text


def test_the_page_draws_one_point_per_request_and_expands_a_hit(served: Any) -> None:
    proxy, session, requests, _ = served
    listing = local_http.get(f"{proxy.base_url}/ui")
    assert listing.status_code == 200 and f'href="/ui/{quote(session, safe="")}"' in listing.text
    page = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}", params={"q": "needle0"})
    assert page.status_code == 200
    elements = parsed(page.text).elements
    points = [a for tag, a in elements if tag == "circle" and "pt" in (a.get("class") or "").split()]
    assert len(points) == requests
    assert sum(1 for a in points if "fold" in (a.get("class") or "")) >= 1
    assert '<pre class="marker">' in page.text
    [hit] = [a for tag, a in elements if tag == "details"]
    opened = local_http.get(
        f"{proxy.base_url}/ui/{quote(session, safe='')}", params={"q": "needle0", "open": hit["data-row"]}
    )
    assert '<details class="hit"' in opened.text and " open>" in opened.text
    assert "needle0 line 0-0" in "".join(parsed(opened.text).text)


def test_hostile_text_renders_as_text_under_a_strict_policy(served: Any) -> None:
    proxy, session, _, _ = served
    page = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}", params={"q": "alert"})
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy
    assert re.search(r"script-src 'nonce-[\w-]+'", policy)
    hits = local_http.get(f"{proxy.base_url}/ui/api/search", params={"id": session, "q": "alert"}).json()["hits"]
    [hit] = hits
    opened = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}", params={"q": "alert", "open": hit["row"]})
    doc = parsed(opened.text)
    scripts = [a for tag, a in doc.elements if tag == "script"]
    assert len(scripts) == 1 and scripts[0]["nonce"], "only the page's own script, under its nonce"
    assert not [a for tag, a in doc.elements if tag == "img"]
    text = "".join(doc.text)
    assert "<script>alert('x')</script><img src=x onerror=alert(1)>\\x1b[31m\\x07" in text
    assert "\x1b" not in opened.text and "\x07" not in opened.text
    assert "y" * 30_000 in text, "a very long line is kept whole (wrapped by the style)"


def test_an_unknown_conversation_is_a_404(served: Any) -> None:
    proxy, _, _, _ = served
    assert local_http.get(f"{proxy.base_url}/ui/no-such-conversation").status_code == 404
    assert local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": "nope"}).status_code == 404
    assert local_http.get(f"{proxy.base_url}/ui/api/original", params={"id": "nope", "row": "x"}).status_code == 404


def test_with_a_proxy_key_the_page_and_its_json_refuse_a_request_without_it(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=16_000, api_key=KEY) as proxy:
        session, _ = drive(proxy, {"x-microcompact-key": KEY})
        page = f"/ui/{quote(session, safe='')}"
        for path in ("/ui", page, "/ui/api/conversations", f"/ui/api/conversation?id={quote(session)}"):
            refused = local_http.get(proxy.base_url + path)
            assert refused.status_code == 401 and session not in refused.text, path
            assert local_http.get(proxy.base_url + path, headers={"x-microcompact-key": "wrong"}).status_code == 401
            assert local_http.get(proxy.base_url + path, headers={"x-microcompact-key": KEY}).status_code == 200
        assert local_http.get(f"{proxy.base_url}{page}?key=wrong").status_code == 401
        with httpx.Client(base_url=proxy.base_url) as browser:
            login = browser.get(f"{page}?key={KEY}&q=needle0")
            assert login.status_code == 303 and login.headers["location"] == f"{page}?q=needle0"
            cookie = login.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
            assert KEY not in cookie, "the cookie holds a digest, not the key"
            assert browser.get(page).status_code == 200
            assert browser.get("/ui/api/conversations").status_code == 200


def test_the_page_polls_its_json_whose_signature_moves_with_the_conversation(served: Any) -> None:
    proxy, session, requests, history = served
    page = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}")
    [body] = [a for tag, a in parsed(page.text).elements if tag == "body"]
    assert body["data-poll"] == f"/ui/api/conversation?id={quote(session, safe='')}"
    before = local_http.get(proxy.base_url + body["data-poll"]).json()["signature"]
    assert before[0] == requests and body["data-sig"] == json.dumps(before, separators=(",", ":"))
    again, _ = drive(proxy, history=history)
    assert again == session
    after = local_http.get(proxy.base_url + body["data-poll"]).json()["signature"]
    assert after[0] == 2 * requests and after != before


def test_each_marker_links_to_the_originals_it_absorbed(served: Any) -> None:
    proxy, session, _, _ = served
    base = f"{proxy.base_url}/ui/{quote(session, safe='')}"
    detail = local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": session}).json()
    row = next(r for m in detail["markers"] for r in m["absorbed_rows"])
    page = local_http.get(base).text
    assert f'href="/ui/{quote(session, safe="")}?open={row}"' in page
    opened = parsed(local_http.get(base, params={"open": row}).text)
    [shown] = [a for tag, a in opened.elements if tag == "details" and a.get("data-row") == str(row)]
    assert "open" in shown
    original = local_http.get(f"{proxy.base_url}/ui/api/original", params={"id": session, "row": row}).json()
    assert original["text"][:200] in "".join(opened.text)


def test_a_hostile_conversation_id_is_a_plain_404(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db") as proxy:
        for path in ("/ui/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "/ui/%FF%FE", "/ui/%ED%A0%80", "/ui/a%00b"):
            answer = local_http.get(proxy.base_url + path)
            assert answer.status_code == (400 if "%00" in path else 404), path  # NUL: refused before the app
            assert "<script>alert" not in answer.text and "\x00" not in answer.text
        for query in ("id=%FF&row=1", "id=x&row=99999999999999999999", "id=x&row=-1"):
            assert local_http.get(f"{proxy.base_url}/ui/api/original?{query}").status_code == 404, query
        assert local_http.get(f"{proxy.base_url}/ui/api/search?id=x&q=%00%FF").json()["hits"] == []
        assert local_http.get(f"{proxy.base_url}/ui/api/nothing-here").status_code == 404
