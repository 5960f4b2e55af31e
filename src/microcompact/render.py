"""A message's text, rendered one way for everything that reads it: engines, search, summarizer prompts.

:func:`content_text` is the content alone. :func:`message_text` adds what a reader needs on top of it,
chosen by parameters rather than by separate copies of the walk over content parts and tool calls:

- search (``store.codec.search_text``) indexes tool-call names and arguments and the message's ``name``,
  as plain lines;
- a summarizer prompt (:func:`exchange_text`) labels each block with its role (``USER:``, ``TOOL CALL``,
  ``TOOL RESULT``) so the model can tell who said what.

The package's ground floor: it imports nothing from the package (``messages`` re-exports
:func:`content_text`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# What this module reads of a message: its fields, never written. ``messages.Message`` (a ``dict``) is one;
# naming the mapping here, rather than importing that alias, keeps ``messages`` -> ``render`` one way.
Message = Mapping[str, Any]

ROLE_LABELS = {"user": "USER", "assistant": "ASSISTANT", "system": "SYSTEM", "developer": "SYSTEM"}


def content_text(message: Message) -> str:
    """The text of a message's content: strings as is, list parts joined (images as a placeholder)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text" or "text" in part:
                    out.append(str(part.get("text", "")))
                elif part.get("type") in ("image_url", "image", "input_image"):
                    out.append("[image]")
                elif part.get("type") == "input_audio":
                    out.append("[audio]")
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return str(content)


def message_text(message: Message, *, tool_calls: bool = False, name: bool = False, labels: bool = False) -> str:
    """The text of ``message`` for one reader: its content, plus each tool call with ``tool_calls``.

    Unlabelled (search): content, then each call's name and arguments, then the message's ``name`` with
    ``name``, one per line, empty ones left out. Labelled (prompts): ``ROLE: content`` (stripped; left out
    when empty), then ``TOOL CALL [id] name(arguments)`` per call, blocks separated by a blank line; a tool
    result is the single block ``TOOL RESULT [id]: content``.
    """
    if labels:
        return "\n\n".join(_labelled_blocks(message, tool_calls))
    parts = [content_text(message)]
    if tool_calls:
        for _, function in _tool_calls(message):
            parts.append(str(function.get("name") or ""))
            parts.append(arguments_text(function.get("arguments", "")))
    if name and isinstance(message.get("name"), str):
        parts.append(message["name"])
    return "\n".join(p for p in parts if p)


def exchange_text(messages: Iterable[Message]) -> str:
    """Plain text of an exchange for prompts: ``USER:``, ``ASSISTANT:``, ``TOOL CALL``, ``TOOL RESULT``."""
    return "\n\n".join(text for m in messages if (text := message_text(m, tool_calls=True, labels=True)))


def arguments_text(arguments: Any, *, for_prompt: bool = False) -> str:
    """A tool call's arguments as text: a string (JSON text already) as it is, an object as JSON.

    Search text has always held objects as ASCII-escaped JSON and left empty ones out; a prompt shows them
    as a model reads them (non-ASCII as written, ``null`` for None). Summarizers see strings only in
    practice: redaction turns objects into JSON text first.
    """
    if isinstance(arguments, str):
        return arguments
    if for_prompt:
        return json.dumps(arguments, ensure_ascii=False)
    return json.dumps(arguments, default=str) if arguments else ""


def _labelled_blocks(message: Message, tool_calls: bool) -> Iterator[str]:
    role = message.get("role")
    text = content_text(message).strip()
    if role == "tool":
        yield f"TOOL RESULT [{message.get('tool_call_id')}]: {text}"
        return
    if text:
        yield f"{ROLE_LABELS.get(str(role), str(role).upper())}: {text}"
    if tool_calls:
        for call, function in _tool_calls(message):
            arguments = arguments_text(function.get("arguments", ""), for_prompt=True)
            yield f"TOOL CALL [{call.get('id')}] {function.get('name')}({arguments})"


def _tool_calls(message: Message) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each tool call of ``message`` with its ``function`` (a missing one counts as empty; a call or
    function that is not an object has nothing to render and is skipped)."""
    for call in message.get("tool_calls") or ():
        function = (call.get("function") or {}) if isinstance(call, dict) else None
        if isinstance(function, dict):
            yield call, function
