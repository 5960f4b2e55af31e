"""The caller's own model client as the summarizer: an OpenAI or Anthropic SDK client, sync or async, or a
plain callable (prompt text in, summary text out; ``async def`` too).

:func:`summarizer_from` picks the backend by what the object offers (``chat.completions.create`` or
``messages.create``), so Azure, Bedrock and Vertex variants and OpenAI-compatible wrappers work too. The
prompts are the HTTP summarizer's (``templates/``); the request text is redacted before it leaves and the
model's output is checked like the HTTP summarizer's (truncated, empty, reasoning-only output is refused)
and redacted. SDK clients are used with ``max_retries=0`` (a copy via ``with_options``; the caller's client
is untouched): the engine owns retries and backoff.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from ..redact import redact_text
from ..render import exchange_text as render_exchange
from .backends import AnthropicMessages, Asking, Backend, OpenAIChat, PlainCallable, summarizer_error
from .base import Summarizer
from .eventloop import LoopRunner
from .facts import facts_block, ledger_budget, with_facts
from .facts_text import strip_facts
from .prompts import (
    BATCH_PROMPT,
    MERGE_PROMPT,
    batch_request,
    condense_request,
    condense_system,
    condense_words,
    merge_request,
)
from .validation import completion_summary

DEFAULT_TIMEOUT = 60.0  # seconds per summarizer call, as auxiliary.compression.timeout
DEFAULT_DEFRAG_THRESHOLD = 2000  # compression.micro_compact_defrag_threshold_tokens' default: sizes the ledger
_REQUEST_KEYS = frozenset({"model", "messages", "system", "stream"})  # what the request itself consists of


class ClientSummarizer:
    """A :class:`~microcompact.summarizers.Summarizer` over one backend (see :func:`summarizer_from`).

    The engine calls it synchronously; an awaitable answer (async client or callable) is run on the event
    loop the summarizer is bound to (``bind_loop``, done by AsyncSession), else on a private loop thread.
    ``timeout`` bounds each call: SDK clients get it on their copy, awaitables are cancelled after it on the
    loop; a plain sync callable cannot be interrupted, so it must bound itself.
    """

    def __init__(
        self, backend: Backend, name: str, timeout: float | None = None, ledger_budget_tokens: int | None = None
    ) -> None:
        self.backend = backend
        self.name = name
        self.timeout = timeout
        # The file ledger and failing commands are kept by code beside the model's notes (as the HTTP
        # summarizer does): a model may rewrite or drop its notes, never those facts.
        self.ledger_budget_tokens = ledger_budget_tokens or ledger_budget(DEFAULT_DEFRAG_THRESHOLD)
        self._runner = LoopRunner()

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        notes = self._complete(MERGE_PROMPT, merge_request(strip_facts(summary), render_exchange(exchange)))
        block = facts_block(summary or None, exchange, self.ledger_budget_tokens)
        return redact_text(with_facts(notes, block)) if block else notes

    def condense(self, summary: str, target_tokens: int) -> str:
        words = condense_words(target_tokens)
        return self._complete(condense_system(words), condense_request(summary, words))

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        return self._complete(BATCH_PROMPT, batch_request(summary, render_exchange(messages), focus))

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run this summarizer's coroutines on ``loop`` (the loop its async client is used on)."""
        self._runner.bind(loop)

    def close(self) -> None:
        """Stop the private event loop thread, if an async client ever needed one."""
        self._runner.close()

    def _complete(self, system: str, user: str) -> str:
        try:
            response = self.backend.request(system, redact_text(user))
            if inspect.isawaitable(response):
                response = self._runner.run(response, self.timeout, self.name)
            completion = self.backend.read(response)
        except Exception as exc:
            raise summarizer_error(exc, self.name) from exc
        return redact_text(completion_summary(completion, self.name))


def summarizer_from(
    source: Any,
    model: str | None = None,
    *,
    max_output_tokens: int = 1024,
    temperature: float | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    options: dict[str, Any] | None = None,
) -> Summarizer:
    """A summarizer that uses ``source``: an OpenAI or Anthropic SDK client (sync or async; ``model`` is
    required), a callable from prompt text to summary text (sync or ``async def``; ``model`` names it in
    telemetry), or a summarizer (returned as it is).

    ``temperature`` is sent only when given (reasoning models refuse it); ``options`` are extra keyword
    arguments for the SDK call (e.g. ``{"max_completion_tokens": 2048}`` for OpenAI reasoning models, with
    ``max_output_tokens`` then overridden by it). ``timeout`` (seconds; the default is
    ``auxiliary.compression.timeout``'s) bounds each call: a hanging endpoint or coroutine would otherwise
    hold the pass, and an inline pass the session, for the SDK's ten minutes or forever; None removes the
    bound. Raises TypeError for anything else, ValueError when an SDK client comes without ``model``.
    """
    if isinstance(source, Summarizer):
        return source
    extra = dict(options or {})
    kind = _client_kind(source)
    if kind is not None:
        if not model:
            raise ValueError(
                f"summarizer_from: model is required for {type(source).__name__} (the model to summarize with)"
            )
        taken = sorted(_REQUEST_KEYS & set(extra))
        if taken:
            raise ValueError(
                f"summarizer_from: options may not set {', '.join(taken)} (the summarizer builds every request "
                "itself; otherwise each call would fail and the exchanges be skipped)"
            )
        client = _without_retries(source, timeout)
        asking = Asking(model, max_output_tokens, temperature, extra)
        backend: Backend = (OpenAIChat if kind == "openai" else AnthropicMessages)(client, asking)
        return ClientSummarizer(backend, model, timeout)
    if callable(source):
        name = model or getattr(source, "__name__", None) or type(source).__name__
        return ClientSummarizer(PlainCallable(source, name), name, timeout)
    raise TypeError(
        "summarizer_from: expected an OpenAI or Anthropic client, a callable (prompt text -> summary text) "
        f"or a summarizer; got {type(source).__name__}"
    )


def _client_kind(source: Any) -> str | None:
    """``"openai"`` or ``"anthropic"`` by the method the client offers; None for anything else."""
    chat = getattr(source, "chat", None)
    if callable(getattr(getattr(chat, "completions", None), "create", None)):
        return "openai"
    if callable(getattr(getattr(source, "messages", None), "create", None)):
        return "anthropic"
    return None


def _without_retries(client: Any, timeout: float | None) -> Any:
    """A copy of ``client`` that makes no retries of its own (and has ``timeout``, when given)."""
    with_options: Callable[..., Any] | None = getattr(client, "with_options", None)
    if with_options is None:
        return client
    settings: dict[str, Any] = {"max_retries": 0}
    if timeout is not None:
        settings["timeout"] = timeout
    try:
        return with_options(**settings)
    except TypeError:  # a wrapper with a different with_options: use the client as given
        return client
