"""Which API a request is for: one table of the routes ``serve`` answers, matched by path (and, where a path
belongs to several providers, by the request's auth header).

A path is matched with or without its ``/v1`` (an OpenAI client whose base URL lacks it sends
``/chat/completions``). The first segment after ``/v1`` names a provider's resource; a resource only one
provider has goes to that provider, a shared one (``models``, ``files``) to the provider whose credential
header the request carries. Gemini's routes (``/v1beta/...``, ``/v1alpha/...``, ``/upload/...``,
``/v1/models/M:method`` for one of Gemini's model methods, a Google key on a shared resource) go to the Gemini
upstream with their full path (a colon alone says nothing: OpenAI's fine-tuned model ids hold colons,
``ft:BASE:ORG::ID``, and ``GET /v1/models/ft:...`` is OpenAI's);
``models/M:generateContent`` and ``:streamGenerateContent`` are compacted, ``:countTokens`` counts the
compacted view. Anything else is refused here, so no request (and no key) reaches an upstream it was not
meant for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..wire import Upstream, WireApi

OPENAI, ANTHROPIC, GEMINI = Upstream.OPENAI, Upstream.ANTHROPIC, Upstream.GEMINI


class RouteKind(StrEnum):
    """What the proxy does with a request: the compacted endpoints, a plain forward, and the refusal."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"
    GENERATE_CONTENT = "generate_content"
    GEMINI_COUNT_TOKENS = "gemini_count_tokens"
    FORWARD = "forward"
    UNKNOWN = "unknown"


CHAT, RESPONSES, MESSAGES, COUNT_TOKENS = (
    RouteKind.CHAT,
    RouteKind.RESPONSES,
    RouteKind.MESSAGES,
    RouteKind.COUNT_TOKENS,
)
GENERATE_CONTENT, GEMINI_COUNT_TOKENS = RouteKind.GENERATE_CONTENT, RouteKind.GEMINI_COUNT_TOKENS
FORWARD, UNKNOWN = RouteKind.FORWARD, RouteKind.UNKNOWN
# The wire API of each compacted kind (a count is counted in its generating route's format).
WIRE_OF: dict[RouteKind, WireApi] = {
    CHAT: WireApi.CHAT,
    RESPONSES: WireApi.RESPONSES,
    MESSAGES: WireApi.MESSAGES,
    COUNT_TOKENS: WireApi.MESSAGES,
    GENERATE_CONTENT: WireApi.GEMINI,
    GEMINI_COUNT_TOKENS: WireApi.GEMINI,
}

# The first path segment after /v1 of each provider's public API.
OPENAI_RESOURCES = frozenset(
    {
        "assistants",
        "audio",
        "batches",
        "chat",
        "chatkit",
        "completions",
        "containers",
        "conversations",
        "embeddings",
        "evals",
        "files",
        "fine_tuning",
        "images",
        "models",
        "moderations",
        "organization",
        "realtime",
        "responses",
        "threads",
        "uploads",
        "vector_stores",
        "videos",
    }
)
ANTHROPIC_RESOURCES = frozenset({"complete", "experimental", "files", "messages", "models", "organizations", "skills"})
SHARED_RESOURCES = OPENAI_RESOURCES & ANTHROPIC_RESOURCES
GEMINI_VERSIONS = frozenset({"v1beta", "v1alpha"})
# The versions whose models/M:method Gemini answers (google-genai 3 defaults to /v1/models/M:method).
GEMINI_MODEL_VERSIONS = GEMINI_VERSIONS | {"v1"}
# Gemini's model methods (``models/M:method``), as its REST reference names them: on ``/v1``, which OpenAI's
# and Anthropic's model routes share, only these (or a Google credential) make a ``M:X`` path Gemini's.
GEMINI_MODEL_METHODS = frozenset(
    {
        "asyncBatchEmbedContent",
        "batchEmbedContents",
        "batchEmbedText",
        "batchGenerateContent",
        "computeTokens",
        "countMessageTokens",
        "countTextTokens",
        "countTokens",
        "embedContent",
        "embedText",
        "generateAnswer",
        "generateContent",
        "generateMessage",
        "generateText",
        "predict",
        "predictLongRunning",
        "streamGenerateContent",
    }
)
GEMINI_COMPACTED: dict[str, RouteKind] = {
    "generateContent": GENERATE_CONTENT,
    "streamGenerateContent": GENERATE_CONTENT,
    "countTokens": GEMINI_COUNT_TOKENS,
}

# The POST endpoints compacted by the proxy: (resource path after /v1, kind).
COMPACTED: dict[str, RouteKind] = {"/chat/completions": CHAT, "/responses": RESPONSES, "/messages": MESSAGES}
COUNTED = {"/messages/count_tokens": COUNT_TOKENS}

# Each provider's credential headers. Toward one provider, the others' are dropped (forward.py).
CREDENTIALS: dict[Upstream, frozenset[str]] = {
    OPENAI: frozenset({"authorization", "openai-organization", "openai-project", "api-key"}),
    ANTHROPIC: frozenset({"authorization", "x-api-key"}),
    GEMINI: frozenset({"authorization", "x-goog-api-key", "x-goog-user-project"}),
}


