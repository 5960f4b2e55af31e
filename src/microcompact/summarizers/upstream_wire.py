"""The wire side of a summary that rides the provider's cache: the request body built from the one the client
last sent (its conversation left exactly as it went up, one instruction appended), and the answer read
back (its text, why it stopped, what the cache did): Anthropic Messages, OpenAI Chat Completions,
OpenAI Responses (not stored on the provider: ``store`` false) and Gemini ``generateContent``.

Only what is outside the cached prefix changes: ``stream`` (off: one JSON answer), the output bound and,
for OpenAI, the stream options. Tools, ``tool_choice``, thinking settings, the system prompt and every
message stay as sent: Anthropic's cache is invalidated from the messages on by a change of ``tool_choice``
or of the thinking settings, OpenAI's reads only an identical prefix (tools included). So the model may
still call a tool: such an answer is refused (:class:`~.base.SummarizerBadOutput`), and the extractive
summary is written instead.

Gemini: the request goes to ``:generateContent`` (``server/upstream_summary`` rewrites a streamed URL),
with ``systemInstruction``, ``tools``, ``toolConfig``, ``safetySettings``, ``cachedContent`` and every
content as sent (implicit caching reads only a byte-identical prefix, and those come before the contents)
and one ``user`` content appended. Only ``generationConfig`` changes, which is no part of the prompt:
``maxOutputTokens`` (the bound, plus the thinking budget: Gemini's thinking tokens count against it and
are billed as output; an unknown budget, dynamic or by ``thinkingLevel``, gets ``THINKING_ALLOWANCE``)
and ``candidateCount`` (dropped: one candidate is read). The answer is ``candidates[0]``: its visible text
parts (``thought`` parts left out); a ``functionCall`` part, a ``finishReason`` other than ``STOP`` and
``MAX_TOKENS`` (``SAFETY``, ``RECITATION``, ``BLOCKLIST``, ...) or a blocked prompt is not a summary.
Its usage: ``promptTokenCount`` (which includes ``cachedContentTokenCount``, the read), and
``candidatesTokenCount`` plus ``thoughtsTokenCount`` as output; Gemini's cache has no write premium, so
nothing is reported written (what was not read is plain input).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..wire import WireApi
from .base import Rejection, SummarizerBadOutput, SummaryRejected
from .sections import clip
from .validation import completion_summary

# The summary wire of each compacted route is its own request format (``WireApi``): ``WIRES`` below.
ANTHROPIC, OPENAI_CHAT = WireApi.MESSAGES, WireApi.CHAT
OPENAI_RESPONSES, GEMINI = WireApi.RESPONSES, WireApi.GEMINI
# Why an answer stopped that leaves it usable as a summary.
FINISHED = {"end_turn", "stop_sequence", "stop"}
# Output tokens added to a Gemini summary request's bound when the client's thinking budget is not a
# number (dynamic thinking, a thinkingLevel, or the model's default): room to think and still answer.
THINKING_ALLOWANCE = 8192


@dataclass(frozen=True)
class Answer:
    """What the upstream answered to a summary request: its text and usage."""

    text: str  # the model's text, as :func:`~.validation.completion_summary` cleans it
    prompt_tokens: int
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int


def summary_body(api: WireApi, body: dict[str, Any], instruction: str, max_output_tokens: int) -> dict[str, Any]:
    """The summary request: ``body`` (the client's request as it went upstream) with ``instruction`` as one
    more user message at the end, no stream and a bounded output. Raises ValueError for a body that holds
    no conversation."""
    return WIRES[api].body(body, instruction, max_output_tokens)


def _unstreamed(body: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A messages body's conversation, and the body to change (key order kept: the cached parts serialize
    as they did) with its stream off."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("the request holds no messages")
    out = dict(body)
    out["stream"] = False
    return messages, out


def _anthropic_body(body: dict[str, Any], instruction: str, max_output_tokens: int) -> dict[str, Any]:
    messages, out = _unstreamed(body)
    out["messages"] = [*messages, {"role": "user", "content": [{"type": "text", "text": instruction}]}]
    out["max_tokens"] = max_output_tokens + _thinking_budget(body)
    return out


def _chat_body(body: dict[str, Any], instruction: str, max_output_tokens: int) -> dict[str, Any]:
    messages, out = _unstreamed(body)
    out["messages"] = [*messages, {"role": "user", "content": instruction}]
    out.pop("stream_options", None)
    out.pop("n", None)
    if "max_tokens" in body and "max_completion_tokens" not in body:
        out["max_tokens"] = max_output_tokens
    else:  # reasoning models take only max_completion_tokens (it bounds their reasoning too)
        out.pop("max_tokens", None)
        out["max_completion_tokens"] = max_output_tokens
    return out


def _responses_body(body: dict[str, Any], instruction: str, max_output_tokens: int) -> dict[str, Any]:
    """The Responses API's summary request: one more user message item, not stored on the provider."""
    items = body.get("input")
    if not isinstance(items, list) or not items:
        raise ValueError("the request holds no input items")
    out = dict(body)
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": instruction}]}
    out["input"] = [*items, message]
    out["stream"] = False
    out.pop("stream_options", None)
    out["store"] = False
    out["max_output_tokens"] = max_output_tokens
    return out


def _gemini_body(body: dict[str, Any], instruction: str, max_output_tokens: int) -> dict[str, Any]:
    """Gemini's summary request: one more ``user`` content; of ``generationConfig`` only the output bound
    and the candidate count change (neither is part of the prompt the implicit cache reads)."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise ValueError("the request holds no contents")
    out = dict(body)
    out["contents"] = [*contents, {"role": "user", "parts": [{"text": instruction}]}]
    given = body.get("generationConfig")
    config = dict(given) if isinstance(given, dict) else {}
    config.pop("candidateCount", None)
    config["maxOutputTokens"] = max_output_tokens + _gemini_thinking(config)
    out["generationConfig"] = config
    return out


def _gemini_thinking(config: dict[str, Any]) -> int:
    """The output tokens a Gemini request's thinking may take: its ``thinkingBudget`` when that is a count
    (0: off), else ``THINKING_ALLOWANCE``."""
    thinking = config.get("thinkingConfig")
    budget = thinking.get("thinkingBudget") if isinstance(thinking, dict) else None
    if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
        return budget
    return THINKING_ALLOWANCE


def _thinking_budget(body: dict[str, Any]) -> int:
    """The thinking budget the client's request grants (its max_tokens must exceed it), else 0."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
            return budget
    return 0


def read_answer(api: WireApi, payload: Any, name: str) -> Answer:
    """The summary in the upstream's JSON answer; :class:`SummarizerBadOutput` for an answer that is not
    one (a tool call, a refusal, no text), :class:`SummaryRejected` for one cut off at the bound."""
    if not isinstance(payload, dict):
        raise SummarizerBadOutput(f"{name}: the answer is not a JSON object")
    wire = WIRES[api]
    text, stop = wire.text(payload, name)
    if stop == "max_tokens":
        stop = "length"
    if stop not in FINISHED and stop != "length":
        raise SummarizerBadOutput(f"{name}: the answer stopped with {clip(str(stop), 40)!r}, not a summary")
    if stop == "length" and not text.strip():
        raise SummaryRejected(Rejection("cut_off", f"{name}: output was cut off at max_output_tokens"))
    completion = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=text), finish_reason=stop)])
    usage = payload.get(wire.usage_field)
    return Answer(completion_summary(completion, name), *wire.usage(usage if isinstance(usage, dict) else {}))


