"""OpenHands event streams: the JSON list of serialized events a trajectory is saved as.

Two generations of events exist. OpenHands up to 0.x (the classic server and its saved trajectories):
each event is an action (``"action": "run"``, ``"message"``, ``"system"``...) or an observation
(``"observation": "run"``, ``"edit"``, ``"agent_state_changed"``...), with its ``source`` (user, agent,
environment). An agent action the model asked for carries ``tool_call_metadata``: the tool call id and
the whole ``model_response``, whose message is exactly what the model returned (its text and every tool
call of that response, even when the response made several actions); the observation answering it
carries the same tool call id. State changes, recalls and empty observations are bookkeeping.
OpenHands V1 (the software-agent-sdk) tags each event with a ``kind``; see :mod:`.openhands_sdk`.

A file holds the events as a JSON array, or under ``history`` (an evaluation output) or ``items`` (a page
of the agent server's event search); a folder holds one event per file, as OpenHands stores them
(``sessions/<id>/events/<n>.json``, or ``conversations/<id>/events/event-<n>-<id>.json`` in V1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..messages import META_KEY, Message, TranscriptError
from .common import (
    ImportFormat,
    ImportReport,
    finish,
    folder_files,
    load_json,
    normalize_tool_calls,
    take_ts,
)
from .openhands_sdk import sdk_messages
from .sniffing import key_paths

# Where the events sit in the file, and the keys that say an object is an event (of either generation).
_EVENT_LISTS = ("[]", "history[]", "items[]")
_KIND_KEYS = ("action", "observation", "kind")


def _events(path: Path) -> list[tuple[str, Any]]:
    """(where, event) for each event: of a JSON array, of an object's ``history`` or ``items`` list, or of a
    folder of event files (one event each, in name order, as OpenHands stores a conversation's events)."""
    if path.is_dir():
        return [(str(f), load_json(f)) for f in folder_files(path)]
    data = load_json(path)
    if isinstance(data, dict):
        key = next((k for k in ("history", "items") if isinstance(data.get(k), list)), None)
        if key is None:
            raise TranscriptError(
                f"{path}: expected a JSON array of OpenHands events or an object with a 'history' or 'items' list"
            )
        data = data[key]
    if not isinstance(data, list):
        raise TranscriptError(f"{path}: expected a JSON array of OpenHands events")
    return [(f"{path}: event {i}", event) for i, event in enumerate(data)]


def _response_message(meta: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The assistant message of the ``model_response`` behind a tool call, if the event kept it."""
    response = meta.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices:
        return None
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise TranscriptError(f"{where}: model_response.choices[0] has no 'message' object")
    return message


class _Stream:
    """Messages built from the events so far, and the model responses already laid out (by response id)."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.messages: list[Message] = []
        self.responses: set[str] = set()

    def add(self, m: Message, event: dict[str, Any]) -> None:
        take_ts(event, m)
        self.messages.append(m)

    def add_tool_call_action(self, event: dict[str, Any], meta: dict[str, Any], where: str) -> None:
        """The model response behind an action, once: its text and all its tool calls."""
        response = meta.get("model_response")
        response_id = str(response.get("id")) if isinstance(response, dict) and response.get("id") else None
        if response_id is not None and response_id in self.responses:
            self.report.notes["action_of_an_earlier_response"] += 1  # its call is in that response's message
            return
        message = _response_message(meta, where)
        if message is None:  # no model response kept: rebuild the one call from the action
            self.report.notes["tool_call_rebuilt_from_action"] += 1
            args = {k: v for k, v in (event.get("args") or {}).items() if k != "thought"}
            call = {"id": meta.get("tool_call_id"), "function": {"name": meta.get("function_name"), "arguments": args}}
            message = {"content": (event.get("args") or {}).get("thought") or "", "tool_calls": [call]}
        if message.get("reasoning_content"):
            self.report.notes["reasoning_dropped"] += 1
        am: Message = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            am["tool_calls"] = normalize_tool_calls(message["tool_calls"], where, self.report)
        if response_id is not None:
            self.responses.add(response_id)
        self.add(am, event)


def _text(event: dict[str, Any], where: str) -> str:
    """The text of a message action: ``args.content``, else the event's ``message``."""
    args = event.get("args")
    content = args.get("content") if isinstance(args, dict) else None
    if content is None:
        content = event.get("message", "")
    if not isinstance(content, str):
        raise TranscriptError(f"{where}: message content must be a string")
    return content


def _user_content(event: dict[str, Any], where: str) -> str | list[Any]:
    """A user message verbatim; attached images (``args.image_urls``) become image parts after the text."""
    text = _text(event, where)
    urls = (event.get("args") or {}).get("image_urls") or []
    if not urls:
        return text
    return [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": str(u)}} for u in urls]


def _add_action(stream: _Stream, event: dict[str, Any], kind: str, where: str) -> None:
    """An action: a user or agent message, the system prompt, a tool call, or bookkeeping (counted)."""
    meta = event.get("tool_call_metadata")
    if isinstance(meta, dict):
        stream.add_tool_call_action(event, meta, where)
    elif kind == "system":
        stream.add({"role": "system", "content": _text(event, where)}, event)
    elif kind == "message" and event.get("source") == "user":
        stream.add({"role": "user", "content": _user_content(event, where)}, event)
    elif kind in ("message", "finish") and event.get("source") == "agent":
        if kind == "finish":
            text = (event.get("args") or {}).get("final_thought") or event.get("message", "")
        else:
            text = _text(event, where)
        stream.add({"role": "assistant", "content": str(text)}, event)
    else:
        stream.report.notes[f"action_skipped:{kind}"] += 1


def _add_observation(stream: _Stream, event: dict[str, Any], kind: str, where: str) -> None:
    """An observation: the result of a tool call (by its id), or bookkeeping (counted)."""
    meta = event.get("tool_call_metadata")
    if not isinstance(meta, dict):
        stream.report.notes[f"observation_skipped:{kind}"] += 1
        return
    tcid = meta.get("tool_call_id")
    if not tcid:
        raise TranscriptError(f"{where}: tool_call_metadata without a tool_call_id")
    content = event.get("content", "")
    if not isinstance(content, str):
        raise TranscriptError(f"{where}: observation content must be a string")
    tm: Message = {"role": "tool", "tool_call_id": str(tcid), "content": content}
    if kind == "error":
        tm[META_KEY] = {"is_error": True}
        stream.report.notes["tool_result_is_error"] += 1
    stream.add(tm, event)


def import_openhands(path: Path, **_: Any) -> ImportReport:
    """An OpenHands trajectory: a JSON array of events (or an object with them under ``history``/``items``).

    V1 (software-agent-sdk) events are read by :func:`.openhands_sdk.sdk_messages`. Classic events:

    User message actions become user messages verbatim (attached images as image parts); agent message
    and finish actions without a tool call become assistant text; the ``system`` action is the system
    prompt. An action with ``tool_call_metadata`` becomes the assistant message of its ``model_response``
    (text and all tool calls, once per response; ``reasoning_content`` dropped and counted); an
    observation with ``tool_call_metadata`` becomes the tool result for that call id (``error``
    observations are marked). Events without a tool call that are not messages (state changes, recalls,
    ``null`` observations) are counted as skipped. Event timestamps become ``_ts``.
    """
    report = ImportReport("openhands", str(path))
    events = _events(path)
    if events and isinstance(events[0][1], dict) and "kind" in events[0][1]:  # OpenHands V1 (software-agent-sdk)
        return finish(report, sdk_messages(events, report), own_summaries=True)
    stream = _Stream(report)
    for where, event in events:
        if not isinstance(event, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(event).__name__}")
        if isinstance(event.get("action"), str):
            _add_action(stream, event, event["action"], where)
        elif isinstance(event.get("observation"), str):
            _add_observation(stream, event, event["observation"], where)
        else:
            raise TranscriptError(f"{where}: event has neither 'action' nor 'observation' (keys: {sorted(event)})")
    return finish(report, stream.messages)


def looks_like_openhands(head: str) -> bool:
    """A list of events (top level, ``history`` or ``items``) whose first event has a source and a kind."""
    keys = key_paths(head)
    return any(
        f"{where}.source" in keys and any(f"{where}.{kind}" in keys for kind in _KIND_KEYS) for where in _EVENT_LISTS
    )


FORMAT = ImportFormat(
    name="openhands",
    description="an OpenHands trajectory or event list (classic or V1 software-agent-sdk events)",
    importer=import_openhands,
    sniff=looks_like_openhands,
    folders=True,
)
