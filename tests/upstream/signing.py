"""Thinking blocks bound to their prefix, signed and checked as Anthropic's "preserved thinking" models do.

Each thinking block the upstream answers is signed with a keyed hash of its prefix: the top-level
``system`` and ``tools`` and every block before it, ``cache_control`` left out and thinking blocks left
out (so the docs' valid edits keep a block valid: appending, moving ``cache_control``, removing thinking
blocks from the start, the end, or all of them), consecutive turns of one role read as one (the API joins
them). A redacted block carries its signature in ``data``. When a request sends a block back, the
signature is computed again over the request's own prefix of that block: a block whose prefix changed
(an earlier tool result shortened, a message edited, reordered or deleted, ``system`` or ``tools``
changed) and every later thinking block are invalid. The request is refused with the documented 400
unless it asks ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` with the beta value in
``anthropic-beta``; then those blocks are dropped (counted on the record) and the request is answered.

It also refuses, as the API does, a message whose content is empty (an assistant message stripped of
everything must not be sent).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from . import anthropic_wire
from .body import ScriptedBody
from .recorded import RecordedRequest, Script
from .replies import Answer, Block, Fault, RedactedThinking, Reply, Thinking
from .server import ScriptedUpstream
from .usage import prompt_tokens

BINDING_BETA = "thinking-binding-controls-2026-08-01"
BINDING_FAMILIES = ("fable-5-1", "fable-5-2", "mythos-5-1", "mythos-5-2", "opus-5-5", "sonnet-5-5", "haiku-5-5")
_KEY = b"scripted-upstream-thinking-binding"
_THINKING = ("thinking", "redacted_thinking")


def binds(model: Any) -> bool:
    """Whether ``model`` checks the prefix of its thinking blocks (a preserved-thinking family)."""
    found = re.match(r"claude-([a-z]+-\d{1,2}(?:-\d{1,2})?)(?!\d)", model) if isinstance(model, str) else None
    return found is not None and found.group(1) in BINDING_FAMILIES


def binding_message(where: str, kind: str) -> str:
    return (
        f"{where}: Invalid `signature` in `{kind}` block. The block is bound to a different conversation. "
        'Remove the block or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block". '
        f"This setting requires the value `{BINDING_BETA}` in the `anthropic-beta` header."
    )


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


class Prefix:
    """A running keyed hash of a request's prefix, block by block."""

    def __init__(self, body: dict[str, Any]) -> None:
        self._hash = hashlib.sha256(_canonical([_clean(body.get("system")), _clean(body.get("tools"))]))

    def add_message_fields(self, message: dict[str, Any]) -> None:
        extra = {k: v for k, v in message.items() if k not in ("role", "content")}
        if extra:
            self._hash.update(_canonical([message.get("role"), "fields", _clean(extra)]) + b"\0")

    def add(self, role: Any, block: Any) -> None:
        self._hash.update(_canonical([role, _clean(block)]) + b"\0")

    def signature(self, block: dict[str, Any]) -> str:
        """The signature ``block`` (a thinking or redacted_thinking block) must carry here."""
        text = block.get("thinking", "") if block.get("type") == "thinking" else "redacted"
        mac = hmac.new(_KEY, self._hash.digest() + str(text).encode(), hashlib.sha256).hexdigest()[:48]
        return f"bound-{mac}"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _carried(block: dict[str, Any]) -> Any:
    return block.get("signature") if block.get("type") == "thinking" else block.get("data")


@dataclass
class Verdict:
    """What the binding check made of one request."""

    checked: int = 0  # thinking blocks sent back
    invalid: list[str] = field(default_factory=list)  # "messages.N.content.M" of each invalid block, in order
    refusal: str | None = None  # the 400 message, when refused
    dropped: int = 0  # blocks dropped at the request's asking


def _asks_drop(body: dict[str, Any], headers: dict[str, str]) -> tuple[bool, bool]:
    """(the body asks drop_block, the beta value came with it)."""
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    asked = isinstance(binding, dict) and binding.get("prefix_mismatch_behavior") == "drop_block"
    betas = [v.strip() for v in headers.get("anthropic-beta", "").split(",")]
    return asked, BINDING_BETA in betas


