"""Errors the proxy answers itself, in the shape the client's SDK parses (OpenAI's, Anthropic's or Gemini's;
a neutral shape, readable by all three, when the request matched no provider)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response

from ..wire import Upstream

OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# No provider (a path of no known API, a connection refused before its request was read): a shape whose
# ``error.message`` every SDK reads.
NEUTRAL = {
    404: ("not_found_error", "unknown_route"),
    503: ("overloaded_error", "too_many_connections"),
    508: ("api_error", "loop_detected"),
}


class BadRequest(ValueError):
    """The client's request cannot be compacted or forwarded as it is (the message names what and where)."""


def error_body(api: str | None, status: int, message: str) -> dict[str, Any]:
    """The provider's error JSON for ``status`` (``api`` is an :class:`Upstream`, or None: no provider, a
    shape whose ``error.message`` every SDK reads; any other name gets OpenAI's)."""
    if api is None:
        kind, code = NEUTRAL.get(status, ("invalid_request_error" if status < 500 else "api_error", "proxy_error"))
        return {"type": "error", "error": {"type": kind, "code": code, "message": message}}
    return ERROR_SHAPES.get(api, _openai_error)(status, message)


def _openai_error(status: int, message: str) -> dict[str, Any]:
    kind = OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}


def _gemini_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": GEMINI_STATUS.get(status, "INTERNAL")}}


# Each upstream's error shape (Chat and Responses share OpenAI's): keyed by upstream, not by wire API,
# because the proxy answers errors on routes of no wire API too (a forward, a refusal before the body).
ERROR_SHAPES: dict[str, Callable[[int, str], dict[str, Any]]] = {
    Upstream.OPENAI: _openai_error,
    Upstream.ANTHROPIC: _anthropic_error,
    Upstream.GEMINI: _gemini_error,
}


def error_response(api: str | None, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(error_body(api, status, message)),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
