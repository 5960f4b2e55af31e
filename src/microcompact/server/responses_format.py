"""OpenAI Responses: input items to session messages and back, without losing or orphaning an item.

A request's ``input`` is a list of items (or one string: a user message). The client messages the session
sees are made of them:

- a run of consecutive items the model produced (assistant ``message`` items, ``reasoning`` items with
  their ``encrypted_content``, ``function_call``, ``custom_tool_call``, ``local_shell_call`` and the other
  ``*_call`` items, built-in ones such as ``web_search_call``) is **one** client message, a group, when it
  holds more than one item: it becomes one ``assistant`` session message whose ``tool_calls`` are the
  calls that take an output, and whose content is the text of its message items. A reasoning item thus
  travels with the items that follow it: kept together or folded together, never orphaned;
- an output item (``function_call_output``, ``custom_tool_call_output``, ``local_shell_call_output``, any
  ``*_call_output``) becomes one ``tool`` session message;
- a ``user`` message item becomes a ``user`` message, a ``system`` or ``developer`` one a ``system``
  message;
- anything else (opaque ``compaction`` items, ``item_reference``, MCP approvals, item types this module
  does not know) becomes a ``system`` session message: never folded, never edited, forwarded as it came.

``instructions`` is the system prompt, outside ``input`` (like Anthropic's ``system``). The outgoing
``input`` is the client's own items for what the session kept whole, rebuilt from them for what it
shortened (only an output's text or a call's arguments change), and a marker is an assistant ``message``
item. A request whose history lives on the provider (``previous_response_id``, ``conversation``) or whose
items do not pair up is passed through as it came: a proxy cannot compact what it cannot see or order. So is
a request that asks the provider to compact (a ``compaction_trigger`` item, Codex's remote compaction): the
provider answers with the one ``compaction`` item the client expects, which later requests carry as an
opaque item.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

from ..messages import Message
from ..render import content_text
from ..wire import Upstream, WireApi
from .errors import BadRequest
from .provider import dumps, identity_form, rewritten
from .usage_tap import responses_cache_fields

GROUP = "microcompact.group"  # a run of model-produced items held as one client message (never sent)
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
# Items that pair a call with an output under another key than call_id, or that never pair.
OPAQUE_TYPES = frozenset({"compaction", "item_reference", "mcp_approval_request", "mcp_approval_response"})
# The input item asking the provider to compact the conversation into one ``compaction`` output item (Codex's
# remote compaction): such a request goes up as it came, so the provider's answer is the one Codex expects.
COMPACTION_TRIGGER = "compaction_trigger"
SELF_CONTAINED_CALL = "call"  # a *_call item without call_id (web_search_call, ...): its result is inside it
CALL_NAMES = {"local_shell_call": "local_shell", "shell_call": "shell", "apply_patch_call": "apply_patch"}
CALL_ARGUMENTS = {"function_call": "arguments", "custom_tool_call": "input"}
MAX_INPUT_ITEMS = 100_000


def kind_of(item: dict[str, Any]) -> str:
    """``user``, ``system``, ``model`` (an item the model produced), ``output`` or ``opaque``."""
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        return "model" if role == "assistant" else "user" if role == "user" else "system"
    if kind in OPAQUE_TYPES or not isinstance(kind, str):
        return "opaque"
    if kind == "reasoning" or kind.endswith("_call") or kind == "mcp_list_tools":
        return "model"
    if kind.endswith("_call_output"):
        return "output"
    return "opaque"


def call_id(item: dict[str, Any]) -> str | None:
    """The id pairing a call with its output (a local shell output names its call by ``id`` in older
    clients); None for an item that pairs with nothing."""
    kind = item.get("type")
    if not isinstance(kind, str) or not (kind.endswith("_call") or kind.endswith("_call_output")):
        return None
    value = item.get("call_id")
    if value is None and kind == "local_shell_call_output":
        value = item.get("id")
    return value if isinstance(value, str) and value else None


def items_of(message: Message) -> list[dict[str, Any]]:
    """The input items one client message stands for."""
    if message.get("type") == GROUP:
        return list(message["items"])
    return [message]


def flatten(messages: list[Message]) -> list[dict[str, Any]]:
    return [item for message in messages for item in items_of(message)]


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise BadRequest(f"{where}: expected an input item object, got {type(item).__name__}")
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise BadRequest(f"{where}.type: must be a string")
    if kind == "message":
        if item.get("role") not in MESSAGE_ROLES:
            raise BadRequest(f"{where}.role: must be one of {', '.join(MESSAGE_ROLES)}")
        if not isinstance(item.get("content"), (str, list)):
            raise BadRequest(f"{where}.content: must be a string or an array of content parts")
    elif kind in CALL_ARGUMENTS and not isinstance(item.get(CALL_ARGUMENTS[kind]), str):
        raise BadRequest(f"{where}.{CALL_ARGUMENTS[kind]}: must be a string")
    elif kind.endswith("_call_output") and call_id(item) is None:
        raise BadRequest(f"{where}.call_id: must be a non-empty string")


def grouped(items: list[dict[str, Any]]) -> list[Message]:
    """Client messages: each run of model items as one group (a lone one as itself), every other item alone.
    A group ends where the model's turn ends (an output, a user item), so it never grows on a later request."""
    out: list[Message] = []
    run: list[dict[str, Any]] = []
    for item in [*items, None]:
        if item is not None and kind_of(item) == "model":
            run.append(item)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else {"type": GROUP, "items": run})
            run = []
        if item is not None:
            out.append(item)
    return out


