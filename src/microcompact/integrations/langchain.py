"""LangChain v1: :class:`MicroCompactMiddleware`, a drop-in for ``SummarizationMiddleware``.

    agent = create_agent(model, tools, middleware=[MicroCompactMiddleware(context_length=128_000)])

The agent's state keeps the full history (nothing is removed from it); ``wrap_model_call`` hands the model
the compacted view instead: user messages verbatim, the work between them folded into summary markers,
tool calls never split from their results. With no summarizer the offline extractive one writes the
summaries; ``model`` (a chat model or its name, as ``SummarizationMiddleware`` takes) summarizes with that
model, and ``summarizer`` takes anything :func:`~microcompact.summarizers.summarizer_from` accepts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..messages import Message
from ..summarizers import Summarizer, summarizer_from
from .compactor import HistoryCompactor, KeyFunction, ViewEntry, adapter_config, opening_key, require

require("langchain.agents.middleware", "langchain")

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse  # noqa: E402
from langchain.chat_models import BaseChatModel, init_chat_model  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AnyMessage,
    BaseMessage,
    convert_to_messages,
    convert_to_openai_messages,
)

if TYPE_CHECKING:
    from ..store import SessionStore

__all__ = ["MicroCompactMiddleware", "from_openai", "to_openai"]


def to_openai(message: BaseMessage) -> Message:
    """One LangChain message as an OpenAI-format dict (tool calls with their ids, tool results, content
    blocks); LangChain's own converter, one message at a time so none is merged or dropped."""
    converted = convert_to_openai_messages([message])
    if len(converted) != 1:
        raise ValueError(f"{type(message).__name__} {message.id!r}: converts to {len(converted)} OpenAI messages")
    return dict(converted[0])


def from_openai(message: Message) -> AnyMessage:
    """An OpenAI-format dict as a LangChain message."""
    return convert_to_messages([message])[0]  # type: ignore[return-value]


def _rebuilt(entry: ViewEntry, originals: Sequence[AnyMessage]) -> AnyMessage:
    """A view message as LangChain's: the original object when unchanged, a summary marker converted from
    its dict, and a shortened message (a cut or stubbed tool output, shortened arguments) as a copy of the
    original with the view's content and tool calls (its id, name, tool call id and metadata kept)."""
    if entry.origin is None:
        return from_openai(entry.message)
    original = originals[entry.origin]
    if entry.unchanged:
        return original
    shortened = from_openai(entry.message)
    fields: dict[str, Any] = {"content": shortened.content}
    if isinstance(original, AIMessage) and isinstance(shortened, AIMessage):
        fields["tool_calls"] = shortened.tool_calls
    return original.model_copy(update=fields)


def _chat_model_summarizer(model: BaseChatModel) -> Summarizer:
    """The chat model as a summarizer: the summarizer's prompt in, the reply's text out."""

    def summarize(prompt: str) -> str:
        return model.invoke(prompt).text

    return summarizer_from(summarize, getattr(model, "model_name", None) or type(model).__name__)


ContextSize = tuple[str, float]


def _with_summarization_settings(
    config: Config, trigger: ContextSize | None, keep: ContextSize | None, window: int | None
) -> Config:
    """``SummarizationMiddleware``'s ``trigger`` and ``keep`` as microcompact settings: the trigger becomes
    the batch threshold, ``keep`` the protected tail (micro-compaction runs whatever the trigger)."""
    compression: dict[str, Any] = {}
    model: dict[str, Any] = {}
    if trigger is not None:
        kind, value = trigger
        if kind == "fraction" and window:
            compression["threshold"] = value
        elif kind == "tokens" and window:
            compression["threshold"] = min(1.0, value / window)
        elif kind == "tokens":  # no window known: the trigger is the window microcompact keeps under
            model["context_length"], compression["threshold"] = int(value), 1.0
        else:
            raise ValueError(
                f"MicroCompactMiddleware: trigger={trigger!r} is not supported: use ('tokens', N), or "
                "('fraction', F) with context_length (or a model whose profile gives max_input_tokens)"
            )
    threshold = (window or model.get("context_length") or 0) * compression.get(
        "threshold", config.compression.threshold
    )
    if keep is not None:
        kind, value = keep
        if kind == "messages":
            compression["min_tail_messages"] = int(value)
        else:
            kept = value if kind == "tokens" else value * (window or 0) if kind == "fraction" else 0
            if not (kept and threshold):
                raise ValueError(
                    f"MicroCompactMiddleware: keep={keep!r} is not supported here: use ('tokens', N), "
                    "('messages', N), or ('fraction', F) with context_length"
                )
            compression["target_ratio"] = min(0.9, kept / threshold)
    if not compression and not model:
        return config
    return config.with_overrides("MicroCompactMiddleware", compression=compression, model=model)


def _window_of(model: BaseChatModel | None) -> int | None:
    profile = getattr(model, "profile", None) if model is not None else None
    limit = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return limit if isinstance(limit, int) else None


class MicroCompactMiddleware(AgentMiddleware):
    """Hands the model the compacted view of the agent's messages; the agent's state keeps them all.

    One middleware serves any number of conversations: each is keyed by its opening message (``key`` to
    choose otherwise) and held in a session (kept in ``store`` when given, so a restarted process resumes
    without summarizing again). ``context_length`` defaults to the model profile's ``max_input_tokens``.
    ``trigger`` and ``keep`` take ``SummarizationMiddleware``'s token and fraction forms (and ``keep``'s
    message count), so replacing one with the other keeps its settings.
    """

    def __init__(
        self,
        model: str | BaseChatModel | None = None,
        *,
        context_length: int | None = None,
        summarizer: Any = None,
        config: Config | None = None,
        store: SessionStore | None = None,
        key: KeyFunction | None = None,
        trigger: ContextSize | None = None,
        keep: ContextSize | None = None,
    ) -> None:
        super().__init__()
        chat_model = init_chat_model(model) if isinstance(model, str) else model
        if summarizer is not None:
            summarizer = summarizer_from(summarizer)
        elif chat_model is not None:
            summarizer = _chat_model_summarizer(chat_model)
        window = context_length or (config.model.context_length if config else None) or _window_of(chat_model)
        settings = _with_summarization_settings(adapter_config(window, config), trigger, keep, window)
        self.compactor = HistoryCompactor(config=settings, store=store, summarizer=summarizer)
        self.key = key or opening_key

    def compacted(self, messages: Sequence[AnyMessage]) -> list[AnyMessage]:
        """The compacted view of ``messages`` (the agent's full list, system prompt excluded)."""
        history = [to_openai(m) for m in messages]
        view = self.compactor.view(self.key(history), history)
        return [_rebuilt(e, messages) for e in view]

    def pre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """For LangGraph's ``create_react_agent(..., pre_model_hook=middleware.pre_model_hook)``: the model
        gets the compacted view as ``llm_input_messages``; the graph's ``messages`` stay whole."""
        return {"llm_input_messages": self.compacted(state["messages"])}

    def close(self) -> None:
        """Write what is pending and release the store's writer leases (another process may then resume)."""
        self.compactor.close()

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        return handler(request.override(messages=self.compacted(request.messages)))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        messages = await asyncio.to_thread(self.compacted, request.messages)  # a pass never blocks the loop
        return await handler(request.override(messages=messages))
