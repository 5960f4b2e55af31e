"""Which API a request speaks: one name for each wire API the proxy compacts, and the upstream it belongs to.

Two closed sets, because they differ: OpenAI's Chat Completions and Responses are two wire APIs (two request
formats, two summary wires) of one upstream (one base URL, one credential, one error shape, one price
preset). The values are the strings users and stored rows already see: ``Upstream`` names the metrics label,
the conversation key's prefix, the ``--X-upstream`` option and the price preset; ``WireApi`` the route.
Both are ``StrEnum`` so a config value or a stored string compares equal to its member.

Adding a wire API: CONTRIBUTING.md's "Add a wire API" names every place (tests/server/test_wire_apis.py
fails while one lacks the new member).
"""

from __future__ import annotations

from enum import StrEnum


class Upstream(StrEnum):
    """Whose API: where a request goes, with which credential, in which error shape, at which prices."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"


class WireApi(StrEnum):
    """The request format of a compacted route."""

    CHAT = "chat"  # OpenAI Chat Completions
    RESPONSES = "responses"  # OpenAI Responses
    MESSAGES = "messages"  # Anthropic Messages
    GEMINI = "gemini"  # Gemini generateContent / streamGenerateContent

    @property
    def upstream(self) -> Upstream:
        return UPSTREAM_OF[self]


UPSTREAM_OF: dict[WireApi, Upstream] = {
    WireApi.CHAT: Upstream.OPENAI,
    WireApi.RESPONSES: Upstream.OPENAI,
    WireApi.MESSAGES: Upstream.ANTHROPIC,
    WireApi.GEMINI: Upstream.GEMINI,
}

__all__ = ["UPSTREAM_OF", "Upstream", "WireApi"]