def pairing_problem(items: list[dict[str, Any]]) -> str | None:
    """Why ``items`` do not pair up as the API wants (None when they do): every call answered by its output
    after the model's turn and before the next one, every output answering such a call, and every
    reasoning item followed by an item of its own turn."""
    open_calls: dict[str, int] = {}
    for i, item in enumerate(items):
        kind, ident = kind_of(item), call_id(item)
        if kind == "model":
            if open_calls and any(kind_of(p) == "output" for p in items[max(0, i - 1) : i]):
                return f"input[{i}]: a new model turn before the outputs of calls {sorted(open_calls)}"
            if item.get("type") == "reasoning" and (i + 1 >= len(items) or kind_of(items[i + 1]) != "model"):
                return f"input[{i}]: a reasoning item without the item it belongs to after it"
            if ident is not None:
                open_calls[ident] = i
        elif kind == "output":
            if ident not in open_calls:
                return f"input[{i}]: an output for call_id {ident!r} with no call before it"
            del open_calls[ident]
        elif open_calls:
            return f"input[{i}]: calls {sorted(open_calls)} are not answered before this item"
    if open_calls:
        return f"calls {sorted(open_calls)} have no output"
    return None


def _session_parts(parts: list[Any]) -> list[Any]:
    """Content parts as the session reads them (text, images as images, anything else by its text)."""
    out: list[Any] = []
    for part in parts:
        if not isinstance(part, dict):
            out.append({"type": "text", "text": str(part)})
        elif isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif isinstance(part.get("refusal"), str):
            out.append({"type": "text", "text": part["refusal"]})
        elif part.get("type") == "input_image":
            out.append({"type": "image_url", "image_url": {"url": str(part.get("image_url") or part.get("file_id"))}})
        elif part.get("type") == "input_file":
            out.append({"type": "text", "text": f"[file {part.get('filename') or part.get('file_id') or ''}]"})
        else:
            out.append({"type": "text", "text": _json(part)})
    return out


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=False, default=str)


def _session_content(content: Any) -> Any:
    return _session_parts(content) if isinstance(content, list) else content


def _tool_call(item: dict[str, Any], ident: str) -> dict[str, Any]:
    kind = str(item.get("type"))
    field = CALL_ARGUMENTS.get(kind)
    if field is not None:
        arguments = item.get(field, "")
    else:
        rest = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
        arguments = _json(rest)
    name = item.get("name") if isinstance(item.get("name"), str) else CALL_NAMES.get(kind, kind)
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}


