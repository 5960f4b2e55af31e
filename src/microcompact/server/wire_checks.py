"""What of a request's path and headers the proxy cannot forward as the client meant it: refused with a 400
in the provider's shape (by :class:`~.limits.BodyLimit`), never a 500 and never something else upstream.

- a control character in the path (``%00``, ``%0d%0a``): no URL can hold it (httpx refuses it: the proxy
  used to answer a 500) and a log line that printed it would be forged;
- a ``.`` or ``..`` segment (``/v1/embeddings/../../admin``, ``%2e%2e`` or ``%2F`` spelled): the upstream URL
  is built from the path as the route matched it, and dot segments would be resolved after the match, so
  the request would reach a path of the provider that no route names (unknown paths are refused);
- an encoded ``?`` or ``#`` (``%3F``, ``%23``): decoded, it would start a query or fragment upstream;
- a header value with a byte outside ASCII, in a header that is forwarded (the proxy's own
  ``X-Microcompact-*`` and hop-by-hop headers are not): the upstream client sends ASCII only (it used to be
  a 500); the error names the header, never its value (it may be a credential).
"""

from __future__ import annotations

from .forward import HOP_BY_HOP, OWN_PREFIX

SHOWN_PATH = 120


def path_problem(path: str) -> str | None:
    """Why the (decoded) request path cannot be forwarded as it is, or None."""
    bad = next((c for c in path if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        return f"holds a control character ({bad!r})"
    if any(segment in (".", "..") for segment in path.split("/")):
        return "holds a '.' or '..' segment, which would be resolved after the route matched"
    for char, name in (("?", "an encoded '?' (%3F)"), ("#", "an encoded '#' (%23)")):
        if char in path:
            return f"holds {name}, which would start a {'query' if char == '?' else 'fragment'} upstream"
    return None


def header_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a forwarded header cannot be sent upstream (it names the header, never its value), or None."""
    for raw_name, value in headers:
        if value.isascii():
            continue
        name = raw_name.decode("latin-1").lower()
        if name in HOP_BY_HOP or name.startswith(OWN_PREFIX):
            continue
        byte = next(b for b in value if b >= 0x80)
        return (
            f"the request header {name} holds a byte outside ASCII (0x{byte:02x}); this proxy forwards ASCII "
            "header values only"
        )
    return None


def request_problem(path: str, headers: list[tuple[bytes, bytes]]) -> str | None:
    """The 400's message for a request whose path or headers cannot be forwarded as they are, or None."""
    problem = path_problem(path)
    if problem is not None:
        shown = repr(path if len(path) <= SHOWN_PATH else path[:SHOWN_PATH] + "...")
        return f"microcompact: the request path {shown} {problem}; this proxy forwards no such path"
    problem = header_problem(headers)
    return f"microcompact: {problem}" if problem is not None else None


__all__ = ["header_problem", "path_problem", "request_problem"]
