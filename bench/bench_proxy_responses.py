"""What ``microcompact serve`` adds to an OpenAI Responses request (``POST /v1/responses``, Codex CLI's only
route), measured against a plain passthrough of the same stack, as ``bench_proxy.py`` does for Messages.

Run: ``.venv/bin/python bench/bench_proxy_responses.py`` (about a minute; ``--quick`` less). Prints tables;
asserts nothing.

Method: the processes of ``bench_proxy.py`` (its ``--serve compact`` and ``--serve passthrough`` proxies,
each with its own SQLite store) in front of this file's ``--upstream``: ``/v1/responses`` answering a short
text as JSON or SSE (the documented event sequence), reporting its own time in ``x-bench-upstream-ms``.
Histories are Codex-shaped: two developer items and the prompt, then per step a ``reasoning`` item (with
``encrypted_content``), a ``message``, a ``function_call`` and its ``function_call_output`` (real tool
outputs of the shared sessions), the client resending everything each request. Added latency is proxy
minus passthrough, request by request, sent back to back in alternating order.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench")]

import bench_proxy  # noqa: E402  (its proxies, tables and tool outputs)

MODES = ("passthrough", "compact")
HEADERS = {"authorization": "Bearer bench", "content-type": "application/json"}


def serve_upstream() -> None:
    """``--upstream``: POST /v1/responses answering "Done." (JSON, or SSE when ``stream`` is set)."""
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def responses(request: Request) -> Response:
        t0 = time.perf_counter()
        raw = await request.body()
        parsed = orjson.loads(raw)
        item: dict[str, Any] = {"id": "msg_b", "type": "message", "status": "completed", "role": "assistant"}
        item["content"] = [{"type": "output_text", "text": "Done.", "annotations": []}]
        usage = {"input_tokens": len(raw) // 4, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2}
        full: dict[str, Any] = {
            "id": "resp_b",
            "object": "response",
            "status": "completed",
            "output": [item],
            "usage": usage,
        }
        took = {"x-bench-upstream-ms": f"{(time.perf_counter() - t0) * 1000:.3f}"}
        if not parsed.get("stream"):
            return Response(orjson.dumps(full), media_type="application/json", headers=took)
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**full, "status": "in_progress", "output": [], "usage": None}},
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": full},
        ]
        chunks = [f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in events]

        async def stream() -> Any:
            for chunk in chunks:
                yield chunk

        return StreamingResponse(stream(), media_type="text/event-stream", headers=took)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    app = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=120)
    uvicorn.Server(config).run(sockets=[sock])


class Upstream:
    """This file's ``--upstream`` as a process."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--upstream"], stdout=subprocess.PIPE, env=env, text=True, cwd=ROOT
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().strip()}"

    def stop(self) -> None:
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)


def histories(tokens: int, rounds: int, outputs: list[str]) -> list[list[dict[str, Any]]]:
    """A Codex-shaped input of about ``tokens`` tokens, then ``rounds`` more steps: each request's input."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be precise. " * 600}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing tests."}]},
    ]
    size, k = 0, 0

    def step() -> int:
        nonlocal k
        out = outputs[k % len(outputs)][:24_000]
        call = f"call_{k:06d}"
        items.append({"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": "e" * 400})
        text = [{"type": "output_text", "text": f"Step {k}: looking further."}]
        items.append({"type": "message", "role": "assistant", "content": text})
        items.append({"type": "function_call", "call_id": call, "name": "exec_command", "arguments": '{"cmd":"ls"}'})
        items.append({"type": "function_call_output", "call_id": call, "output": out})
        k += 1
        return len(out) // 4 + 130

    while size < tokens:
        size += step()
    out = [list(items)]
    for _ in range(rounds):
        step()
        out.append(list(items))
    return out


def timed(client: httpx.Client, url: str, content: bytes, session: str, stream: bool) -> float:
    """Seconds to the whole answer (or, streaming, to its first byte), minus the upstream's own time."""
    headers = {**HEADERS, "x-microcompact-session": session}
    t0 = time.perf_counter()
    with client.stream("POST", f"{url}/v1/responses", content=content, headers=headers) as response:
        chunks = response.iter_raw()
        next(chunks)
        first = time.perf_counter() - t0
        for _ in chunks:
            pass
    if response.status_code != 200:
        raise SystemExit(f"bench_proxy_responses: {url} answered {response.status_code}")
    elapsed = first if stream else time.perf_counter() - t0
    return elapsed - float(response.headers.get("x-bench-upstream-ms", 0)) / 1000


def measure(client: httpx.Client, proxies: dict[str, Any], bodies: list[bytes], name: str, stream: bool) -> list[str]:
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for i, content in enumerate(bodies):
        for mode in MODES[i % 2 :] + MODES[: i % 2]:
            times[mode].append(timed(client, proxies[mode].url, content, f"{name}-{mode}", stream))
    added = [a - b for a, b in zip(times["compact"][1:], times["passthrough"][1:], strict=True)]
    pct, ms = bench_proxy.pct, bench_proxy.ms
    return [ms(pct(times["passthrough"][1:], 50)), ms(pct(added, 50)), ms(pct(added, 99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default="10000,50000,150000", help="history sizes, tokens")
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        serve_upstream()
        return
    rounds = 10 if args.quick else 30
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-responses-"))
    upstream = Upstream()
    proxies: dict[str, Any] = {}
    try:
        for mode in MODES:
            db = str(workdir / f"{mode}.db")
            proxies[mode] = bench_proxy.Child("--serve", mode, "--upstream-url", upstream.url, "--store", db)
        client = httpx.Client(timeout=120)
        outputs = bench_proxy.tool_outputs()
        rows = []
        for size in [int(s) for s in args.sizes.split(",")]:
            inputs = histories(size, 2 * rounds, outputs)
            plain = [orjson.dumps({"model": "m", "input": i}) for i in inputs[: rounds + 1]]
            streamed = [orjson.dumps({"model": "m", "input": i, "stream": True}) for i in inputs[rounds + 1 :]]
            kb = f"{len(plain[-1]) / 1024:.0f}"
            rows.append([f"{size // 1000}K", kb, *measure(client, proxies, plain, f"r{size}", False)])
            rows.append([f"{size // 1000}K SSE ttfb", kb, *measure(client, proxies, streamed, f"r{size}", True)])
        client.close()
    finally:
        for proxy in proxies.values():
            proxy.stop()
        upstream.stop()
    bench_proxy.table(
        f"Responses API (POST /v1/responses), Codex-shaped histories, {rounds} requests after the first per row, "
        f"context limit {bench_proxy.CONTEXT_LIMIT:,}; ms",
        ["tokens", "body KB", "passthrough p50", "added p50", "added p99"],
        rows,
    )


if __name__ == "__main__":
    main()