def check(body: dict[str, Any], headers: dict[str, str]) -> Verdict:
    """The prefix check of every thinking block ``body`` sends back."""
    verdict = Verdict()
    prefix = Prefix(body)
    first_kind = ""
    for i, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            continue
        prefix.add_message_fields(message)
        for j, block in enumerate(_blocks(message)):
            if not (isinstance(block, dict) and block.get("type") in _THINKING):
                prefix.add(message.get("role"), block)
                continue
            verdict.checked += 1
            if verdict.invalid or _carried(block) != prefix.signature(block):
                verdict.invalid.append(f"messages.{i}.content.{j}")
                first_kind = first_kind or str(block["type"])
    asked, beta = _asks_drop(body, headers)
    if asked and not beta:
        verdict.refusal = (
            f"thinking.block_binding: This setting requires the value `{BINDING_BETA}` in the `anthropic-beta` header."
        )
    elif verdict.invalid and not asked:
        verdict.refusal = binding_message(verdict.invalid[0], first_kind)
    elif verdict.invalid:
        verdict.dropped = len(verdict.invalid)
    return verdict


def empty_message_problem(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if message.get("content") in ([], "") and not final_assistant:
            return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"  # noqa: E501
    return None


def signed(body: dict[str, Any], reply: Reply, request_number: int) -> Reply:
    """``reply`` with every thinking block signed for the prefix it is produced after: ``body`` and the
    reply's blocks before it."""
    prefix = Prefix(body)
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            prefix.add_message_fields(message)
            for block in _blocks(message):
                if not (isinstance(block, dict) and block.get("type") in _THINKING):
                    prefix.add(message.get("role"), block)
    rendered = anthropic_wire.content_blocks(reply, request_number)
    blocks: list[Block] = []
    for source, block in zip(reply.blocks, rendered, strict=True):
        if isinstance(source, Thinking):
            blocks.append(Thinking(source.thinking, prefix.signature(block)))
        elif isinstance(source, RedactedThinking):
            blocks.append(RedactedThinking(prefix.signature(block)))
        else:
            prefix.add("assistant", block)
            blocks.append(source)
    return Reply(tuple(blocks), stop_reason=reply.stop_reason, model=reply.model, chunk_chars=reply.chunk_chars)


class SigningUpstream(ScriptedUpstream):
    """The scripted upstream with thinking blocks bound to their prefix (see the module docstring).

    ``binding(model)`` says which models check (by default the preserved-thinking families); every
    verdict is kept in ``verdicts``, one per /v1/messages request, with the request's number.
    """

    def __init__(self, script: Script | None = None, *, binding: Callable[[Any], bool] = binds, **options: Any) -> None:
        super().__init__(script, **options)
        self.binding = binding
        self.verdicts: list[tuple[int, Verdict]] = []

    def refused(self) -> list[int]:
        """The numbers of the requests refused for a broken binding."""
        return [n for n, v in self.verdicts if v.refusal]

    def _next_answer(self, record: RecordedRequest) -> Answer:
        if record.path == "/v1/messages" and isinstance(record.body, dict):
            empty = empty_message_problem(record.body)
            if empty:
                return Fault(status=400, error_type="invalid_request_error", message=empty)
            if self.binding(record.body.get("model")):
                verdict = check(record.body, record.headers)
                with self._lock:
                    self.verdicts.append((record.number, verdict))
                if verdict.refusal:
                    return Fault(status=400, error_type="invalid_request_error", message=verdict.refusal)
        return super()._next_answer(record)

    async def _count_tokens(self, request: Request) -> ScriptedBody:
        """count_tokens runs the same prefix check (a request that sends blocks back)."""
        record = await self._record(request)
        if not isinstance(record.body, dict):
            return self._error(record, 400, "The request body is not valid JSON.", "invalid_request_error")
        if self.binding(record.body.get("model")):
            verdict = check(record.body, record.headers)
            if verdict.refusal:
                return self._error(record, 400, verdict.refusal, "invalid_request_error")
        payload = json.dumps({"input_tokens": prompt_tokens(record.body, self.overhead)}).encode()
        return self._body(record, 200, self._headers(record, "application/json"), [payload])

    def _render_anthropic(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        return super()._render_anthropic(record, signed(record.body, reply, record.number))


__all__ = ["BINDING_BETA", "SigningUpstream", "Verdict", "binding_message", "binds", "check", "signed"]
