"""OpenAI Chat Completions: the client's messages already are session messages.

Every field the client sent (``name``, multimodal parts, ``tool_calls``, ``reasoning`` fields, unknown
ones) stays on the session message, so a kept message is forwarded as the client's own dict and a
shortened one (a stubbed tool output, shortened call arguments) as the session's copy of it.
"""

from __future__ import annotations

from typing import Any

from ..messages import Message, TranscriptError, message_shape_errors, to_api, validate_message
from ..properties import tool_pairing_errors
from ..wire import Upstream, WireApi
from .errors import BadRequest
from .provider import dumps, history_array, identity_form
from .usage_tap import openai_cache_fields


class OpenAIFormat:
    name: Upstream = Upstream.OPENAI
    wire: WireApi = WireApi.CHAT
    binds_thinking: bool = False
    fixed_fields: tuple[str, ...] = ("tools",)

    def history(self, body: Any) -> list[Message]:
        messages = history_array(body, "messages", "'messages' must be an array of message objects")
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            try:
                validate_message(message, where)
            except TranscriptError as exc:
                raise BadRequest(str(exc)) from None
            problems = message_shape_errors(message)
            if problems:
                raise BadRequest(f"{where}: {problems[0]}")
        return messages

    def passthrough_reason(self, body: dict[str, Any]) -> str | None:
        return None

    def body(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        return dumps({**body, "messages": messages})

    def convert(self, message: Message) -> list[Message]:
        return [message]

    def part_count(self, message: Message) -> int:
        return 1

    def rebuild(self, original: Message, parts: list[Message]) -> Message:
        return to_api(parts)[0]

    def render(self, message: Message) -> Message:
        return to_api([message])[0]

    def normalize(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return messages

    def view_problem(self, messages: list[Message]) -> str | None:
        problems = tool_pairing_errors(messages)
        return problems[0] if problems else None

    def key_material(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        system = [m for m in messages if isinstance(m, dict) and m.get("role") in ("system", "developer")]
        first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        return [[identity_form(m) for m in system], identity_form(first_user)]

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return openai_cache_fields(usage)

    def with_breakpoints(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return messages

    def prompt_tokens(self, response: Any) -> int | None:
        usage = response.get("usage") if isinstance(response, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None
