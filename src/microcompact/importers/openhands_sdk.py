"""Events of the OpenHands software-agent-sdk (OpenHands V1): ``{"kind": "MessageEvent", ...}``.

Each event says what it is in ``kind``. The ones the model sees: ``SystemPromptEvent`` (the system prompt
as a text item), ``MessageEvent`` (``llm_message``, the exact chat message), ``ActionEvent`` (one tool call
of a model response, with the response's ``thought`` text and its ``llm_response_id``: the calls of one
response are consecutive events sharing that id), ``ObservationEvent`` / ``UserRejectObservation`` /
``AgentErrorEvent`` (the result of a call, by ``tool_call_id``), and ``Condensation`` (where the agent
condensed its history, with its own ``summary``). The rest (state updates, pauses, condensation requests,
token records) are not model context.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..messages import META_KEY, Message, TranscriptError
from .common import ImportReport, take_ts, text_only, text_or_parts


def _parts(items: Any, where: str) -> list[dict[str, Any]]:
    """SDK content items (``text``, ``image`` with ``image_urls``) as chat content parts."""
    if isinstance(items, str):
        return [{"type": "text", "text": items}]
    if not isinstance(items, list):
        raise TranscriptError(f"{where}: content must be a list of items, got {type(items).__name__}")
    parts: list[dict[str, Any]] = []
    for j, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(item.get("text", ""))})
        elif kind == "image":
            parts += [{"type": "image_url", "image_url": {"url": str(u)}} for u in item.get("image_urls") or ()]
        else:
            raise TranscriptError(f"{where}: content[{j}] has unknown type {kind!r}")
    return parts


def _content(items: Any, where: str) -> str | list[dict[str, Any]]:
    """Content as one string when it is all text (items joined by line breaks), else the parts."""
    return text_or_parts(_parts(items, where))


class _Conversation:
    """The messages so far; the assistant message of the model response whose calls are still coming."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.messages: list[Message] = []
        self.response: tuple[str, Message] | None = None  # (llm_response_id, its assistant message)

    def add(self, m: Message, event: dict[str, Any]) -> None:
        """Append a message that is not one of the open response's calls."""
        self.response = None
        take_ts(event, m)
        self.messages.append(m)

    def count_dropped(self, event_or_message: dict[str, Any]) -> None:
        """Count what the model produced or got that a chat message cannot carry (reasoning, extensions)."""
        notes = self.report.notes
        if event_or_message.get("reasoning_content") or event_or_message.get("thinking_blocks"):
            notes["reasoning_dropped"] += 1
        if event_or_message.get("extended_content"):
            notes["extended_content_dropped"] += 1


