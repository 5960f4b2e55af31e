"""``recall`` and ``expand``: one conversation's folded originals, ranked, bounded and redacted.

Every call names its conversation by capability (:mod:`.conversation`); anything outside it is refused with
one line (:class:`RecallRefused`) that says what is wrong, and a handle of another conversation is refused
exactly like one that does not exist, so a refusal tells nothing about other conversations. Every text
returned is redacted (``redact``) under the conversation's own secret memory (``secret_memory``), so a value
redacted once in that conversation stays hidden in its bare mentions too, as in its summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import home_dir
from ..keys import POS_KEY, RECALL_META, ROW_KEY, SECRETS_META, STATE_KEY
from ..messages import Message, marker_kind, tool_call_ids
from ..redact import redact_message
from ..redact.secret_memory import SecretMemory, remembering
from ..render import message_text
from .conversation import ConversationError, handle_of, parse_handle, parse_token
from .originals import OriginalsStore
from .ranking import Query, excerpt, parse_query, score

MAX_QUERY_CHARS = 1000
DEFAULT_HITS = 8
MAX_HITS = 20
CANDIDATES = 200  # originals read per query before ranking (newest first)
MAX_EXPAND_CHARS = 20_000
INDEX_LINE_CHARS = 100
PARTNER_REACH = 16  # positions searched around a tool call or result for its partner


class RecallRefused(ValueError):
    """What a tool call may not do, in one line naming the argument (the tool's error text)."""


@dataclass(frozen=True)
class _Conversation:
    session_id: str
    memory: SecretMemory


class Originals:
    """The two tools over one store; ``home`` holds the key of the secret memories (``$MICROCOMPACT_HOME``)."""

    def __init__(self, store: OriginalsStore, home: Path | None = None) -> None:
        self.store = store
        self.home = home if home is not None else home_dir()

    # ------------------------------------------------------------------ the tools

    def recall(self, conversation: str, query: str, limit: int = DEFAULT_HITS) -> str:
        """The folded originals matching ``query``, best first: one line each, its handle and an excerpt."""
        if not isinstance(query, str) or not query.strip():
            raise RecallRefused("query is empty: give the identifiers or words to look for")
        if len(query) > MAX_QUERY_CHARS:
            raise RecallRefused(
                f"query is {len(query):,} characters; recall takes at most {MAX_QUERY_CHARS:,}: give the "
                "identifiers or words to look for"
            )
        parsed = parse_query(query)
        if not parsed.terms:
            raise RecallRefused("query has no word of 3 or more characters to look for")
        limit = max(1, min(int(limit), MAX_HITS))
        conv = self._conversation(conversation)
        ranked = sorted(self._scored(conv, parsed), key=lambda hit: (-hit[0], -hit[1]))
        if not ranked:
            return f"Nothing folded in this conversation matches {_quoted(query)}."
        shown = min(len(ranked), limit)
        lines = [f"{shown} of {len(ranked)} folded originals matching, best first (expand a handle to read it):"]
        lines += [line for _, _, line in ranked[:limit]]
        return "\n".join(lines)

    def expand(self, conversation: str, handle: str) -> str:
        """The original(s) ``handle`` names: a message with its tool call or results, or a summary's index."""
        try:
            row = parse_handle(handle)
        except ConversationError as exc:
            raise RecallRefused(str(exc)) from None
        conv = self._conversation(conversation)
        found = self.store.rows_by_id(conv.session_id, [row])
        if not found:
            raise RecallRefused(f"handle {handle_of(row)} is not in this conversation")
        message = found[0]
        if marker_kind(message) is not None:
            return self._index(conv, row)
        if message.get(STATE_KEY) != "absorbed":
            raise RecallRefused(f"handle {handle_of(row)} was never folded: it is still in the conversation")
        return self._whole(conv, handle_of(row), self._with_partners(conv, message))

    # ------------------------------------------------------------------ the conversation

    def _conversation(self, conversation: str) -> _Conversation:
        try:
            token = parse_token(conversation)
        except ConversationError as exc:
            raise RecallRefused(str(exc)) from None
        ids = self.store.sessions_with_meta(RECALL_META, token)
        if len(ids) != 1:
            raise RecallRefused(
                f"conversation {token[:6]}… is not one this store holds: copy it from the summary's note"
                if not ids
                else f"conversation {token[:6]}… names more than one stored conversation; refusing to choose"
            )
        memory = SecretMemory(self.home)
        memory.restore(self.store.session_meta(ids[0]).get(SECRETS_META))
        return _Conversation(ids[0], memory)

    def _redacted(self, conv: _Conversation, message: Message, labels: bool = False) -> str:
        """The message's text (labelled ``TOOL CALL [id] name(arguments)``, ``TOOL RESULT [id]: ...`` when
        read whole), redacted under the conversation's memory."""
        with remembering(conv.memory):
            return message_text(redact_message(message), tool_calls=True, labels=labels).strip()

    # ------------------------------------------------------------------ recall

    def _scored(self, conv: _Conversation, query: Query) -> Iterator[tuple[int, int, str]]:
        """Each candidate's (score, position, line). Identifiers get their own candidates, so a common word
        matching the newest originals never crowds out an old one holding the identifier asked for."""
        seen: set[int] = set()
        for terms in (query.identifiers, query.words):
            for message in self.store.absorbed_matching(conv.session_id, terms, CANDIDATES):
                row = int(message.get(ROW_KEY, 0))
                if row not in seen:
                    seen.add(row)
                    yield from self._line(conv, query, message)

    def _line(self, conv: _Conversation, query: Query, message: Message) -> Iterator[tuple[int, int, str]]:
        """The message's (score, position, line) when its redacted text matches at all."""
        text = self._redacted(conv, message)
        points, at = score(text, query)
        if points:
            yield points, int(message.get(POS_KEY, 0)), f"{_label(message)}: {excerpt(text, at)}"

    # ------------------------------------------------------------------ expand

    def _with_partners(self, conv: _Conversation, message: Message) -> list[Message]:
        """``message`` with the other half of its tool exchange (the call of a result, the results of a
        call) where they were folded too, in position order."""
        pos = int(message.get(POS_KEY, 0))
        if message.get("role") == "tool":
            wanted = message.get("tool_call_id")
            near = self.store.rows_between(conv.session_id, pos - PARTNER_REACH, pos - 1)
            calls = [m for m in near if _folded(m) and wanted in tool_call_ids(m)]
            return [*calls[-1:], message]
        ids = set(tool_call_ids(message))
        if not ids:
            return [message]
        near = self.store.rows_between(conv.session_id, pos + 1, pos + PARTNER_REACH)
        return [message, *(m for m in near if _folded(m) and m.get("role") == "tool" and m.get("tool_call_id") in ids)]

    def _whole(self, conv: _Conversation, handle: str, messages: list[Message]) -> str:
        parts, left = [f"{handle}, folded from this conversation (redacted):"], MAX_EXPAND_CHARS
        for message in messages:
            text = self._redacted(conv, message, labels=True)
            shown = text[: max(left, 0)]
            parts.append(f"[{handle_of(int(message.get(ROW_KEY, 0)))}] {shown}")
            if len(shown) < len(text):
                parts.append(
                    f"[cut: {len(shown):,} of {len(text):,} characters shown; recall with the identifiers you "
                    "need finds the passage]"
                )
            left -= len(shown)
        return "\n\n".join(parts)

    def _index(self, conv: _Conversation, row: int) -> str:
        """What a summary folded: one line per original, oldest first, within the size bound."""
        folded = self.store.expand(conv.session_id, row)
        lines = [f"{handle_of(row)} is a summary of {len(folded)} folded originals; expand one to read it:"]
        used = len(lines[0])
        for shown, message in enumerate(folded):
            first = " ".join(self._redacted(conv, message).split())
            line = f"{_label(message)}: {first[:INDEX_LINE_CHARS]}{'…' if len(first) > INDEX_LINE_CHARS else ''}"
            if used + len(line) > MAX_EXPAND_CHARS:
                lines.append(f"[cut: {shown} of {len(folded)} listed; recall finds the others by what they say]")
                break
            lines.append(line)
            used += len(line) + 1
        return "\n".join(lines)


def _folded(message: Message) -> bool:
    return message.get(STATE_KEY) == "absorbed" and marker_kind(message) is None


def _label(message: Message) -> str:
    """``m1042 tool result``, ``m1040 assistant call Bash``: a handle and what the message is."""
    role = str(message.get("role") or "?")
    what = "tool result" if role == "tool" else role
    names = [
        str((c.get("function") or {}).get("name") or "") for c in message.get("tool_calls") or [] if isinstance(c, dict)
    ]
    if names:
        what += " call " + ", ".join(n for n in names if n)
    return f"{handle_of(int(message.get(ROW_KEY, 0)))} {what}"


def _quoted(text: str, width: int = 80) -> str:
    return repr(text if len(text) <= width else text[:width] + "…")
