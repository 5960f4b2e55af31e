"""What a compacted route's request becomes, worked out on a worker thread in one hand-off: its
conversation's key, then either why it goes up as it came (an :class:`Aside`), or the engine's step and the
thinking plan of the view that goes up instead (None: audited, the client's bytes go up)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from ..wire import WireApi
from .compaction import Compaction, Prepared
from .limits import parse_json
from .provider import Provider, stripped
from .routes import model_method
from .session_key import SessionKeys
from .thinking import ThinkingGuard, ThinkingPlan

Plan = ThinkingPlan | None  # None: audited, the client's bytes go up (server/audit.py)


@dataclass(frozen=True)
class Aside:
    """A compacted route's request that goes up as it came: why (the mode header's reason), the name of its
    conversation for the log, and headers of its own."""

    reason: str
    hint: str
    headers: dict[str, str] = field(default_factory=dict)


class RequestSteps:
    """The request side of the engine for the proxy's compacted routes (and the key of its count routes)."""

    def __init__(self, compaction: Compaction, thinking: ThinkingGuard, keys: SessionKeys) -> None:
        self.compaction = compaction
        self.thinking = thinking
        self.keys = keys

    def key(self, request: Request, provider: Provider, body: dict[str, Any]) -> str:
        """The request's conversation key: the same for every route of one conversation (its credential
        fingerprint included), so a count and the thinking guard see the conversation its requests built."""
        material = stripped(provider.key_material(body))
        return self.keys.key(provider.name, request.headers, request.url.query, material)

    def step(self, request: Request, provider: Provider, raw: bytes) -> Aside | tuple[Prepared, Plan]:
        """On a worker thread, in one hand-off (each hand-off waits for a thread to be scheduled, which on a
        loaded machine is a slice of the scheduler's): parse the body (tens of ms of interpreter time for a
        150K-token one, which on the loop would hold every other connection's bytes), then either why it
        goes up as it came, or the engine's step and the thinking plan. Raises BadRequest."""
        body, history = parse(provider, raw)
        aside = self.thinking.aside(provider, body)
        if aside is not None:  # the provider compacts this conversation itself
            return Aside("provider_compaction", conversation_hint(request, body), aside)
        reason = provider.passthrough_reason(body)
        if reason is not None:
            return Aside(reason, conversation_hint(request, body))
        # Gemini's model and method are in the path
        target = model_method(request.url.path) if provider.wire is WireApi.GEMINI else None
        key = self.key(request, provider, body)
        prepared = self.compaction.prepare(provider, body, key, history, target[0] if target else None)
        prepared.client = request.headers.get("user-agent")  # the conversation page names the client
        prepared.streamed = body.get("stream") is True or (target is not None and target[1].startswith("stream"))
        prepared.audit = self.compaction.audit.step(provider, body, history, raw, prepared)
        if prepared.audit is not None:
            return prepared, None
        plan = self.thinking.plan(provider, prepared.key, body, history, prepared.messages, raw, provider.body)
        return prepared, plan


def parse(provider: Provider, raw: bytes) -> tuple[dict[str, Any], list[Any]]:
    """The body and its messages (a BadRequest when it is not JSON or nests too deeply: server/limits.py)."""
    body = parse_json(raw)
    return body, provider.history(body)


def conversation_hint(request: Request, body: dict[str, Any]) -> str:
    """What names a passed-through conversation in the log (its history is not here to digest): the
    client's session header (Codex sends ``session-id``), else its prompt cache key, else nothing."""
    for name in ("x-microcompact-session", "x-claude-code-session-id", "session-id"):
        if request.headers.get(name):
            return f"conversation {request.headers[name][:200]}"
    cache_key = body.get("prompt_cache_key")
    return f"conversation {cache_key[:200]}" if isinstance(cache_key, str) and cache_key else ""
