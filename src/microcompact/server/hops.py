"""Requests that come back: an upstream URL pointing at this proxy (or at a chain that leads back to it).

``--openai-upstream http://127.0.0.1:8080/v1`` on the proxy listening there sends every request to itself:
each copy waits for the next, the process grows, and shutdown waits for requests that never end. Every
request the proxy forwards carries the standard ``Via`` header with this proxy's entry appended,
``1.1 microcompact-ID`` (ID: random per process, so it says nothing about the machine). A request that
arrives with this proxy's own entry in it, or after MAX_HOPS microcompact proxies, is refused at once with
a 508 naming the setting to fix; a chain of distinct proxies shorter than that passes.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping

VIA_HEADER = "via"
ENTRY_PREFIX = "microcompact-"
MAX_HOPS = 4


class Hops:
    """This process's ``Via`` entry, and the hop check and header of every forwarded request."""

    def __init__(self, instance: str | None = None) -> None:
        self.entry = ENTRY_PREFIX + (instance or secrets.token_hex(8))

    @staticmethod
    def _via(headers: Mapping[str, str]) -> list[str]:
        return [part.strip() for part in headers.get(VIA_HEADER, "").split(",") if part.strip()]

    def refusal(self, headers: Mapping[str, str], api: str | None) -> str | None:
        """Why a request must not be forwarded again (None: it may): it came back to this proxy, or it
        went through MAX_HOPS microcompact proxies already."""
        ours = [part.split()[-1] for part in self._via(headers) if part.split()[-1].startswith(ENTRY_PREFIX)]
        option = f"--{api}-upstream" if api else "the upstream option"
        if self.entry in ours:
            return (
                f"microcompact: this request came back to the proxy that sent it ({len(ours)} hop(s)): "
                f"{option} points at this microcompact serve itself; set it to the provider's URL"
            )
        if len(ours) >= MAX_HOPS:
            return f"microcompact: this request went through {len(ours)} microcompact proxies; check {option}"
        return None

    def forwarded(self, incoming: Mapping[str, str], sent: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """``sent`` (the headers going upstream) with one ``Via``: the incoming one's entries, then ours."""
        via = ", ".join([*self._via(incoming), f"1.1 {self.entry}"])
        return [*((n, v) for n, v in sent if n.lower() != VIA_HEADER), (VIA_HEADER, via)]


__all__ = ["MAX_HOPS", "VIA_HEADER", "Hops"]
