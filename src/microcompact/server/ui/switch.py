"""``POST /ui/api/rewrite``: ``serve --audit``'s switch for one conversation, behind the page's key.

The body is JSON, ``{"id": "SESSION", "rewrite": true}`` (``false``: back to audit), and must say so in its
``Content-Type``: a cross-site form cannot send that, so a page elsewhere cannot flip a conversation through
a browser that is logged in. The flag is the store's (:func:`switch_rewrite`, which ``microcompact sessions
rewrite`` calls too): every ``serve --audit`` on the store goes by it from the conversation's next request.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...keys import REWRITE_META
from ...store import SessionStore, StoreError, _SQLStore
from .access import SECURITY_HEADERS, Access

log = logging.getLogger("microcompact")

MAX_BODY = 4096


def rewrite_switched(store: SessionStore | None, session_id: str) -> bool:
    """True when the conversation was switched to rewriting (the store flag)."""
    return store is not None and store.session_meta(session_id).get(REWRITE_META) is True


def switch_rewrite(store: SessionStore, session_id: str, on: bool) -> None:
    """Turn rewriting on (``on``) or back to audit for one stored conversation (KeyError: not stored)."""
    if not store.session_versions([session_id]):
        raise KeyError(session_id)
    store.update_meta(session_id, {REWRITE_META: on})


class RewriteSwitch:
    """The endpoint over one store (None: nothing to switch)."""

    def __init__(self, store: _SQLStore | None, access: Access) -> None:
        self.store = store
        self.access = access

    async def endpoint(self, request: Request) -> Response:
        refused = self.access.refusal(request, json=True)
        if refused is not None:
            return refused
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _answer(415, 'microcompact: send {"id": ..., "rewrite": true|false} as application/json')
        raw = await request.body()
        wanted = _parsed(raw) if len(raw) <= MAX_BODY else None
        if wanted is None:
            return _answer(400, 'microcompact: expected {"id": "SESSION", "rewrite": true|false}')
        session_id, on = wanted
        if self.store is None:
            return _answer(404, "microcompact: this proxy has no store to switch a conversation in")
        try:
            await anyio.to_thread.run_sync(switch_rewrite, self.store, session_id, on)
        except KeyError:
            return _answer(404, "microcompact: no such conversation in the store")
        except StoreError as exc:
            log.error("Proxy: switching a conversation's rewriting failed (%s)", exc)
            return _answer(503, f"microcompact: the switch was not stored ({exc})")
        log.warning("Proxy: rewriting %s for conversation %s (serve --audit)", "on" if on else "off", session_id[:200])
        return JSONResponse({"id": session_id, "rewrite": on}, headers=SECURITY_HEADERS)


def _parsed(raw: bytes) -> tuple[str, bool] | None:
    try:
        value: Any = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or set(value) != {"id", "rewrite"}:
        return None
    session_id, on = value["id"], value["rewrite"]
    if not isinstance(session_id, str) or not session_id or len(session_id) > 1000 or not isinstance(on, bool):
        return None
    return session_id, on


def _answer(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=SECURITY_HEADERS)
