"""One line per answered request on ``serve``'s stderr (unless ``--quiet``): what a user watching the terminal
wants to see, from the figures the response headers carry (the same values, so the two never disagree),
written when the response ends, with the conversation's totals through this request, streamed or not; a
model with no known price says ``unpriced: MODEL``.

``200 POST /v1/messages  claude-…@a1b2c3  compacted  occupancy 18.3%  folds 2  $0.1234 (uncompacted
$0.4567)``: the status, the request, the conversation, the mode, and where the proxy carries them the
occupancy, the folds so far and the dollars so far against going without the proxy (``serve --audit``: the
folds it would have made, and ``would have $0.0800 (saved $0.0367)``). Never a key, never
content: only what the headers already tell the client.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..bill.cost_line import UNPRICED

# The headers a line is made of, in its order, with how each is shown.
_SHOWN = (
    ("x-microcompact-occupancy", "occupancy {}%"),
    ("x-microcompact-folds", "folds {}"),
    ("x-microcompact-would-have-folds", "would-have folds {}"),  # serve --audit
    ("x-microcompact-tokens-saved", "saved {} tok"),
    ("x-microcompact-cost", "${}"),
    ("x-microcompact-cost-uncompacted", "(uncompacted ${})"),
    ("x-microcompact-would-have-cost", "would have ${}"),
    ("x-microcompact-would-have-saved", "(saved ${})"),
)
DOLLARS = frozenset({"x-microcompact-would-have-cost", "x-microcompact-would-have-saved"})
MAX_PATH_CHARS = 80


def request_line(status: int, method: str, path: str, headers: Mapping[str, str]) -> str:
    """The line for one answered request (``headers``: the X-Microcompact-* headers it went out with)."""
    shown_path = path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 3] + "..."
    parts = [f"{status} {method} {shown_path}", headers.get("x-microcompact-session", "-")]
    parts.append(headers.get("x-microcompact-mode", "-"))
    parts += [shape.format(_money(name, headers[name])) for name, shape in _SHOWN if name in headers]
    pricing = headers.get("x-microcompact-pricing", "")
    if pricing.startswith(UNPRICED) and "x-microcompact-cost" not in headers:
        parts.append(pricing)
    if "x-microcompact-degraded" in headers:
        parts.append(f"degraded: {headers['x-microcompact-degraded']}")
    return "  ".join(parts)


def _money(name: str, value: str) -> str:
    """Dollars to four places (the headers carry six); other figures as they are."""
    if not name.startswith("x-microcompact-cost") and name not in DOLLARS:
        return value
    try:
        return f"{float(value):.4f}"
    except ValueError:
        return value


__all__ = ["request_line"]
