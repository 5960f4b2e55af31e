"""Errors the proxy answers itself, in the shape the client's SDK parses (OpenAI's, Anthropic's or Gemini's;
a neutral shape, readable by all three, when the request matched no provider)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    502: "api_error",
    503: "overloaded_error",
}


GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 501: "UNIMPLEMENTED"}


class BadRequest(ValueError):
    """The client's request cannot be compacted or forwarded as it is (the message names what and where)."""


def error_body(api: str | None, status: int, message: str) -> dict[str, Any]:
    """The provider's error JSON for ``status`` (``api`` is "anthropic", "openai", "gemini", or None: no
    provider, a shape whose ``error.message`` every SDK reads)."""
    if api is None:
        return {"type": "error", "error": {"type": "not_found_error", "code": "unknown_route", "message": message}}
    if api == "gemini":
        return {"error": {"code": status, "message": message, "status": GEMINI_STATUS.get(status, "INTERNAL")}}
    if api == "anthropic":
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    kind = OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def error_response(api: str | None, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(error_body(api, status, message)),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
