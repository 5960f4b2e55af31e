"""Summaries from a model behind any OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

import os

from ..redact import redact_text
from ..render import exchange_text as render_exchange
from .base import (
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerError,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
)
from .prompts import BATCH_PROMPT, CONDENSE_PROMPT, MERGE_PROMPT, batch_request, condense_request, merge_request
from .validation import completion_summary

_PLACEHOLDER_KEY = "microcompact-no-key-set"


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
    ) -> None:
        import openai  # imported here so the offline extractive path never pays for the SDK

        self.name = model
        self.model = model
        self.api_key_env = api_key_env
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        key = os.environ.get(api_key_env)
        self._key_missing = not key
        self._client = openai.OpenAI(api_key=key or _PLACEHOLDER_KEY, base_url=base_url, timeout=timeout, max_retries=0)

    def merge(self, summary: str, exchange: list[dict]) -> str:
        return self._complete(MERGE_PROMPT, merge_request(summary, render_exchange(exchange)))

    def condense(self, summary: str, target_tokens: int) -> str:
        return self._complete(CONDENSE_PROMPT, condense_request(summary, target_tokens))

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        return self._complete(BATCH_PROMPT, batch_request(summary, render_exchange(messages), focus))

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
            raise self._error(exc) from exc
        except ValueError as exc:  # a 200 whose body is not JSON
            raise SummarizerBadOutput(f"{self.model}: unparseable response ({exc})") from exc
        return redact_text(completion_summary(response, self.model))

    def _error(self, exc: Exception) -> SummarizerError:
        """The summarizer error for an SDK error (order matters: a timeout is a connection error)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return SummarizerTimeout(f"{self.model}: no answer within the timeout")
        if isinstance(exc, openai.RateLimitError):
            if _is_quota_error(exc):
                return SummarizerAuthError(
                    f"{self.model}: quota exhausted for the key in {self.api_key_env} (insufficient_quota)"
                )
            return SummarizerRateLimited(f"{self.model}: rate limited (429)")
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            if self._key_missing:
                return SummarizerAuthError(
                    f"{self.model}: the endpoint requires an API key ({exc.status_code}); "
                    f"set {self.api_key_env} (it is unset, so a placeholder key was sent)"
                )
            return SummarizerAuthError(f"{self.model}: the key in {self.api_key_env} was rejected ({exc.status_code})")
        if isinstance(exc, (openai.InternalServerError, openai.APIConnectionError)):
            return SummarizerUnavailable(f"{self.model}: endpoint unavailable ({_describe(exc)})")
        if isinstance(exc, openai.APIResponseValidationError):
            return SummarizerBadOutput(f"{self.model}: response does not match the API schema")
        return SummarizerError(f"{self.model}: request failed ({_describe(exc)}: {str(exc)[:200]})")


def _is_quota_error(exc: Exception) -> bool:
    body = getattr(exc, "body", None)
    codes = {getattr(exc, "code", None), getattr(exc, "type", None)}
    if isinstance(body, dict):
        codes |= {body.get("code"), body.get("type")}
    return "insufficient_quota" in codes or "insufficient_quota" in str(body)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__