def _system_prompt(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    """The system prompt, with the conversation's ``dynamic_context`` as a second block when there is one."""
    prompt = event.get("system_prompt")
    if not isinstance(prompt, dict) or not isinstance(prompt.get("text"), str):
        raise TranscriptError(f"{where}: SystemPromptEvent needs a system_prompt text item")
    items = [prompt] + ([event["dynamic_context"]] if event.get("dynamic_context") else [])
    conv.add({"role": "system", "content": _content(items, where)}, event)


def _message(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    llm = event.get("llm_message")
    if not isinstance(llm, dict) or llm.get("role") not in ("system", "user", "assistant"):
        raise TranscriptError(f"{where}: MessageEvent needs an llm_message with a system, user or assistant role")
    m: Message = {"role": llm["role"], "content": _content(llm.get("content") or [], where)}
    if llm["role"] == "assistant" and llm.get("tool_calls"):  # kept as the model sent them
        m["tool_calls"] = [_tool_call(tc, where) for tc in llm["tool_calls"]]
    conv.count_dropped(llm)
    conv.count_dropped(event)
    conv.add(m, event)


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    """An SDK ``MessageToolCall`` (``id``, ``name``, ``arguments``) as a chat-completions tool call."""
    if not isinstance(call, dict) or not call.get("id") or not call.get("name"):
        raise TranscriptError(f"{where}: a tool call needs an id and a name")
    arguments = call.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": str(call["id"]), "type": "function", "function": {"name": str(call["name"]), "arguments": arguments}}


def _action(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    """One call of a model response: the first starts the response's assistant message, the rest join it."""
    call = _tool_call(event.get("tool_call"), where)
    thought = text_only(_parts(event.get("thought") or [], where)) or ""
    response_id = str(event.get("llm_response_id") or event.get("id"))
    conv.count_dropped(event)
    if conv.response is not None and conv.response[0] == response_id:
        am = conv.response[1]
        am["content"] = "\n".join(t for t in (am["content"], thought) if t)
        am["tool_calls"].append(call)
        return
    am = {"role": "assistant", "content": thought, "tool_calls": [call]}
    conv.add(am, event)
    conv.response = (response_id, am)


def _observation(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    observation = event.get("observation")
    if not isinstance(observation, dict):
        raise TranscriptError(f"{where}: ObservationEvent needs an observation object")
    if "content" in observation:
        content = _content(observation["content"], where)
    else:  # an observation kind that keeps its text elsewhere: all of it, as JSON
        conv.report.notes["observation_without_content_as_json"] += 1
        content = json.dumps(observation, ensure_ascii=False)
    conv.count_dropped(event)
    _result(conv, event, content, bool(observation.get("is_error")), where)


def _rejected(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    reason = event.get("rejection_reason") or "User rejected the action"
    _result(conv, event, f"Action rejected: {reason}", False, where)


def _agent_error(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    _result(conv, event, str(event.get("error", "")), True, where)


def _result(conv: _Conversation, event: dict[str, Any], content: Any, is_error: bool, where: str) -> None:
    """A tool result for the call named by ``tool_call_id`` (kept open: parallel results follow)."""
    tcid = event.get("tool_call_id")
    if not tcid:
        raise TranscriptError(f"{where}: {event['kind']} needs a tool_call_id")
    tm: Message = {"role": "tool", "tool_call_id": str(tcid), "content": content}
    if is_error:
        tm[META_KEY] = {"is_error": True}
        conv.report.notes["tool_result_is_error"] += 1
    response = conv.response
    conv.add(tm, event)
    conv.response = response  # a later call of the same response still joins its message


def _condensation(conv: _Conversation, event: dict[str, Any], where: str) -> None:
    """Where the agent condensed its history: its summary, kept as a marked user message (the model got it
    as a user message in place of the forgotten events, which stay in the import before it)."""
    summary = event.get("summary")
    if summary is None:  # a condensation that only forgot events
        conv.report.notes["event_skipped:Condensation"] += 1
        return
    if not isinstance(summary, str):
        raise TranscriptError(f"{where}: Condensation summary must be a string")
    conv.report.notes["compact_summary_message"] += 1
    conv.add({"role": "user", "content": summary, META_KEY: {"compact_summary": True}}, event)


_HANDLERS: dict[str, Callable[[_Conversation, dict[str, Any], str], None]] = {
    "SystemPromptEvent": _system_prompt,
    "MessageEvent": _message,
    "ActionEvent": _action,
    "ObservationEvent": _observation,
    "UserRejectObservation": _rejected,
    "AgentErrorEvent": _agent_error,
    "Condensation": _condensation,
}


def sdk_messages(events: list[tuple[str, Any]], report: ImportReport) -> list[Message]:
    """The chat messages of SDK events, each with where it was read; events that are not model context are
    counted by kind."""
    conv = _Conversation(report)
    for where, event in events:
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise TranscriptError(f"{where}: expected an event object with a 'kind'")
        handler = _HANDLERS.get(event["kind"])
        if handler is None:
            report.notes[f"event_skipped:{event['kind']}"] += 1
            continue
        handler(conv, event, where)
    return conv.messages