def _anthropic_text(payload: dict[str, Any], name: str) -> tuple[str, Any]:
    content = payload.get("content")
    if not isinstance(content, list):
        raise SummarizerBadOutput(f"{name}: the answer has no content")
    if any(isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use") for b in content):
        raise SummarizerBadOutput(f"{name}: the model called a tool instead of writing the summary")
    texts = [
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts), payload.get("stop_reason")


def _openai_text(payload: dict[str, Any], name: str) -> tuple[str, Any]:
    choices = payload.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = choice.get("message") if choice else None
    if not isinstance(message, dict):
        raise SummarizerBadOutput(f"{name}: the answer has no message")
    if message.get("tool_calls") or message.get("function_call"):
        raise SummarizerBadOutput(f"{name}: the model called a tool instead of writing the summary")
    if message.get("refusal"):
        raise SummarizerBadOutput(f"{name}: the model refused to write the summary")
    content = message.get("content")
    return (content if isinstance(content, str) else ""), choice.get("finish_reason") if choice else None


def _responses_text(payload: dict[str, Any], name: str) -> tuple[str, Any]:
    output = payload.get("output")
    if not isinstance(output, list):
        raise SummarizerBadOutput(f"{name}: the answer has no output")
    texts = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and (kind.endswith("_call") or kind == "function_call"):
            raise SummarizerBadOutput(f"{name}: the model called a tool instead of writing the summary")
        if kind != "message" or not isinstance(item.get("content"), list):
            continue  # reasoning items and the like
        for part in item["content"]:
            if isinstance(part, dict) and part.get("type") == "refusal":
                raise SummarizerBadOutput(f"{name}: the model refused to write the summary")
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
    status = payload.get("status")
    if status == "incomplete":
        details = payload.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        status = "length" if reason == "max_output_tokens" else reason
    return "\n".join(texts), "stop" if status == "completed" else status


# Gemini's finishReason as the other APIs' stop reasons; any other reason (SAFETY, RECITATION, BLOCKLIST,
# PROHIBITED_CONTENT, SPII, LANGUAGE, OTHER, MALFORMED_FUNCTION_CALL, ...) is not a summary.
_GEMINI_STOPS = {"STOP": "stop", "MAX_TOKENS": "length"}


def _gemini_text(payload: dict[str, Any], name: str) -> tuple[str, Any]:
    candidates = payload.get("candidates")
    candidate = candidates[0] if isinstance(candidates, list) and candidates else None
    if not isinstance(candidate, dict):
        feedback = payload.get("promptFeedback")
        blocked = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if blocked:
            raise SummarizerBadOutput(f"{name}: the prompt was blocked ({clip(str(blocked), 40)})")
        raise SummarizerBadOutput(f"{name}: the answer has no candidate")
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    parts = parts if isinstance(parts, list) else []
    if any(isinstance(p, dict) and "functionCall" in p for p in parts):
        raise SummarizerBadOutput(f"{name}: the model called a tool instead of writing the summary")
    texts = [
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    ]
    reason = candidate.get("finishReason")
    return "\n".join(texts), _GEMINI_STOPS.get(reason, reason) if isinstance(reason, str) else reason


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


Usage = tuple[int, int | None, int | None, int]  # prompt tokens, cache read, cache written, output tokens


def _gemini_usage(usage: dict[str, Any]) -> Usage:
    """The prompt count includes the cached part; thinking is billed as output."""
    prompt = _count(usage.get("promptTokenCount")) or 0
    read = _count(usage.get("cachedContentTokenCount"))
    output = (_count(usage.get("candidatesTokenCount")) or 0) + (_count(usage.get("thoughtsTokenCount")) or 0)
    return prompt, min(read or 0, prompt), 0, output


def _anthropic_usage(usage: dict[str, Any]) -> Usage:
    read = _count(usage.get("cache_read_input_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"))
    prompt = (_count(usage.get("input_tokens")) or 0) + (read or 0) + (written or 0)
    return prompt, read, written, _count(usage.get("output_tokens")) or 0


def _chat_usage(usage: dict[str, Any]) -> Usage:
    return _openai_usage(usage, chat=True)


def _responses_usage(usage: dict[str, Any]) -> Usage:
    return _openai_usage(usage, chat=False)


def _openai_usage(usage: dict[str, Any], chat: bool) -> Usage:
    details = usage.get("prompt_tokens_details" if chat else "input_tokens_details")
    read = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    prompt = _count(usage.get("prompt_tokens" if chat else "input_tokens")) or 0
    output = _count(usage.get("completion_tokens" if chat else "output_tokens")) or 0
    return prompt, min(read, prompt) if read is not None else None, None, output


@dataclass(frozen=True)
class SummaryWire:
    """One wire API's summary request and answer: the request built, the answer's text and why it stopped,
    and its usage (in the answer's ``usage_field``)."""

    body: Callable[[dict[str, Any], str, int], dict[str, Any]]
    text: Callable[[dict[str, Any], str], tuple[str, Any]]
    usage: Callable[[dict[str, Any]], Usage]
    usage_field: str = "usage"


WIRES: dict[WireApi, SummaryWire] = {
    WireApi.CHAT: SummaryWire(_chat_body, _openai_text, _chat_usage),
    WireApi.RESPONSES: SummaryWire(_responses_body, _responses_text, _responses_usage),
    WireApi.MESSAGES: SummaryWire(_anthropic_body, _anthropic_text, _anthropic_usage),
    WireApi.GEMINI: SummaryWire(_gemini_body, _gemini_text, _gemini_usage, "usageMetadata"),
}
APIS = tuple(WIRES)
