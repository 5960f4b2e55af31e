"""When the summarizer may be called again after a failure: longer after repeated timeouts, shorter after
malformed output, never again after an authentication or quota error."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..redact import error_text
from ..summarizers import SummarizerAuthError, SummarizerBadOutput, SummarizerRateLimited, SummarizerTimeout


class Backoff:
    """When the summarizer may be called again after a failure."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.until = 0.0
        self.timeouts = 0
        self.auth_error: str | None = None

    def blocked(self) -> str | None:
        if self.auth_error:
            return f"summarizer refused credentials or quota ({self.auth_error}); not retried"
        if self.clock() < self.until:
            return f"summarizer cooling down for {self.until - self.clock():.0f} s"
        return None

    def failed(self, exc: Exception) -> None:
        now = self.clock()
        if isinstance(exc, SummarizerAuthError):
            self.auth_error = error_text(exc)
        elif isinstance(exc, SummarizerTimeout):
            self.timeouts += 1
            self.until = now + min(30.0 * 2 ** (self.timeouts - 1), 900.0)
        elif isinstance(exc, SummarizerRateLimited):
            self.until = now + 60.0
        elif isinstance(exc, SummarizerBadOutput):
            self.until = now + 10.0
        else:
            self.until = now + 30.0

    def succeeded(self) -> None:
        self.until, self.timeouts = 0.0, 0