def _model_message(items: list[dict[str, Any]]) -> Message:
    texts = [content_text({"content": _session_content(i.get("content"))}) for i in items if i.get("type") == "message"]
    calls = [_tool_call(i, ident) for i in items if (ident := call_id(i)) is not None]
    message: Message = {"role": "assistant", "content": "\n".join(t for t in texts if t) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _output_text(item: dict[str, Any]) -> Any:
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _session_parts(output)
    return _json(output)


class ResponsesFormat:
    name: Upstream = Upstream.OPENAI
    wire: WireApi = WireApi.RESPONSES
    binds_thinking: bool = False
    fixed_fields: tuple[str, ...] = ("tools", "instructions")

    # ------------------------------------------------------------------ client -> session

    def history(self, body: Any) -> list[Message]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        items = body.get("input")
        if items is None:
            return []
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        if not isinstance(items, list):
            raise BadRequest("'input' must be a string or an array of input items")
        if len(items) > MAX_INPUT_ITEMS:
            raise BadRequest(f"'input' holds {len(items)} items; this proxy takes at most {MAX_INPUT_ITEMS}")
        for i, item in enumerate(items):
            _check_item(item, f"input[{i}]")
        return grouped(items)

    def passthrough_reason(self, body: dict[str, Any]) -> str | None:
        if body.get("previous_response_id") is not None:
            return "previous_response_id"
        if body.get("conversation") is not None:
            return "conversation"
        items = body.get("input")
        if isinstance(items, list) and any(isinstance(i, dict) and i.get("type") == COMPACTION_TRIGGER for i in items):
            return "provider_compaction"
        if isinstance(items, list) and pairing_problem(items) is not None:
            return "unpaired_items"
        return None

    def convert(self, message: Message) -> list[Message]:
        items = items_of(message)
        kind = kind_of(items[0]) if len(items) == 1 else "model"
        if kind == "model":
            return [_model_message(items)]
        item = items[0]
        if kind == "output":
            return [{"role": "tool", "tool_call_id": call_id(item), "content": _output_text(item)}]
        if kind in ("user", "system"):
            return [{"role": kind, "content": _session_content(item.get("content"))}]
        return [{"role": "system", "content": _json(item)}]

    def part_count(self, message: Message) -> int:
        return 1

    # ------------------------------------------------------------------ session -> client

    def rebuild(self, original: Message, parts: list[Message]) -> Message:
        """``original`` with what the session shortened: an output's text, a call's arguments, the text of
        the model's message items. Reasoning items and everything else go as they came."""
        if not parts or not rewritten(parts[0]):
            return original
        part = parts[0]
        if part.get("role") == "tool":
            output = original.get("output")
            return {**original, "output": content_text(part)} if isinstance(output, (str, list)) else original
        items = [_shortened(item, part) for item in items_of(original)]
        text = content_text(part)
        if text != (content_text(_model_message(items)) or ""):
            items = list(_with_text(items, text))
        return items[0] if len(items) == 1 else {"type": GROUP, "items": items}

    def render(self, message: Message) -> Message:
        role = message.get("role")
        text = content_text(message)
        if role == "tool":
            return {"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": text}
        if role == "assistant":
            items: list[dict[str, Any]] = []
            if text:
                items.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                )
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": _arguments_string(function.get("arguments")),
                    }
                )
            if not items:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]})
            return items[0] if len(items) == 1 else {"type": GROUP, "items": items}
        target = "user" if role == "user" else "developer"
        return {"type": "message", "role": target, "content": [{"type": "input_text", "text": text}]}

    def normalize(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return messages

    def view_problem(self, messages: list[Message]) -> str | None:
        return pairing_problem(flatten(messages))

    def key_material(self, body: dict[str, Any]) -> Any:
        items = [m for m in self.history(body) if m.get("type") != GROUP]
        system = [m for m in items if kind_of(m) == "system"]
        first_user = next((m for m in items if kind_of(m) == "user"), None)
        return [body.get("instructions"), [identity_form(m) for m in system], identity_form(first_user)]

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return responses_cache_fields(usage)

    def with_breakpoints(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return messages

    def prompt_tokens(self, response: Any) -> int | None:
        """``usage.input_tokens`` (cached ones included) of a response, or of a stream event carrying the
        response (``response.completed``, ``response.incomplete``)."""
        if not isinstance(response, dict):
            return None
        inner = response.get("response")
        usage = (inner if isinstance(inner, dict) else response).get("usage")
        tokens = usage.get("input_tokens") if isinstance(usage, dict) else None
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None

    def body(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        return dumps({**body, "input": flatten(messages)})


def _arguments_string(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else _json(arguments if arguments is not None else {})


def _shortened(item: dict[str, Any], part: Message) -> dict[str, Any]:
    """``item`` with the arguments the session's copy of its call holds (only string arguments map back)."""
    ident = call_id(item)
    field = CALL_ARGUMENTS.get(str(item.get("type")))
    if ident is None or field is None:
        return item
    for call in part.get("tool_calls") or []:
        if call.get("id") == ident:
            arguments = (call.get("function") or {}).get("arguments")
            return {**item, field: arguments} if isinstance(arguments, str) else item
    return item


def _with_text(items: list[dict[str, Any]], text: str) -> Iterator[dict[str, Any]]:
    """``items`` with the model's message text replaced by ``text``: on the first message item, the later
    ones dropped (a cut keeps one text)."""
    placed = False
    for item in items:
        if item.get("type") != "message":
            yield item
        elif not placed:
            placed = True
            if text:
                yield {**item, "content": [{"type": "output_text", "text": text}]}
        # a later message item's text is part of the one text already placed


__all__ = ["GROUP", "ResponsesFormat", "flatten", "grouped", "kind_of", "pairing_problem"]
