"""The outgoing ``messages``: the session's compacted view, spelled with the client's own messages.

Every session message taken from a request carries ``_hid``, its client message's index in the history;
markers carry none. Walking the view, each run of session messages of one client message becomes that
client message: the very dict the client sent when the session holds all of it unchanged, else the
provider's ``rebuild`` of it. Markers are rendered as assistant messages. The provider then makes the list
acceptable to its API (``normalize``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..identity import hid_of
from ..messages import Message
from .fixed_blocks import client_order
from .provider import Provider, rewritten


def outgoing_messages(
    provider: Provider,
    body: dict[str, Any],
    history: Sequence[Message],
    view: Sequence[Message],
    order: Sequence[int] | None = None,
) -> list[Message]:
    """The messages to forward for ``view`` (a session transcript, with metadata) of ``history`` in canonical
    ``order`` (``fixed_blocks``; None: the client's own): spelled with the client's own messages, in the
    client's order, made acceptable to the API, with the breakpoints a fold needs (for Anthropic one at the
    end of the stable part, so the next request reads it: ``breakpoints``). The proxy's and the tests' one
    path."""
    canonical = history if order is None else [history[i] for i in order]
    runs = spelled_runs(provider, canonical, view)
    spelled_in_order = [m for _, m in runs] if order is None else client_order(runs, order)
    return provider.with_breakpoints(body, provider.normalize(body, spelled_in_order))


def spelled(provider: Provider, history: Sequence[Message], view: Sequence[Message]) -> list[Message]:
    """``view`` in the client's messages, before ``normalize``."""
    return [m for _, m in spelled_runs(provider, history, view)]


def spelled_runs(
    provider: Provider, history: Sequence[Message], view: Sequence[Message]
) -> list[tuple[int | None, Message]]:
    """:func:`spelled`, each outgoing message with the index in ``history`` it stands for (None: a marker)."""
    out: list[tuple[int | None, Message]] = []
    k = 0
    while k < len(view):
        hid = hid_of(view[k])
        if hid is None or hid >= len(history):
            out.append((None, provider.render(view[k])))
            k += 1
            continue
        end = k + 1
        while end < len(view) and hid_of(view[end]) == hid:
            end += 1
        parts = list(view[k:end])
        original = history[hid]
        whole = len(parts) == provider.part_count(original) and not any(rewritten(p) for p in parts)
        out.append((hid, original if whole else provider.rebuild(original, parts)))
        k = end
    return out


def unchanged(history: Sequence[Message], outgoing: Sequence[Message]) -> bool:
    """True when ``outgoing`` is the client's own list, message for message (forward its bytes as they came)."""
    return len(history) == len(outgoing) and all(a is b for a, b in zip(history, outgoing, strict=True))


def covered(view: Sequence[Message]) -> int:
    """How many leading client messages ``view`` accounts for (one past the highest ``_hid``)."""
    return max((h for h in map(hid_of, view) if h is not None), default=-1) + 1
