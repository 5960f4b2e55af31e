"""Who may read the conversation page: the proxy's key, as a header (scripts) or once as ``?key=`` (a
browser cannot send a header), which sets an HttpOnly, SameSite=Strict cookie holding a keyed digest of
the key (never the key itself) and redirects to the same page without it. Every answer of the page carries
the headers that keep hostile transcript text inert (:data:`SECURITY_HEADERS`, a strict CSP)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

KEY_HEADER = "x-microcompact-key"
COOKIE = "microcompact_ui"
COOKIE_PATH = "/ui"

SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "cross-origin-resource-policy": "same-origin",
}


def content_policy(nonce: str) -> str:
    """Nothing loads but this page's own nonce'd style and script, and its own JSON."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
        "img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def cookie_value(key: str) -> str:
    """What the cookie holds: a digest keyed by the proxy key (a stolen cookie does not reveal the key)."""
    return hmac.new(key.encode(), b"microcompact ui", hashlib.sha256).hexdigest()


class Access:
    """The page's gate: open when the proxy has no key."""

    def __init__(self, key: str | None) -> None:
        self.key = key

    def refusal(self, request: Request, json: bool) -> Response | None:
        """None when the request may read the page; else the answer to it: a login redirect (a right
        ``?key=``) or a 401 that says how to get in."""
        if self.key is None:
            return None
        given = request.headers.get(KEY_HEADER, "")
        if given and hmac.compare_digest(given.encode(), self.key.encode()):
            return None
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), cookie_value(self.key).encode()):
            return None
        offered = request.query_params.get("key")
        if offered is not None and hmac.compare_digest(offered.encode(), self.key.encode()):
            return self._login(request)
        message = (
            f"microcompact: this page needs the proxy's key: the {KEY_HEADER} header, or open "
            "/ui?key=YOUR_KEY once in the browser (it sets a cookie)"
        )
        if json:
            return JSONResponse({"error": message}, status_code=401, headers=SECURITY_HEADERS)
        return PlainTextResponse(message + "\n", status_code=401, headers=SECURITY_HEADERS)

    def _login(self, request: Request) -> Response:
        """Redirect to the same URL without the key, setting the cookie (the key leaves the address bar)."""
        assert self.key is not None
        query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "key"])
        target = request.url.path + (f"?{query}" if query else "")
        response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE, cookie_value(self.key), path=COOKIE_PATH, httponly=True, samesite="strict", secure=False
        )
        return response
