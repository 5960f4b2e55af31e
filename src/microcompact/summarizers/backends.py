"""How to ask each kind of caller-owned model for a summary, read its answer and name its failures.

A backend turns (system prompt, request text) into one call on the caller's object: an OpenAI SDK
client's ``chat.completions.create``, an Anthropic SDK client's ``messages.create``, or a plain callable
given the whole prompt as one text. The call's result may be awaitable (async clients, ``async def``);
the caller of a backend resolves it. ``read`` gives every answer the chat-completions shape, so one gate
(:func:`~microcompact.summarizers.validation.completion_summary`) checks all model output alike.

SDK errors are recognised by their class names, which the OpenAI and Anthropic SDKs share, so neither SDK
is imported here; error texts name the model and the failure, never the server's message (which may
quote the request).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import base


class Backend(Protocol):
    def request(self, system: str, user: str) -> Any:
        """Start the call: its result, or an awaitable of it."""
        ...

    def read(self, response: Any) -> Any:
        """The answer as a chat completion (``choices[0].message.content``, ``finish_reason``)."""
        ...


@dataclass
class _Message:
    content: str | None


@dataclass
class _Choice:
    message: _Message
    finish_reason: str


@dataclass
class _Completion:
    choices: list[_Choice]


def as_completion(text: str | None, truncated: bool) -> _Completion:
    """``text`` in the chat-completions shape; ``truncated`` when output stopped at the token limit."""
    return _Completion([_Choice(_Message(text), "length" if truncated else "stop")])


@dataclass(frozen=True)
class Asking:
    """What a caller-owned model is asked with, whichever its API: the model, the output limit, the
    temperature (None: the API's default) and the caller's own request options, which win over both."""

    model: str
    max_output_tokens: int
    temperature: float | None
    options: dict[str, Any]

    def params(self, limit: bool = True) -> dict[str, Any]:
        """The request's keyword arguments besides the prompt; ``limit``: send ``max_tokens``."""
        params: dict[str, Any] = {"max_tokens": self.max_output_tokens} if limit else {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return {**params, **self.options}


@dataclass
class OpenAIChat:
    """``client.chat.completions.create`` on an OpenAI SDK client (or any OpenAI-compatible one)."""

    client: Any
    asking: Asking

    def request(self, system: str, user: str) -> Any:
        return self.client.chat.completions.create(
            model=self.asking.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            # reasoning models refuse max_tokens next to max_completion_tokens
            **self.asking.params(limit="max_completion_tokens" not in self.asking.options),
        )

    def read(self, response: Any) -> Any:
        return response


@dataclass
class AnthropicMessages:
    """``client.messages.create`` on an Anthropic SDK client; text blocks joined, thinking blocks ignored."""

    client: Any
    asking: Asking

    def request(self, system: str, user: str) -> Any:
        return self.client.messages.create(
            model=self.asking.model,
            system=system,
            messages=[{"role": "user", "content": user}],
            **self.asking.params(),
        )

    def read(self, response: Any) -> Any:
        blocks = getattr(response, "content", None)
        if not isinstance(blocks, list):
            raise base.SummarizerBadOutput(f"{self.asking.model}: response has no content blocks")
        texts = [b.text for b in blocks if getattr(b, "type", None) == "text" and isinstance(b.text, str)]
        return as_completion("".join(texts), getattr(response, "stop_reason", None) == "max_tokens")


@dataclass
class PlainCallable:
    """A function from prompt text (instructions, then the material) to summary text."""

    function: Callable[[str], Any]
    name: str

    def request(self, system: str, user: str) -> Any:
        return self.function(f"{system}\n\n{user}")

    def read(self, response: Any) -> Any:
        if not isinstance(response, str):
            raise base.SummarizerBadOutput(f"{self.name}: returned {type(response).__name__}, not text")
        return as_completion(response, truncated=False)


def summarizer_error(exc: BaseException, name: str) -> base.SummarizerError:
    """The summarizer error for what a client or callable raised (timeouts before connection errors:
    the SDKs' timeout is a connection error)."""
    if isinstance(exc, base.SummarizerError):
        return exc
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if isinstance(exc, TimeoutError) or "APITimeoutError" in kinds:
        return base.SummarizerTimeout(f"{name}: no answer within the timeout")
    if _out_of_credit(exc, status):
        return base.SummarizerAuthError(f"{name}: the account's quota or credit is exhausted ({status})")
    if "RateLimitError" in kinds or status == 429:
        return base.SummarizerRateLimited(f"{name}: rate limited (429)")
    if kinds & {"AuthenticationError", "PermissionDeniedError"} or status in (401, 403):
        return base.SummarizerAuthError(f"{name}: the client's credentials were rejected ({status})")
    if "APIConnectionError" in kinds or isinstance(exc, ConnectionError) or (status is not None and status >= 500):
        return base.SummarizerUnavailable(f"{name}: endpoint unavailable ({_describe(exc, status)})")
    if "APIResponseValidationError" in kinds or isinstance(exc, json.JSONDecodeError):
        return base.SummarizerBadOutput(f"{name}: unparseable response ({type(exc).__name__})")
    return base.SummarizerError(f"{name}: request failed ({_describe(exc, status)})")


def _out_of_credit(exc: BaseException, status: object) -> bool:
    """OpenAI's 429 ``insufficient_quota``, Anthropic's 400 "credit balance is too low", any 402."""
    if status == 402:
        return True
    if status not in (400, 429):
        return False
    body = getattr(exc, "body", None)
    text = json.dumps(body, default=str) if body is not None else str(getattr(exc, "message", ""))
    return "insufficient_quota" in text or "credit balance" in text


def _describe(exc: BaseException, status: object) -> str:
    return f"HTTP {status}" if status else type(exc).__name__
