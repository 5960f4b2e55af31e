"""``bench_proxy.py``'s per-route rows: the same agent-shaped history in each API's own shape, through the
compacting proxy and the passthrough, so chat, Anthropic, Responses and Gemini stand side by side.

Each route's upstream answers a short text (JSON, or the API's own SSE sequence when the request streams)
and reports its time in ``x-bench-upstream-ms``, as ``bench_proxy``'s Anthropic upstream does. Histories
are one tool round trip per step (a text, a call, its output: real tool outputs of the shared sessions),
the client resending all of it each request; Responses histories carry a ``reasoning`` item with
``encrypted_content`` before each call, as Codex CLI sends them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

Step = tuple[int, str]  # (step number, tool output)
TEXT = "Done."


# --------------------------------------------------------------------------- the upstream side


def _answer(route: str, stream: bool, raw: bytes) -> tuple[bytes, list[bytes]]:
    """One route's JSON answer and, for a streamed request, its SSE events (already framed)."""
    tokens = len(raw) // 4
    if route == "chat":
        message = {"role": "assistant", "content": TEXT}
        usage = {"prompt_tokens": tokens, "completion_tokens": 2, "total_tokens": tokens + 2}
        full = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}], "usage": usage}
        delta = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": message}]}
        done = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        return orjson.dumps(full), [b"data: " + orjson.dumps(e) + b"\n\n" for e in (delta, done)] + [
            b"data: [DONE]\n\n"
        ]
    if route == "responses":
        item: dict[str, Any] = {"id": "msg_b", "type": "message", "status": "completed", "role": "assistant"}
        item["content"] = [{"type": "output_text", "text": TEXT, "annotations": []}]
        usage = {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2}
        response = {"id": "resp_b", "object": "response", "status": "completed", "output": [item], "usage": usage}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        return orjson.dumps(response), [
            f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in events
        ]
    content = {"role": "model", "parts": [{"text": TEXT}]}
    chunk = {
        "candidates": [{"content": content, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": 2, "totalTokenCount": tokens + 2},
    }
    return orjson.dumps(chunk), [b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"]


def upstream_routes() -> list[Any]:
    """Starlette routes for the chat, Responses and Gemini upstreams (the Anthropic one is bench_proxy's)."""
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    def handler(route: str) -> Callable[[Request], Any]:
        async def answer(request: Request) -> Response:
            t0 = time.perf_counter()
            raw = await request.body()
            stream = "streamGenerateContent" in request.url.path or bool(orjson.loads(raw).get("stream"))
            whole, events = _answer(route, stream, raw)
            took = {"x-bench-upstream-ms": f"{(time.perf_counter() - t0) * 1000:.3f}"}
            if not stream:
                return Response(whole, media_type="application/json", headers=took)

            async def chunks() -> Any:
                for event in events:
                    yield event

            return StreamingResponse(chunks(), media_type="text/event-stream", headers=took)

        return answer

    return [
        Route("/v1/chat/completions", handler("chat"), methods=["POST"]),
        Route("/v1/responses", handler("responses"), methods=["POST"]),
        Route("/v1beta/models/{method:path}", handler("gemini"), methods=["POST"]),
    ]


# --------------------------------------------------------------------------- the client side

SYSTEM = "You are a coding agent. " * 40
PROMPT = "Fix the failing tests in this repository."


def _chat(steps: list[Step], stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    for k, out in steps:
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"cmd":"step {k}"}}'},
        }
        messages.append({"role": "assistant", "content": f"Step {k}: looking further.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": out})
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    return {"model": "gpt-bench", "messages": messages, **extra}


def _anthropic(steps: list[Step], stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for k, out in steps:
        use = {"type": "tool_use", "id": f"toolu_{k:06d}", "name": "Bash", "input": {"command": f"step {k}"}}
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"Step {k}: looking further."}, use]}
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k:06d}", "content": out}
        messages.append({"role": "user", "content": [result]})
    return {"model": "claude-bench", "max_tokens": 1024, "system": SYSTEM, "messages": messages, "stream": stream}


def _responses(steps: list[Step], stream: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": SYSTEM}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]},
    ]
    for k, out in steps:
        items.append({"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": "e" * 400})
        text = [{"type": "output_text", "text": f"Step {k}: looking further."}]
        items.append({"type": "message", "role": "assistant", "content": text})
        call = {"type": "function_call", "call_id": f"call_{k}", "name": "exec_command", "arguments": '{"cmd":"ls"}'}
        items.append(call)
        items.append({"type": "function_call_output", "call_id": f"call_{k}", "output": out})
    return {"model": "gpt-bench", "input": items, "stream": stream}


