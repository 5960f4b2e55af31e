"""Summaries from a model behind any OpenAI-compatible chat-completions endpoint, checked before use.

The model writes prose only: short notes in a fill-in template (``templates/prose_template.md``) of a
stated length. The facts (file ledger, failing commands) are kept beside the notes by code: an optional
``facts`` hook computes them from the previous summary and the exchange (``facts_block``), replacing the
previous ledger sections; the previous summary's other sections are carried over as they were. A model
can then rewrite or drop its prose but never lose a fact.

Every answer goes through :func:`~.checks.check_summary`. A rejected answer is logged with its reason and a
short redacted excerpt, and asked for once more with a changed request (a note saying why; a smaller
input when it was cut off). A second rejection raises :class:`SummaryRejected`, and the engine writes the
deterministic summary for that exchange at once. A "does not fit the context" error shrinks the input to
what the server says it holds; it is never retried as it was.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..messages import Message
from ..redact import error_text, redact_text
from ..render import exchange_text as render_exchange
from ..tokens import EstimateCounter
from . import base
from .base import CountText, Rejection, SummaryRejected
from .checks import CheckInput, check_summary
from .facts_text import strip_facts
from .input import prepare_exchange
from .limits import context_overflow, input_budget
from .prompts import (
    BATCH_PROMPT,
    PROSE_HEADINGS,
    PROSE_WORDS,
    batch_request,
    condense_request,
    condense_system,
    condense_words,
    merge_request,
    merge_system,
    retry_note,
)
from .sections import Section, clip, parse_sections, render_sections
from .validation import completion_summary

log = logging.getLogger("microcompact")

_PLACEHOLDER_KEY = "microcompact-no-key-set"
EXCERPT_CHARS = 160  # of a rejected answer, redacted, in the log
_MIN_EXCHANGE_TOKENS = 200  # below this an exchange cannot be summarized usefully: the context is too small
# The facts kept beside the model's prose: (previous summary, exchange) -> text. Trusted by the checks.
FactsHook = Callable[[str | None, Sequence[Message]], str]
# A request built from the exchange to send (possibly shrunk) and a note appended on a retry.
_Build = Callable[[list[Message], str], str]


MAX_SHARED_CLIENTS = 64  # endpoints (URL, key, timeout) whose SDK client is kept for the next summarizer
_clients: dict[tuple[str, str | None, float], Any] = {}
_clients_lock = threading.Lock()


def shared_client(key: str, base_url: str | None, timeout: float) -> Any:
    """The SDK client for one endpoint, key and timeout, made once per process and shared by every summarizer
    that calls it (the SDK client is thread-safe). A proxy opens a session, and so a summarizer, at each
    conversation's first request: making a client loads the TLS certificates (tens of ms), and the first one
    imports the SDK (most of a second), which that request would wait for. One client is also one
    connection pool for every session. The SDK is imported here, so the offline extractive path never pays
    for it."""
    import openai

    url = base_url or os.environ.get("OPENAI_BASE_URL")  # what the SDK itself would take
    with _clients_lock:
        client = _clients.get((key, url, timeout))
        if client is None:
            if len(_clients) >= MAX_SHARED_CLIENTS:
                _clients.pop(next(iter(_clients)))  # dropped, not closed: a summarizer may still use it
            client = _clients[(key, url, timeout)] = openai.OpenAI(
                api_key=key, base_url=url, timeout=timeout, max_retries=0
            )
        return client


class OpenAISummarizer:
    """Summaries from a model behind any OpenAI-compatible chat-completions endpoint.

    Works with OpenAI and with local servers (vLLM, Ollama, llama.cpp) that need no key: when
    ``api_key_env`` is unset a placeholder key is sent, and a 401 says which variable to set. Without
    ``base_url`` the SDK's default applies (``OPENAI_BASE_URL``, else api.openai.com). The SDK
    makes no retries (the engine owns retries and backoff); its errors are mapped to
    :class:`SummarizerError` subclasses. The request text is redacted once more before it leaves, and
    the model's output is redacted too.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_output_tokens: int = 1024,
        temperature: float = 0.1,
        *,
        facts: FactsHook | None = None,
        count_text: CountText | None = None,
        prose_words: int = PROSE_WORDS,
    ) -> None:
        self.name = model
        self.model = model
        self.api_key_env = api_key_env
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.facts = facts
        self.count_text: CountText = count_text or EstimateCounter().count
        self.prose_words = prose_words
        self.context_limit: int | None = None  # learned from the server's first "does not fit" error
        self.rejections = 0  # answers rejected by the checks (first attempts and retries)
        key = os.environ.get(api_key_env)
        self._key_missing = not key
        self._client = shared_client(key or _PLACEHOLDER_KEY, base_url, timeout)

    # ------------------------------------------------------------------ the protocol

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        prose, kept = split_prose(summary)
        shown = prose or summary  # the notes the model rewrites (all of it before the first notes exist)
        trusted = kept_beside(self.facts, summary or None, kept, exchange)
        system = merge_system(self.prose_words)
        given = merge_input(summary, exchange, system + "\n" + merge_request("", "", self.prose_words), shown, trusted)

        def build(messages: list[Message], note: str) -> str:
            return merge_request(shown, render_exchange(messages), self.prose_words) + note

        return join_facts(self._checked(system, build, list(exchange), given), trusted)

    def condense(self, summary: str, target_tokens: int) -> str:
        prose, kept = split_prose(summary)
        trusted = kept_beside(self.facts, summary, kept, [])
        words = min(self.prose_words, condense_words(max(0, target_tokens - self.count_text(trusted))))
        system = condense_system(words)
        shown = prose or summary
        given = CheckInput(
            previous=summary,
            messages=[],
            instructions=system + "\n" + condense_request("", words),
            required_sections=PROSE_HEADINGS,
            trusted=trusted,
        )
        text = self._checked(system, lambda _, note: condense_request(shown, words) + note, [], given)
        return join_facts(text, trusted)

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        given = CheckInput(
            previous=summary,
            messages=[render_exchange([m]) for m in messages],
            instructions=BATCH_PROMPT + "\n" + batch_request("", "", focus),
        )

        def build(shown: list[Message], note: str) -> str:
            return batch_request(summary, render_exchange(shown), focus) + note

        return self._checked(BATCH_PROMPT, build, list(messages), given)

    # ------------------------------------------------------------------ checked calls

    def _checked(self, system: str, build: _Build, exchange: list[Message], given: CheckInput) -> str:
        """An answer that passed every check, after at most one retry with a changed request.

        The retry changes what is sent: after a context-size error or a cut-off answer the exchange is
        shrunk; after any other rejection a note says what was wrong. Never the same request twice.
        """
        exchange = self._fit(system, build, exchange)
        try:
            text = self._complete(system, build(exchange, ""))
            rejection = check_summary(text, given)
        except SummaryRejected as exc:  # context size or cut off: the retry gets a smaller input
            self._log_rejection(exc.rejection, exc.excerpt, retry=True)
            cut_off = exc.rejection.code == "cut_off"
            note = "\n\n" + retry_note(exc.rejection.reason) if cut_off else ""
            if exchange:
                exchange = self._shrunk(system, build, exchange, exc)
            elif not cut_off:
                raise  # nothing to shrink (a condense): the request cannot be made to fit
            return self._final(system, build(exchange, note), given)
        if rejection is None:
            return text
        self._log_rejection(rejection, text, retry=True)
        return self._final(system, build(exchange, "\n\n" + retry_note(rejection.reason)), given)

    def _final(self, system: str, request: str, given: CheckInput) -> str:
        """The one retry: accepted, or :class:`SummaryRejected` so the deterministic summary takes over."""
        try:
            text = self._complete(system, request)
        except SummaryRejected as exc:
            self._log_rejection(exc.rejection, exc.excerpt, retry=False)
            raise
        rejection = check_summary(text, given)
        if rejection is None:
            return text
        self._log_rejection(rejection, text, retry=False)
        raise SummaryRejected(rejection, excerpt(text))

    def _fit(self, system: str, build: _Build, exchange: list[Message]) -> list[Message]:
        """The exchange shrunk to the server's context when an earlier error told us its size."""
        if self.context_limit is None or not exchange:
            return exchange
        room = self.context_limit - self.max_output_tokens
        fixed = self.count_text(system) + self.count_text(build([], ""))
        sent = fixed + self.count_text(render_exchange(exchange))
        if sent * 1.1 <= room:
            return exchange
        return self._within(exchange, int(room / 1.1) - fixed)

    def _shrunk(self, system: str, build: _Build, exchange: list[Message], exc: SummaryRejected) -> list[Message]:
        """A smaller exchange after a context-size error (to what the server holds) or a cut-off answer (half)."""
        fixed = self.count_text(system) + self.count_text(build([], ""))
        exchange_tokens = self.count_text(render_exchange(exchange))
        if exc.overflow is not None:
            budget = input_budget(exc.overflow, self.max_output_tokens, fixed + exchange_tokens) - fixed
        else:
            budget = exchange_tokens // 2
        return self._within(exchange, budget)

    def _within(self, exchange: list[Message], budget: int) -> list[Message]:
        if budget < _MIN_EXCHANGE_TOKENS:
            limit = f"{self.context_limit:,}" if self.context_limit else "its"
            raise SummaryRejected(
                Rejection(
                    "context_size",
                    f"the endpoint's context ({limit} tokens) cannot hold max_output_tokens "
                    f"({self.max_output_tokens}) plus the summary and an exchange: raise the server's context "
                    "size or lower max_output_tokens",
                )
            )
        return prepare_exchange(exchange, budget, self.count_text)

    def _log_rejection(self, rejection: Rejection, text: str, *, retry: bool) -> None:
        self.rejections += 1
        then = "retrying once with a changed request" if retry else "the deterministic summary takes over"
        log.warning("Summarizer %s: answer rejected (%s); %s. Excerpt: %r", self.model, rejection, then, excerpt(text))

    # ------------------------------------------------------------------ one request

    def _complete(self, system: str, user: str) -> str:
        import openai

        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": redact_text(user)}],
                temperature=self.temperature,
                max_tokens=self.max_output_tokens,
            )
        except openai.OpenAIError as exc:
            overflow = context_overflow(exc) if isinstance(exc, openai.APIStatusError) else None
            if overflow is not None:
                self.context_limit = overflow.limit or self.context_limit
                reason = f"the request does not fit the endpoint's context ({_describe(exc)}: {str(exc)[:120]})"
                raise SummaryRejected(Rejection("context_size", reason), overflow=overflow) from exc
            raise self._error(exc) from exc
        except ValueError as exc:  # a 200 whose body is not JSON
            raise base.SummarizerBadOutput(f"{self.model}: unparseable response ({exc})") from exc
        return redact_text(completion_summary(response, self.model))

    def _error(self, exc: Exception) -> base.SummarizerError:
        """The summarizer error for an SDK error (order matters: a timeout is a connection error)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return base.SummarizerTimeout(f"{self.model}: no answer within the timeout")
        if isinstance(exc, openai.RateLimitError):
            if _is_quota_error(exc):
                return base.SummarizerAuthError(
                    f"{self.model}: quota exhausted for the key in {self.api_key_env} (insufficient_quota)"
                )
            return base.SummarizerRateLimited(f"{self.model}: rate limited (429)")
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            if self._key_missing:
                return base.SummarizerAuthError(
                    f"{self.model}: the endpoint requires an API key ({exc.status_code}); "
                    f"set {self.api_key_env} (it is unset, so a placeholder key was sent)"
                )
            return base.SummarizerAuthError(
                f"{self.model}: the key in {self.api_key_env} was rejected ({exc.status_code})"
            )
        if isinstance(exc, (openai.InternalServerError, openai.APIConnectionError)):
            return base.SummarizerUnavailable(f"{self.model}: endpoint unavailable ({_describe(exc)})")
        if isinstance(exc, openai.APIResponseValidationError):
            return base.SummarizerBadOutput(f"{self.model}: response does not match the API schema")
        return base.SummarizerError(f"{self.model}: request failed ({_describe(exc)}: {error_text(exc)})")


def split_prose(summary: str) -> tuple[str, str]:
    """(the model's notes: the template's sections, everything else: facts kept by code) of a summary."""
    prose: list[Section] = []
    kept: list[Section] = []
    for section in parse_sections(summary):
        (prose if section.name in PROSE_HEADINGS else kept).append(section)
    if not kept:
        return summary.strip(), ""  # the notes exactly as accepted (no re-rendering)
    return render_sections(prose), render_sections(kept)


def kept_beside(facts: FactsHook | None, summary: str | None, kept: str, exchange: Sequence[Message]) -> str:
    """What code keeps beside a model's notes: the previous summary's other sections (requirements, open
    questions, ...) as they were, with its ledger sections replaced by the ``facts`` hook's block."""
    if facts is None:
        return kept
    return "\n\n".join(part for part in (strip_facts(kept), facts(summary, exchange).strip()) if part)


def merge_input(summary: str, exchange: Sequence[Message], instructions: str, shown: str, trusted: str) -> CheckInput:
    """What a merge's notes are checked against, whichever model wrote them: the exchange, the prose
    sections every merge keeps, the facts kept beside the notes and the notes the model rewrote."""
    return CheckInput(
        previous=summary,
        messages=[render_exchange([m]) for m in exchange],
        instructions=instructions,
        required_sections=PROSE_HEADINGS,
        trusted=trusted,
        previous_prose=shown,
    )


def join_facts(prose: str, facts: str) -> str:
    """The accepted notes with the facts kept beside them, redacted (the facts may come from raw input)."""
    return redact_text(f"{prose.strip()}\n\n{facts.strip()}" if facts.strip() else prose.strip())


def excerpt(text: str) -> str:
    """A short, redacted, one-line excerpt of a model's answer, for the log."""
    return clip(redact_text(text), EXCERPT_CHARS)


def _is_quota_error(exc: Exception) -> bool:
    body = getattr(exc, "body", None)
    codes = {getattr(exc, "code", None), getattr(exc, "type", None)}
    if isinstance(body, dict):
        codes |= {body.get("code"), body.get("type")}
    return "insufficient_quota" in codes or "insufficient_quota" in str(body)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__