@dataclass(frozen=True)
class Route:
    """Where one request goes: its API, what the proxy does with it, and the path to append to that
    provider's base URL (OpenAI's base URL holds ``/v1``, Anthropic's does not)."""

    api: Upstream | None  # None: no provider (an unknown route)
    kind: RouteKind
    upstream_path: str = ""

    @property
    def wire(self) -> WireApi | None:
        """The wire API of a compacted route (None: a forward or a refusal, which have none)."""
        return WIRE_OF.get(self.kind)

    @property
    def compacted(self) -> bool:
        return self.wire is not None


def _by_credentials(headers: Mapping[str, str], query: str) -> Upstream:
    """The provider a request on a shared resource is for, by the credential it carries (OpenAI's
    bearer key when no other provider's header is there)."""
    if "anthropic-version" in headers or "x-api-key" in headers:
        return ANTHROPIC
    if _google_credential(headers, query):
        return GEMINI
    return OPENAI


def _google_credential(headers: Mapping[str, str], query: str) -> bool:
    return "x-goog-api-key" in headers or _has_key_param(query)


def _has_key_param(query: str) -> bool:
    return any(pair.split("=", 1)[0] == "key" for pair in query.split("&") if pair)


def _is_gemini(path: str, rest: str, headers: Mapping[str, str], query: str) -> bool:
    """Gemini's API: ``/v1beta/...``, ``/upload/v1beta/...``, and ``/v1/models/M:method`` where the method is
    one of Gemini's, or where a Google credential (and no Anthropic one) says whose ``M:X`` it is."""
    first = path.lstrip("/").split("/", 1)[0]
    if first in GEMINI_VERSIONS or path.startswith("/upload/"):
        return True
    last = rest.rsplit("/", 1)[-1]
    if not rest.startswith("/models/") or ":" not in last:
        return False
    return last.rpartition(":")[2] in GEMINI_MODEL_METHODS or _by_credentials(headers, query) == GEMINI


def model_method(path: str) -> tuple[str, str] | None:
    """``(model, method)`` of a Gemini ``/{version}/models/{model}:{method}`` path, else None."""
    version, _, rest = path.lstrip("/").partition("/")
    target = rest.removeprefix("models/")
    model, colon, method = target.rpartition(":")
    if version not in GEMINI_MODEL_VERSIONS or target == rest or not colon or not model or "/" in model:
        return None
    return model, method


def _gemini(method: str, path: str) -> Route:
    """A Gemini route: its model methods compacted (POST), every other path forwarded as it came."""
    target = model_method(path) if method == "POST" else None
    kind = GEMINI_COMPACTED.get(target[1], FORWARD) if target is not None else FORWARD
    return Route(GEMINI, kind, path)


def match(method: str, path: str, headers: Mapping[str, str], query: str = "") -> Route:
    """The route of ``method path`` (headers with lower-case names, as Starlette gives them)."""
    rest = path[3:] if path.startswith("/v1/") else path
    if _is_gemini(path, rest, headers, query):
        return _gemini(method, path)
    resource = rest.lstrip("/").split("/", 1)[0]
    if method == "POST" and rest in COMPACTED:
        kind = COMPACTED[rest]
        return Route(WIRE_OF[kind].upstream, kind, _upstream_path(kind, rest))
    if method == "POST" and rest in COUNTED:
        return Route(ANTHROPIC, COUNTED[rest], "/v1" + rest)
    if resource in SHARED_RESOURCES:
        api = _by_credentials(headers, query)
    elif resource in OPENAI_RESOURCES:
        api = OPENAI
    elif resource in ANTHROPIC_RESOURCES:
        api = ANTHROPIC
    else:
        return Route(None, UNKNOWN)
    if api == GEMINI:
        return Route(GEMINI, FORWARD, path)
    return Route(api, FORWARD, rest if api == OPENAI else "/v1" + rest)


def _upstream_path(kind: RouteKind, rest: str) -> str:
    return "/v1" + rest if kind == MESSAGES else rest


def served() -> list[str]:
    """The routes ``serve`` answers, one line each, for its startup message."""
    return [
        "POST /v1/chat/completions, /chat/completions  OpenAI Chat Completions, compacted",
        "POST /v1/responses, /responses  OpenAI Responses, compacted (previous_response_id: passed through)",
        "POST /v1/messages, /messages  Anthropic Messages, compacted (count_tokens: the compacted view)",
        "/v1/{" + ",".join(sorted(OPENAI_RESOURCES - SHARED_RESOURCES)) + "}/...  forwarded to OpenAI",
        "/v1/{" + ",".join(sorted(ANTHROPIC_RESOURCES - SHARED_RESOURCES)) + "}/...  forwarded to Anthropic",
        "/v1/{"
        + ",".join(sorted(SHARED_RESOURCES))
        + "}/...  forwarded by credential (x-api-key or anthropic-version: Anthropic; x-goog-api-key or "
        "?key=: Gemini; else OpenAI)",
        "POST /v1beta/models/M:generateContent, :streamGenerateContent (also /v1alpha, /v1)  Gemini, compacted "
        "(:countTokens: the compacted view)",
        "/v1beta/..., /v1alpha/..., /upload/..., /v1/models/M:method (Gemini's methods)  forwarded to Gemini",
        "GET /healthz, GET /metrics, GET /ui (the conversation page, JSON under /ui/api/); any other path: 404, "
        "forwarded nowhere",
    ]


__all__ = ["CREDENTIALS", "WIRE_OF", "Route", "RouteKind", "match", "model_method", "served"]
