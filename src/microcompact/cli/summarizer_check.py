"""``replay`` and a model summarizer that cannot answer: refused before the run, counted after it.

The engines fall back when a summarizer fails (a pass leaves the history as it was, a batch compaction
takes the extractive summary), which is right for a live agent and wrong for a replay someone runs to
measure a model: a replay against a closed port used to finish with exit 0 and a table of
``summarize_failed``. So:

- before the run, an endpoint named by ``--base-url`` (or ``auxiliary.compression.base_url``) must accept a
  TCP connection: else one line naming the URL and exit 2 (no request is sent, so no key and no tokens);
- after the run, every summarizer failure is counted in one warning line on stderr, and when the model
  never produced a summary at all the exit code is 1 (the summary is still printed).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from ..config import Config, SummarizerKind
from ..events import Outcome
from ..replay import ReplayStats

# Seconds to wait for the TCP handshake: a closed port answers at once, a dropped packet should not stall.
CONNECT_TIMEOUT_SECONDS = 5.0
FAILED = (Outcome.SUMMARIZE_FAILED, Outcome.AUTH_FAILED)
# Outcomes that mean the model wrote a summary (a rejected answer was still an answer).
ANSWERED_MICRO = (Outcome.ABSORBED, Outcome.MODEL_REJECTED, Outcome.DEFRAG)
ANSWERED_BATCH = (Outcome.COMPACTED,)


def unreachable(cfg: Config) -> str | None:
    """Why the configured model endpoint cannot be reached (None: reachable, or no endpoint named)."""
    aux = cfg.auxiliary.compression
    if aux.kind is SummarizerKind.UPSTREAM:
        return (
            "auxiliary.compression.provider: upstream asks the client's own model through microcompact serve; "
            "a replay has no upstream: set another provider (or replay with --summarizer extractive)"
        )
    if aux.kind is not SummarizerKind.ENDPOINT or not aux.base_url or not aux.model:
        return None  # no endpoint named (the SDK's default), or no model: that error comes first
    parts = urlsplit(aux.base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    try:
        with socket.create_connection((host, port), timeout=min(CONNECT_TIMEOUT_SECONDS, aux.timeout_seconds())):
            return None
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return (
            f"the summarizer at {_without_userinfo(aux.base_url)} cannot be reached ({reason}); start it, fix "
            "--base-url (or auxiliary.compression.base_url), or replay with --summarizer extractive"
        )


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (an error line is no place for a password)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()


def failure_report(stats: ReplayStats) -> tuple[str | None, int]:
    """(the warning line, the exit code) for the summarizer failures of a replay: (None, 0) with none."""
    micro = sum(stats.outcomes.get(o, 0) for o in FAILED)
    batch = sum(stats.batch_outcomes.get(o, 0) for o in FAILED)
    if not micro and not batch:
        return None, 0
    answered = sum(stats.outcomes.get(o, 0) for o in ANSWERED_MICRO) + sum(
        stats.batch_outcomes.get(o, 0) for o in ANSWERED_BATCH
    )
    never = answered == 0
    line = (
        f"warning: the summarizer failed {micro + batch} time(s) ({micro} micro pass(es), {batch} batch "
        "compaction(s)); those passes kept the history or used the extractive summary"
        + ("; it never produced a summary, so this replay measured no model (exit 1)" if never else "")
        + "; the log has each error"
    )
    return line, 1 if never else 0