def _gemini(steps: list[Step], stream: bool) -> dict[str, Any]:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": PROMPT}]}]
    for k, out in steps:
        call = {"functionCall": {"name": "run_shell_command", "args": {"command": f"step {k}"}}}
        parts = [{"text": f"Step {k}: looking further."}, {**call, "thoughtSignature": f"c2lnLXtr{k}"}]
        contents.append({"role": "model", "parts": parts})
        response = {"functionResponse": {"name": "run_shell_command", "response": {"output": out}}}
        contents.append({"role": "user", "parts": [response]})
    return {"contents": contents, "systemInstruction": {"parts": [{"text": SYSTEM}]}}


@dataclass(frozen=True)
class ApiRoute:
    name: str
    path: Callable[[bool], str]  # the request path, streaming or not
    headers: dict[str, str]
    body: Callable[[list[Step], bool], dict[str, Any]]


JSON = {"content-type": "application/json"}
ROUTES = (
    ApiRoute("chat", lambda _: "/v1/chat/completions", {**JSON, "authorization": "Bearer bench"}, _chat),
    ApiRoute(
        "anthropic",
        lambda _: "/v1/messages",
        {**JSON, "x-api-key": "bench", "anthropic-version": "2023-06-01"},
        _anthropic,
    ),
    ApiRoute("responses", lambda _: "/v1/responses", {**JSON, "authorization": "Bearer bench"}, _responses),
    ApiRoute(
        "gemini",
        lambda s: "/v1beta/models/gemini-bench:" + ("streamGenerateContent?alt=sse" if s else "generateContent"),
        {**JSON, "x-goog-api-key": "bench"},
        _gemini,
    ),
)


def route_bodies(route: ApiRoute, tokens: int, rounds: int, outputs: list[str], stream: bool) -> list[bytes]:
    """About ``tokens`` tokens of tool round trips, then ``rounds`` more: each request's body."""
    steps: list[Step] = []
    size = 0
    while size < tokens:
        out = outputs[len(steps) % len(outputs)][:24_000]
        steps.append((len(steps), out))
        size += len(out) // 4 + 30
    bodies = [orjson.dumps(route.body(list(steps), stream))]
    for _ in range(rounds):
        steps.append((len(steps), outputs[len(steps) % len(outputs)][:24_000]))
        bodies.append(orjson.dumps(route.body(list(steps), stream)))
    return bodies


def timed(client: Any, url: str, route: ApiRoute, content: bytes, session: str, stream: bool) -> float:
    """Seconds to the whole answer (streaming: to its first byte), minus the upstream's own time."""
    headers = {**route.headers, "x-microcompact-session": session}
    t0 = time.perf_counter()
    with client.stream("POST", f"{url}{route.path(stream)}", content=content, headers=headers) as response:
        chunks = response.iter_raw()
        next(chunks, b"")
        first = time.perf_counter() - t0
        for _ in chunks:
            pass
    if response.status_code != 200:
        raise SystemExit(f"bench_proxy: {url}{route.path(stream)} answered {response.status_code}")
    elapsed = first if stream else time.perf_counter() - t0
    return elapsed - float(response.headers.get("x-bench-upstream-ms", 0)) / 1000


def added(
    client: Any, urls: dict[str, str], route: ApiRoute, bodies: list[bytes], session: str, stream: bool
) -> tuple[list[float], list[float]]:
    """Passthrough seconds and compact-minus-passthrough seconds per request after the first (the first
    builds the session), the two proxies taking turns going first."""
    modes = ("passthrough", "compact")
    times: dict[str, list[float]] = {m: [] for m in modes}
    for i, content in enumerate(bodies):
        for mode in modes[i % 2 :] + modes[: i % 2]:
            times[mode].append(timed(client, urls[mode], route, content, f"{session}-{mode}", stream))
    plain = times["passthrough"][1:]
    return plain, [a - b for a, b in zip(times["compact"][1:], plain, strict=True)]


def route_rows(
    client: Any,
    urls: dict[str, str],
    sizes: list[int],
    rounds: int,
    outputs: list[str],
    pct: Callable[[list[float], float], float],
    ms: Callable[[float], str],
) -> list[list[str]]:
    """One row per size and route: body size, passthrough p50, added p50 / p99, streamed first byte added
    p50 / p99 (the streamed requests go on from the plain ones' conversation)."""
    rows = []
    for size in sizes:
        for route in ROUTES:
            plain = route_bodies(route, size, rounds, outputs, stream=False)
            streamed = route_bodies(route, size, 2 * rounds + 1, outputs, stream=True)[rounds + 1 :]
            session = f"route-{route.name}-{size}-{time.time_ns()}"
            passthrough, more = added(client, urls, route, plain, session, stream=False)
            _, first_byte = added(client, urls, route, streamed, session, stream=True)
            rows.append(
                [
                    route.name,
                    f"{size // 1000}K",
                    f"{len(plain[-1]) / 1024:.0f}",
                    ms(pct(passthrough, 50)),
                    ms(pct(more, 50)),
                    ms(pct(more, 99)),
                    ms(pct(first_byte, 50)),
                    ms(pct(first_byte, 99)),
                ]
            )
    return rows
