"""The scripted upstream with OpenAI's Responses API as well (Codex CLI, ``client.responses``).

``ResponsesUpstream`` is a ``ScriptedUpstream`` (chat, messages, faults, recording, latency) that also
serves ``POST /v1/responses`` (JSON and SSE, see ``responses_wire``), keeps stored responses
(``store`` not false) for ``previous_response_id``, ``GET``/``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items``, and answers ``POST /v1/responses/compact`` with one opaque
``compaction`` item, as it answers a ``POST /v1/responses`` whose input holds a ``compaction_trigger`` item
(remote compaction v2, Codex's): one ``compaction`` output item, whose content names the newest
``call_step_N`` it absorbed (``cmp-R-upto-N``), so a tool loop goes on after it from where it was. Input
the API refuses (a call without its output, a stray output, an orphaned reasoning item, ``input_text`` in
an assistant message, an unknown previous response) gets its 400.
Usage carries ``input_tokens_details.cached_tokens`` from a simulated prefix cache.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from . import responses_wire
from .body import ScriptedBody
from .recorded import RecordedRequest
from .replies import Block, Reply, Text, Thinking, ToolCall, text
from .server import ScriptedUpstream
from .usage import output_tokens

RESPONSES_PATH = "/v1/responses"


class ResponsesUpstream(ScriptedUpstream):
    def __init__(self, *args: Any, **options: Any) -> None:
        self.stored: dict[str, dict[str, Any]] = {}  # response id -> the response object
        self.stored_input: dict[str, list[Any]] = {}
        self._prefix_cache = responses_wire.PrefixCache()
        super().__init__(*args, **options)

    def _app(self) -> Starlette:
        routes = [
            Route(RESPONSES_PATH, self._create, methods=["POST"]),
            Route(f"{RESPONSES_PATH}/compact", self._compact, methods=["POST"]),
            Route(f"{RESPONSES_PATH}/{{rid}}", self._stored_response, methods=["GET", "DELETE"]),
            Route(f"{RESPONSES_PATH}/{{rid}}/input_items", self._input_items, methods=["GET"]),
        ]
        return Starlette(routes=[*routes, *super()._app().routes])

    def __enter__(self) -> ResponsesUpstream:
        self.start()
        return self

    def responses_requests(self) -> list[RecordedRequest]:
        """The POST /v1/responses requests, in order."""
        with self._lock:
            return [r for r in self.requests if r.path == RESPONSES_PATH and r.method == "POST"]

    def input_tokens(self, body: dict[str, Any]) -> int:
        """What this upstream reports as ``body``'s ``input_tokens`` (without touching the cache)."""
        pieces = responses_wire.prompt_pieces(body)
        return self.overhead + sum(responses_wire._tokens(p) for p in pieces)

    # ------------------------------------------------------------------ endpoints

    async def _create(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        if not isinstance(record.body, dict):
            return self._error(record, 400, "The request body is not valid JSON.", "invalid_request_error")
        if self.validate:
            problem = responses_wire.input_problem(record.body, set(self.stored))
            if problem:
                return self._error(record, 400, problem, "invalid_request_error")
        answer = self._next_answer(record)
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(answer, Reply):
            return self._reply(record, answer, self._render)
        return await self._fault(record, answer, self._render)

    def _render(self, record: RecordedRequest, reply: Reply) -> list[bytes]:
        body = record.body
        total, cached = self._prefix_cache.usage(body, self.overhead)
        usage = responses_wire.usage_json(total, cached, output_tokens(reply))
        record.usage = usage
        full = responses_wire.response(body, reply, record.number, usage)
        if compaction_requested(body):
            full["output"] = [compaction_item(record.number, last_call_step(body))]
        if body.get("store", True) is not False:
            self.stored[full["id"]] = full
            self.stored_input[full["id"]] = list(body.get("input") or []) if isinstance(body.get("input"), list) else []
        if record.stream:
            return responses_wire.stream_events(full, reply.chunk_chars)
        return [json.dumps(full, separators=(",", ":")).encode()]

    async def _compact(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        body = record.body if isinstance(record.body, dict) else {}
        item = {
            "type": "compaction",
            "id": f"cmp_{record.number:010d}",
            "encrypted_content": f"compacted-{record.number}",
        }
        payload = {
            "id": f"resp_cmp_{record.number:010d}",
            "object": "response.compaction",
            "created_at": responses_wire.CREATED,
            "output": [item],
            "usage": responses_wire.usage_json(self.input_tokens(body), 0, 10),
        }
        return self._body(record, 200, self._headers(record, "application/json"), [json.dumps(payload).encode()])

    async def _stored_response(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        rid = request.path_params["rid"]
        if rid not in self.stored:
            return self._error(record, 404, f"Response with id '{rid}' not found.", "invalid_request_error")
        if request.method == "DELETE":
            del self.stored[rid]
            payload: Any = {"id": rid, "object": "response", "deleted": True}
        else:
            payload = self.stored[rid]
        return self._body(record, 200, self._headers(record, "application/json"), [json.dumps(payload).encode()])

    async def _input_items(self, request: Request) -> ScriptedBody:
        record = await self._record(request)
        rid = request.path_params["rid"]
        if rid not in self.stored_input:
            return self._error(record, 404, f"Response with id '{rid}' not found.", "invalid_request_error")
        items = self.stored_input[rid]
        payload = {"object": "list", "data": items, "has_more": False, "first_id": None, "last_id": None}
        return self._body(record, 200, self._headers(record, "application/json"), [json.dumps(payload).encode()])


def compaction_requested(body: Any) -> bool:
    """Whether a Responses request asks for remote compaction (a ``compaction_trigger`` input item)."""
    items = body.get("input") if isinstance(body, dict) else None
    return any(isinstance(i, dict) and i.get("type") == "compaction_trigger" for i in items or [])


def compaction_item(number: int, upto: int | None) -> dict[str, Any]:
    """The one ``compaction`` output item of a remote compaction, naming the newest step it absorbed."""
    content = f"cmp-{number}-upto-{'none' if upto is None else upto}"
    return {"type": "compaction", "id": f"cmp_{number:010d}", "encrypted_content": content}


_COMPACTED_STEP = re.compile(r"^cmp-\d+-upto-(\d+)$")


def last_call_step(body: Any) -> int | None:
    """The step number of the newest ``call_step_N`` function call in a Responses request, or of the newest
    step a ``compaction`` item of this upstream absorbed, if any."""
    items = body.get("input") if isinstance(body, dict) else None
    for item in reversed(items if isinstance(items, list) else []):
        kind = item.get("type") if isinstance(item, dict) else None
        ident = item.get("call_id") if kind == "function_call" else None
        if isinstance(ident, str) and ident.startswith("call_step_"):
            return int(ident.removeprefix("call_step_"))
        absorbed = _COMPACTED_STEP.match(str(item.get("encrypted_content"))) if kind == "compaction" else None
        if absorbed:
            return int(absorbed.group(1))
    return None


@dataclass
class ResponsesToolLoop:
    """Call ``tool`` with ``make_input(step)`` until ``iterations`` steps are done, then a final text.

    The step comes from the request itself: the newest ``call_step_N`` call in its input (a compacting
    proxy keeps the newest iteration, so counting outputs would go back; a client's retry gets the same
    answer). Each call opens with a reasoning item (``encrypted_content`` ``enc-step-N``), as reasoning
    models do with ``include: ["reasoning.encrypted_content"]``. Requests without the tool get ``side_reply``.
    """

    iterations: int
    tool: str = "exec_command"
    make_input: Callable[[int], dict[str, Any]] = lambda step: {
        "cmd": f"seq {step * 1_000_000 + 1} {step * 1_000_000 + 3000}"
    }
    final_text: str = "All steps are done."
    side_reply: str = "Side request answered."
    reasoning: bool = True

    def __call__(self, request: RecordedRequest) -> Reply:
        tools = request.body.get("tools") if isinstance(request.body, dict) else None
        if not any(isinstance(t, dict) and t.get("name") == self.tool for t in tools or []):
            return text(self.side_reply)
        last = last_call_step(request.body)
        step = 0 if last is None else last + 1
        if step >= self.iterations:
            return text(self.final_text)
        blocks: list[Block] = [Thinking(f"Plan for step {step + 1}.", f"enc-step-{step}")] if self.reasoning else []
        blocks += [
            Text(f"Step {step + 1} of {self.iterations}."),
            ToolCall(self.tool, self.make_input(step), id=f"call_step_{step}"),
        ]
        return Reply(tuple(blocks))


__all__ = ["ResponsesToolLoop", "ResponsesUpstream", "compaction_item", "compaction_requested", "last_call_step"]
