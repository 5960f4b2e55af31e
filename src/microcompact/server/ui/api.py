"""The routes of the conversation page, mounted by ``serve`` on its own host and port (behind its key):

- ``GET /ui``: the conversations; ``GET /ui/{id}``: one (``?q=`` searches its absorbed originals,
  ``&open=ROW`` shows one in full); ``?key=`` once logs a browser in (:mod:`.access`);
- ``GET /ui/api/conversations``, ``/ui/api/conversation?id=``, ``/ui/api/search?id=&q=``,
  ``/ui/api/original?id=&row=``: the same figures as JSON, for scripts;
- ``POST /ui/api/rewrite`` (JSON ``{"id": ..., "rewrite": true}``): ``serve --audit``'s switch (:mod:`.switch`).

Every figure is read from the store (:mod:`.data`), so every ``serve`` on one database shows the same page.
The store's reads run on Starlette's worker threads (the endpoints are plain functions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ...store import StoreError, _SQLStore
from . import data
from .access import SECURITY_HEADERS, Access, content_policy, new_nonce
from .html import esc, page
from .pages import conversation_page, list_page, signature
from .switch import RewriteSwitch

log = logging.getLogger("microcompact")

MAX_OPEN = 20  # originals one page shows in full


class ConversationPages:
    """The page's endpoints over one store (None: a proxy without a store shows an empty list)."""

    def __init__(self, store: Any, key: str | None) -> None:
        self.store = store if isinstance(store, _SQLStore) else None
        self.access = Access(key)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self._gated(self.list_html, json=False), methods=["GET"]),
            Route("/ui/api/conversations", self._gated(self.list_json, json=True), methods=["GET"]),
            Route("/ui/api/conversation", self._gated(self.conversation_json, json=True), methods=["GET"]),
            Route("/ui/api/search", self._gated(self.search_json, json=True), methods=["GET"]),
            Route("/ui/api/original", self._gated(self.original_json, json=True), methods=["GET"]),
            Route("/ui/api/rewrite", RewriteSwitch(self.store, self.access).endpoint, methods=["POST"]),
            Route("/ui/api/{rest:path}", self._gated(self.unknown_json, json=True), methods=["GET"]),
            Route("/ui/{session_id:path}", self._gated(self.conversation_html, json=False), methods=["GET"]),
        ]

    def _gated(self, endpoint: Callable[[Request], Response], json: bool) -> Callable[[Request], Response]:
        """``endpoint`` behind the key, its store errors answered with one line (503), never a traceback."""

        def gated(request: Request) -> Response:
            refused = self.access.refusal(request, json)
            if refused is not None:
                return refused
            try:
                return endpoint(request)
            except Exception as exc:  # a store error, or a bug here: one line, never a traceback
                cause = str(exc) if isinstance(exc, StoreError) else type(exc).__name__
                log.error("Proxy: %s failed (%s)", request.url.path[:200], cause)
                message = f"microcompact: the page cannot be built ({cause})"
                if json:
                    return JSONResponse({"error": message}, status_code=503, headers=SECURITY_HEADERS)
                return HTMLResponse(f"<p>{esc(message)}</p>", status_code=503, headers=SECURITY_HEADERS)

        return gated

    # ------------------------------------------------------------------ JSON

    def list_json(self, request: Request) -> Response:
        conversations = data.conversations(self.store) if self.store else []
        return _json(
            {"conversations": conversations, "signature": [[c["id"], *signature(c)] for c in conversations[:50]]}
        )

    def conversation_json(self, request: Request) -> Response:
        detail = self._detail(request.query_params.get("id", ""))
        if detail is None:
            return _json({"error": "microcompact: no such conversation in the store"}, 404)
        return _json({**detail, "signature": signature(detail)})

    def search_json(self, request: Request) -> Response:
        sid, query = request.query_params.get("id", ""), request.query_params.get("q", "")
        hits = data.search(self.store, sid, query) if self.store and sid else []
        return _json({"id": sid, "query": query, "hits": hits})

    def original_json(self, request: Request) -> Response:
        sid, row = request.query_params.get("id", ""), _row(request.query_params.get("row"))
        found = data.original(self.store, sid, row) if self.store and row is not None else None
        if found is None:
            return _json({"error": "microcompact: no such message in this conversation (give id= and row=)"}, 404)
        return _json(found)

    def unknown_json(self, request: Request) -> Response:
        return _json({"error": f"microcompact: no page API at {esc(request.url.path)}"}, 404)

    # ------------------------------------------------------------------ HTML

    def list_html(self, request: Request) -> Response:
        nonce = new_nonce()
        conversations = data.conversations(self.store) if self.store else []
        return _html(list_page(conversations, nonce), nonce)

    def conversation_html(self, request: Request) -> Response:
        sid = request.path_params["session_id"]
        detail = self._detail(sid)
        nonce = new_nonce()
        if detail is None:
            return _html(page("not found", f"<p>No conversation {esc(sid)} in the store.</p>", nonce), nonce, 404)
        query = request.query_params.get("q", "").strip()
        hits = data.search(self.store, sid, query) if self.store and query else []
        wanted = [r for r in (_row(v) for v in request.query_params.getlist("open")) if r is not None]
        opened: dict[int, dict[str, Any]] = {}
        for row in wanted[:MAX_OPEN]:
            original = data.original(self.store, sid, row) if self.store else None
            if original is not None:
                opened[row] = original
        return _html(conversation_page(detail, nonce, query, hits, opened), nonce)

    def _detail(self, session_id: str) -> dict[str, Any] | None:
        return data.conversation(self.store, session_id) if self.store and session_id else None


def _row(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) < 19 else None


def _json(value: Any, status: int = 200) -> Response:
    return JSONResponse(value, status_code=status, headers=SECURITY_HEADERS)


def _html(body: str, nonce: str, status: int = 200) -> Response:
    headers = {**SECURITY_HEADERS, "content-security-policy": content_policy(nonce)}
    return HTMLResponse(body, status_code=status, headers=headers)
