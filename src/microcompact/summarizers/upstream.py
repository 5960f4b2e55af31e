"""``summarizer: upstream``: the summary of an exchange asked of the client's own model, on the client's own
credential, as one more turn of the conversation the provider has cached.

``serve`` tells the summarizer of each conversation the last request that went upstream and was answered
(:meth:`UpstreamSummarizer.remember`: its URL, headers and body exactly as sent). A merge that finds no
note on its exchange sends that body again with one user message appended: an instruction naming the
assistant turns from that exchange on (their first words, their tool calls; at most as many as the output
bound holds) and asking for a three-line note on each, with the notes so far for context
(:mod:`.upstream_notes`). The provider reads the conversation from its cache, so the input is billed at
the read price, once for the turns of a whole fold; each merge adds its exchange's note to the rolling
notes' sections, and the result goes through the same checks (:func:`~.checks.check_summary`) as any
model summary, the facts (file ledger, failing commands) kept beside the notes by code.

Any failure (no request known yet, the exchange not in that request, an HTTP error, a timeout, a tool
call or refusal, no note on the exchange, a result the checks reject) writes the extractive summary
instead, with one log line; the upstream is not asked again for a while after a failure that is about the
upstream (``REST_SECONDS``), and never again after it refused the credential. Condense and batch
compaction always use the extractive summarizer: only a merge names exchanges of the cached conversation.

The request goes only to the URL the client's request went to (never a redirect), with the headers it
went with; nothing of it is stored or logged. What the summarizer adds to it (the instruction, the notes
so far, quoted first words) is redacted first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from ..messages import Message
from ..redact import redact_text
from ..tokens import EstimateCounter
from ..wire import WireApi
from . import base
from .base import CountText, Summarizer, SummaryRejected
from .checks import check_summary
from .http import FactsHook, excerpt, join_facts, kept_beside, merge_input, split_prose
from .sections import clip, parse_sections
from .upstream_notes import (
    MAX_EXCHANGES,
    NOTE_TOKENS,
    Note,
    Turn,
    assemble,
    instruction,
    parse_notes,
    request_turns,
    session_keys,
)
from .upstream_wire import APIS, Answer, read_answer, summary_body

log = logging.getLogger("microcompact")

NAME = "upstream"
REST_SECONDS = 30.0  # after a timeout, a 429 or a 5xx: the extractive summary meanwhile
NOTE_WORDS = 60  # the stated length of one exchange's note
MAX_NOTES = 1024  # notes kept per conversation (oldest dropped first)
DROPPED_HEADERS = frozenset({"content-length", "host", "transfer-encoding", "connection"})


class NotAsked(base.SummarizerError):
    """The upstream was not asked: nothing to re-send, or the exchange is not in it (about this input)."""


class Resting(NotAsked):
    """Not asked while the upstream rests after a failure (that failure was logged: this is not, again)."""


class UpstreamDown(base.SummarizerUnavailable):
    """The upstream did not answer (5xx, no connection): it rests before it is asked again."""


@dataclass(frozen=True)
class UpstreamRequest:
    """The last request of a conversation that went upstream and was answered, as it was sent."""

    api: WireApi  # the request's format: which summary wire (upstream_wire)
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    # Bills one summary request (its usage at the client's model's prices): (answer) -> None.
    bill: Callable[[Answer], None] | None = None

    def __repr__(self) -> str:  # never the headers (credentials) or the body
        return f"UpstreamRequest(api={str(self.api)!r}, url=<{len(self.url)} chars>, body=<{len(self.body)} bytes>)"


class UpstreamSummarizer:
    """Merges by the client's own model over its cached conversation; everything else, and every failure,
    by ``fallback`` (the extractive summarizer). ``last_used`` names the one that wrote the last summary."""

    def __init__(
        self,
        fallback: Summarizer,
        *,
        timeout: float = 60.0,
        max_output_tokens: int = 2000,
        facts: FactsHook | None = None,
        count_text: CountText | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = NAME
        self.fallback = fallback
        self.timeout = timeout
        self.max_output_tokens = max_output_tokens
        self.facts = facts
        self.count_text: CountText = count_text or EstimateCounter().count
        self.clock = clock
        self.last_used: str | None = None
        self.calls = 0  # summary requests sent upstream
        self.merged = 0  # merges written from the upstream's notes
        self.failures = 0  # of those and of the merges that could not send one: the extractive summary written
        self._request: UpstreamRequest | None = None
        self._lock = threading.Lock()
        self._resting_until = 0.0
        self._refused = False
        self._logged: set[str] = set()
        self._notes: dict[str, Note] = {}  # by exchange key (upstream_notes): written, not used yet or again
        self._goal = ""  # the goal the latest answer states

    # ------------------------------------------------------------------ what serve tells it

    def remember(self, request: UpstreamRequest) -> None:
        """The conversation's newest answered request (called by ``serve`` after each one)."""
        if request.api in APIS:
            self._request = request

    # ------------------------------------------------------------------ the protocol

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        try:
            text = self._merge(summary, exchange)
        except Exception as exc:
            self._failed(exc)
            self.last_used = str(getattr(self.fallback, "name", "extractive"))
            return self.fallback.merge(summary, exchange)
        self.last_used = NAME
        self.merged += 1
        return text

    def condense(self, summary: str, target_tokens: int) -> str:
        self.last_used = str(getattr(self.fallback, "name", "extractive"))
        return self.fallback.condense(summary, target_tokens)

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        self.last_used = str(getattr(self.fallback, "name", "extractive"))
        return self.fallback.batch(summary, messages, focus)

    # ------------------------------------------------------------------ one merge

    def _merge(self, summary: str, exchange: list[Message]) -> str:
        keys = session_keys(exchange)
        if not keys:
            raise NotAsked("the exchange has no assistant turn to name")
        prose, kept = split_prose(summary)
        shown = prose or summary
        if any(key not in self._notes for key in keys):
            self._ask(keys[0], shown)
        with self._lock:
            notes = [self._notes.get(key) for key in keys]
        if any(note is None for note in notes):
            raise base.SummarizerBadOutput("the answer holds no note on the exchange")
        trusted = kept_beside(self.facts, summary or None, kept, exchange)
        text = assemble(shown, [n for n in notes if n is not None], self._goal or "none")
        rejection = check_summary(text, merge_input(summary, exchange, instruction([], "", NOTE_WORDS), shown, trusted))
        if rejection is not None:
            with self._lock:  # a note the checks refuse is asked for again by the next fold
                for key in keys:
                    self._notes.pop(key, None)
            raise SummaryRejected(rejection, excerpt(text))
        return join_facts(text, trusted)

    def _ask(self, first: str, summary: str) -> None:
        """One summary request: notes on the request's assistant turns from ``first`` on (those without a
        note yet, at most as many as the output bound holds), kept for this merge and the next ones."""
        request = self._usable_request()
        body = _parsed(request.body)
        turns = request_turns(request.api, body)
        start = next((i for i, turn in enumerate(turns) if turn.key == first), None)
        if start is None:
            raise NotAsked("the exchange is not in the conversation's last request")
        room = max(1, min(MAX_EXCHANGES, (self.max_output_tokens - NOTE_TOKENS) // NOTE_TOKENS))
        batch: list[Turn] = [turns[start], *(t for t in turns[start + 1 :] if t.key not in self._notes)][:room]
        asked = instruction(batch, summary, NOTE_WORDS)
        answer = self._send(request, summary_body(request.api, body, asked, self.max_output_tokens))
        notes = parse_notes(answer.text, batch)
        log.info("Summarizer upstream: notes on %d of %d turns asked for", len(notes), len(batch))
        goal = next((s.items for s in parse_sections(answer.text) if s.name == "goal"), [])
        with self._lock:
            if goal:
                self._goal = " ".join(goal)
            self._notes.update(notes)
            while len(self._notes) > MAX_NOTES:
                self._notes.pop(next(iter(self._notes)))

    def _usable_request(self) -> UpstreamRequest:
        request = self._request
        if request is None:
            raise NotAsked(
                "no request of this conversation to re-send: only serve has one, on the Anthropic Messages, "
                "OpenAI Chat Completions and Responses, and Gemini generateContent routes"
            )
        with self._lock:
            if self._refused:
                raise base.SummarizerAuthError("the upstream refused the client's credential for a summary before")
            if self.clock() < self._resting_until:
                raise Resting("resting after a failure of the upstream")
        return request

    def _send(self, request: UpstreamRequest, body: dict[str, Any]) -> Answer:
        """The upstream's answer to ``body``, billed; a :class:`SummarizerError` for any failure."""
        headers = [(n, v) for n, v in request.headers if n.lower() not in DROPPED_HEADERS]
        self.calls += 1
        try:
            response = _http().post(request.url, headers=headers, content=orjson.dumps(body), timeout=self.timeout)
        except httpx.TimeoutException as exc:
            raise base.SummarizerTimeout("no answer within the timeout") from exc
        except httpx.HTTPError as exc:
            raise UpstreamDown(f"the upstream is unreachable ({type(exc).__name__})") from exc
        if response.status_code != 200:
            raise _status_error(response.status_code)
        try:
            payload = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise base.SummarizerBadOutput("the answer is not JSON") from exc
        answer = read_answer(request.api, payload, NAME)
        if request.bill is not None:
            request.bill(answer)
        return answer

    def _failed(self, exc: Exception) -> None:
        """One log line per kind of failure (later ones of the same kind at debug level); a rest or a stop."""
        self.failures += 1
        with self._lock:
            if isinstance(exc, base.SummarizerAuthError):
                self._refused = True
            elif isinstance(exc, (base.SummarizerTimeout, base.SummarizerRateLimited, UpstreamDown)):
                self._resting_until = max(self._resting_until, self.clock() + REST_SECONDS)
            kind = type(exc).__name__ if not isinstance(exc, SummaryRejected) else f"rejected:{exc.rejection.code}"
            first = kind not in self._logged and not isinstance(exc, Resting)
            self._logged.add(kind)
        reason = str(exc) if isinstance(exc, base.SummarizerError) else type(exc).__name__
        if isinstance(exc, SummaryRejected) and exc.excerpt:
            reason += f"; excerpt {exc.excerpt!r}"
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "Summarizer upstream: %s; the extractive summary is written instead",
            clip(redact_text(reason), 300),
        )


_CLIENT: httpx.Client | None = None
_CLIENT_LOCK = threading.Lock()


def _http() -> httpx.Client:
    """One connection pool for every conversation's summary requests (thread-safe), made when first used.
    No redirects: the credential goes to the URL the client's request went to, nowhere else; the proxy's
    environment (HTTPS_PROXY, SSL_CERT_FILE) applies, as it does to the forwarded requests."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = httpx.Client(follow_redirects=False, trust_env=True)
        return _CLIENT


def _status_error(status: int) -> base.SummarizerError:
    if status in (401, 403):
        return base.SummarizerAuthError(f"the upstream refused the client's credential ({status})")
    if status == 429:
        return base.SummarizerRateLimited("the upstream is rate limiting (429)")
    if status >= 500:
        return UpstreamDown(f"the upstream is unavailable ({status})")
    return base.SummarizerBadOutput(f"the upstream refused the summary request ({status})")


def _parsed(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise NotAsked("the conversation's last request is not a JSON object")
    return body


def upstream_link(summarizer: Any) -> UpstreamSummarizer | None:
    """The :class:`UpstreamSummarizer` ``summarizer`` is, or holds as a link of a chain; else None."""
    if isinstance(summarizer, UpstreamSummarizer):
        return summarizer
    for link in getattr(summarizer, "links", ()) or ():
        if isinstance(link, UpstreamSummarizer):
            return link
    return None
