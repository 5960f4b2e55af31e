"""A caller's full history in, a session's messages out: what :meth:`Session.sync_history`, ``compacted`` and
``fork`` do with the whole, uncompacted history frameworks and proxies hold.

A session knows its client messages by one digest each, in client order (:mod:`microcompact.identity`);
:class:`ClientHistory` holds that list (loaded once from the store's rows, else from the transcript),
finds where a new history continues it, turns the new client messages into tagged session messages, and
says where a fork starts. The session keeps the lock and the transcript; this module keeps the digests.

Each call digests the whole history (O(history)); the stored digests are read once per session. A history
that does not continue the session's (the caller compacted on its own, edited or dropped a message,
retried with other content) appends nothing: the caller forks a new session from the common prefix, so
no view mixes two histories. Nothing is appended unless every new message is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..identity import Divergence, common_prefix, fork_prefix, is_human, known_digests, tagged_parts
from ..keys import HID_KEY
from ..messages import Message, validate_message

# Turns one client message into the session messages that stand for it (a provider format's message may
# become several: an Anthropic user message of tool results becomes one tool message per result).
Convert = Callable[[Message], list[Message]]


def as_is(message: Message) -> list[Message]:
    return [message]


@dataclass(frozen=True)
class HistorySync:
    """What :meth:`Session.sync_history` did with a client's full history."""

    matched: int  # client messages the session already held
    appended: int  # client messages new in this history (appended, in order)
    human: bool  # the new ones include a message a person wrote: the previous turn has ended
    diverged: Divergence | None = None  # set when nothing was appended: the history is not the session's

    @property
    def ok(self) -> bool:
        return self.diverged is None

    @property
    def ends_turn(self) -> bool:
        """A person spoke after messages the session already held: the previous turn has ended, so it is
        finalized before the next request (the one rule :meth:`Session.compacted`, the framework adapters
        and the proxy follow)."""
        return self.human and self.matched > 0


class HistoryDiverged(ValueError):
    """The caller's history is not a continuation of the session's: fork it (``Session.fork``)."""

    def __init__(self, session_id: str, divergence: Divergence) -> None:
        super().__init__(f"session {session_id!r}: {divergence.describe()}; fork a new session from the common prefix")
        self.divergence = divergence


# The rows a session's client digests are read from: every stored row (absorbed ones included) and the
# digests of the client messages a fork started from in compacted form; a session without a store gives
# its transcript and no prefix.
ClientRows = Callable[[], tuple[list[Message], list[str]]]


class ClientHistory:
    """The digests of the client messages a session holds, in client order (None: they do not form one
    unbroken history, so the caller forks instead of guessing). Called under the session's lock."""

    def __init__(self, rows: ClientRows) -> None:
        self._rows = rows
        self._known: list[str] | None = None
        self._loaded = False

    def known(self) -> list[str] | None:
        """The digests, read from the rows once (again after :meth:`forget`)."""
        if not self._loaded:
            rows, prefix = self._rows()
            self._known = known_digests(rows, prefix)
            self._loaded = True
        return self._known

    def forget(self) -> None:
        """The transcript was reloaded from the store: read the digests again at the next sync."""
        self._known, self._loaded = None, False

    def adopt(self, incoming: Sequence[str]) -> None:
        """A fork's digests: the whole history it was made for."""
        self._known, self._loaded = list(incoming), True

    def sync(
        self,
        history: Sequence[Message],
        incoming: list[str],
        convert: Convert,
        held: int,
        take: Callable[[Message], None],
    ) -> HistorySync:
        """Append (through ``take``) the session messages of the client messages past the ones held, once
        all of them are valid; nothing when ``history`` does not continue the session's (``held``: the
        session's message count, for the divergence of a history without digests)."""
        known = self.known()
        if known is None:
            return HistorySync(0, 0, False, Divergence(0, held, len(incoming)))
        matched = common_prefix(known, incoming)
        if matched < len(known):
            return HistorySync(matched, 0, False, Divergence(matched, len(known), len(incoming)))
        new = [m for i in range(matched, len(history)) for m in tagged_parts(history[i], i, incoming[i], convert)]
        for j, m in enumerate(new):
            validate_message(m, f"client message {m[HID_KEY]} (part {j})")
        for m in new:  # all valid: none is appended unless all are, and none is checked twice
            take(m)
        known.extend(incoming[matched:])
        return HistorySync(matched, len(history) - matched, any(is_human(m) for m in new))

    def fork_start(
        self, transcript: Sequence[Message], incoming: Sequence[str], at: int
    ) -> tuple[int, list[Message] | None]:
        """Where a fork for a history of ``incoming`` digests starts: ``at``, never past what the two
        histories share, and the session's compacted form of that prefix when no summary covers a later
        client message (None: the fork takes the client's raw messages and compacts them anew)."""
        known = self.known()
        if known is None:
            return at, None
        at = min(at, common_prefix(known, incoming))
        return at, fork_prefix(transcript, len(known), at)


def fork_messages(
    history: Sequence[Message], incoming: Sequence[str], start: int, prefix: list[Message], convert: Convert
) -> list[Message]:
    """A fork's first messages: the compacted prefix, then the client messages from ``start`` on, tagged."""
    return prefix + [m for i in range(start, len(history)) for m in tagged_parts(history[i], i, incoming[i], convert)]
