"""What ``microcompact serve`` adds to a request, measured against a plain passthrough of the same stack.

Run: ``.venv/bin/python bench/bench_proxy.py`` (about 5 minutes; ``--quick`` about 2). Prints tables;
asserts nothing. ``--db DSN`` runs the proxies on PostgreSQL instead of a fresh SQLite file.

Before and after on a busy machine: ``--variant-src /other/checkout/src`` (or ``--variant-switch-interval MS``)
adds a fourth proxy, the compacting one running that package (or with that switch interval), taking its turn
request by request with the others so both see the same load; ``--skip routes,throughput,breakdown`` keeps
such a run short. Two separate runs on a shared machine compare nothing.

``--noise-floor`` adds a second passthrough proxy: its "noise added" columns are what the machine's load
alone adds to a p99 of 40 paired requests (the largest of them), the floor under every other p99.

Targets (issue 10): added latency per request p50 <= 10 ms and p99 <= 40 ms at 150K-token histories,
growing no faster than the body; streaming time-to-first-byte overhead <= 5 ms.

Method
------
* Four processes: the scripted upstream (``tests/upstream``, no latency; it serves the recorded assistant
  messages of the shared Claude Code sessions and a short text otherwise) and three proxies, each this file
  re-run with ``--serve``: the real app (``microcompact.server.Proxy``) with compaction, the same app with
  compaction off (``passthrough``: the engine step returns the client's messages untouched, so the request
  is parsed and its bytes forwarded), and the app on a ``shared=True`` router (what several ``serve``
  processes on one store run: a store lock per conversation, a version check, the lease handed back).
  Each proxy has its own store; the client (this process) speaks HTTP to all three.
* Added latency = (time through the proxy) - (time through the passthrough), request by request, the two
  sent back to back in alternating order, both fully read. Upstream time is the same on both paths and
  cancels out; what is left is the engine's work (digests, sync, store writes, passes in the request path,
  building and serializing the compacted view) and re-serializing a changed body.
* Replays: the Claude Code sessions in Anthropic form (``anthropic_history``), the client resending its
  full history before each recorded assistant message, as Claude Code does. Synthetic histories of
  several sizes: an Anthropic conversation of real tool outputs (taken in turn from the shared sessions),
  one request per new tool round trip at that size.
* Streaming: time to the first byte of the SSE response, proxy minus passthrough, at the largest size.
* API routes (``proxy_routes.py``): the same synthetic tool loop in the shape of each API the proxy compacts
  (Chat Completions, Anthropic Messages, Responses with reasoning items, Gemini ``generateContent``),
  plain then streamed, compact minus passthrough: chat, Anthropic, Responses and Gemini rows side by side.
* Throughput: 50 concurrent conversations (one asyncio client each, bodies pre-encoded), each resending its
  growing history as fast as it can for a few seconds; requests per second through each proxy.
* Memory: the compacting proxy's resident set before and after opening conversations that then stay idle,
  per conversation.
* Breakdown and profile: the engine step (``Compaction.prepare``) in this process on the largest history,
  phase by phase, then under cProfile (top functions by cumulative time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import logging
import os
import pstats
import statistics
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
if "--src" in sys.argv[:-1]:  # a variant proxy running another tree's package (--variant-src)
    sys.path.insert(0, sys.argv[sys.argv.index("--src") + 1])

import proxy_routes  # noqa: E402  (this folder: the chat, Responses and Gemini rows)
from support.paths import NORMALIZED  # noqa: E402  (tests/ helpers: the shared transcripts, the scripted upstream)
from upstream.replay import anthropic_history, load_transcript, tail_key  # noqa: E402

CONTEXT_LIMIT = 200_000  # Claude Code's window: the 150K history is over its batch threshold
MODES = ("passthrough", "compact", "shared")
VARIANT = "variant"  # --variant-switch-interval: the compacting proxy, one setting changed, side by side
NOISE = "noise"  # --noise-floor: a second passthrough, whose "added" is what the machine alone adds
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "bench", "content-type": "application/json"}


# --------------------------------------------------------------------------- the processes


def serve(mode: str, upstream: str, db: str, switch_interval: float | None = None) -> None:
    """Run one proxy (``--serve``): print its port, serve until killed. ``switch_interval`` (seconds): the
    interpreter's thread switch interval for this process (``variant``: the compacting proxy with it)."""

    import uvicorn

    from microcompact.router import SessionRouter
    from microcompact.server import Proxy, ProxySettings, run
    from microcompact.server.compaction import Compaction, Prepared
    from microcompact.server.run import proxy_config
    from microcompact.store import open_store

    class Passthrough(Compaction):
        """The engine step switched off: the client's messages go out as they came."""

        def prepare(self, provider: Any, body: Any, key: str, history: list[Any], model: str | None = None) -> Prepared:
            return Prepared(key, history)

    # What ``serve`` sets (a checkout from before it had the setting: Python's default).
    default_ms = getattr(run, "SWITCH_INTERVAL_MS", None)
    if switch_interval is None and default_ms is not None:
        switch_interval = default_ms / 1000
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    store = open_store(db)
    router = SessionRouter(proxy_config(None, CONTEXT_LIMIT), store=store, shared=mode == "shared")
    settings = ProxySettings(openai_upstream=f"{upstream}/v1", anthropic_upstream=upstream, gemini_upstream=upstream)
    proxy = Proxy(router, settings)
    if mode in ("passthrough", NOISE):
        proxy.compaction = Passthrough(router, proxy.metrics)
        logging.getLogger("microcompact").setLevel(logging.ERROR)  # a "passing through" line per conversation
    sock = listener()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(proxy.app(), log_level="warning", access_log=False, lifespan="on")).run(
        sockets=[sock]
    )


def serve_upstream() -> None:
    """Run the bench's upstream (``--upstream``): Anthropic ``/v1/messages`` answering each request with the
    recorded assistant message that followed its tail in a shared Claude Code session (else a short text),
    as JSON or SSE, and the chat, Responses and Gemini routes (``proxy_routes``) answering a short text. It
    reports its own time in ``x-bench-upstream-ms`` so the client can take it out."""

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    replies: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(NORMALIZED.glob("cc_*.jsonl")):
        recorded = load_transcript(path)
        for i, m in enumerate(recorded):
            if m["role"] == "assistant":
                replies.setdefault(tail_key(recorded[:i]), anthropic_history([m])[1][0]["content"])
    fallback = [{"type": "text", "text": "Done."}]

    async def messages(request: Request) -> Response:
        t0 = time.perf_counter()
        raw = await request.body()
        parsed = orjson.loads(raw)
        content = replies.get(tail_key(parsed.get("messages") or []), fallback)
        usage = {"input_tokens": len(raw) // 4, "output_tokens": 20}
        message = {"id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-bench"}
        if not parsed.get("stream"):
            payload = orjson.dumps({**message, "content": content, "stop_reason": "end_turn", "usage": usage})
            took = f"{(time.perf_counter() - t0) * 1000:.3f}"
            return Response(payload, media_type="application/json", headers={"x-bench-upstream-ms": took})
        events = [
            ("message_start", {"type": "message_start", "message": {**message, "content": [], "usage": usage}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": fallback[0]}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}),
            ("message_stop", {"type": "message_stop"}),
        ]
        chunks = [f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n" for name, data in events]

        async def stream() -> Any:
            for chunk in chunks:
                yield chunk

        took = f"{(time.perf_counter() - t0) * 1000:.3f}"
        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-bench-upstream-ms": took})

    sock = listener()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"]), *proxy_routes.upstream_routes()])
    # Idle connections kept longer than the proxy keeps them in its pool (60 s): uvicorn's 5 s default
    # closed pooled connections just as the proxy reused them (a 502), which is not what is measured here.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=120)
    uvicorn.Server(config).run(sockets=[sock])


def listener() -> Any:
    """A socket for 127.0.0.1 as ``serve`` makes it (``run.bind``: the protocol from getaddrinfo, IPPROTO_TCP):
    asyncio turns Nagle's algorithm off only on connections of such a socket. ``socket.socket()`` (protocol
    0) kept it on: a response written in two parts (uvicorn: headers, then body) waited for the client's
    delayed ACK, 40 ms, on a kept-alive connection, in any proxy, at random (the p99s of every mode)."""
    import socket

    family, kind, proto, _, _ = socket.getaddrinfo("127.0.0.1", 0, type=socket.SOCK_STREAM)[0]
    return socket.socket(family, kind, proto)


class Child:
    """A process of this file, reporting its port on its first line."""

    def __init__(self, *args: str, src: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": f"{src or ROOT / 'src'}:{ROOT / 'tests'}"}
        self.process = subprocess.Popen(
            [sys.executable, __file__, *args], stdout=subprocess.PIPE, env=env, text=True, cwd=ROOT
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.isdigit():
            raise SystemExit(f"bench_proxy: {' '.join(args)} did not start")
        self.url = f"http://127.0.0.1:{line}"

    def rss_kb(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as fh:
            return next(int(x.split()[1]) for x in fh if x.startswith("VmRSS"))

    def stop(self) -> None:
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        if self.process.poll() is None:
            self.process.kill()


# --------------------------------------------------------------------------- request bodies


def body(system: str, messages: list[dict[str, Any]], stream: bool = False) -> bytes:
    return orjson.dumps(
        {"model": "claude-bench", "max_tokens": 1024, "system": system, "messages": messages, "stream": stream}
    )


def claude_code_requests(path: Path) -> list[bytes]:
    """The bodies Claude Code sent for one shared session: the history before each assistant message."""
    recorded = load_transcript(path)
    out = []
    for i, m in enumerate(recorded):
        if m["role"] == "assistant" and i:
            system, messages = anthropic_history(recorded[:i])
            out.append(body(system, messages))
    return out


def tool_outputs() -> list[str]:
    """Real tool outputs of the shared sessions, in order (the synthetic histories are made of them)."""
    return [
        str(m["content"])
        for p in sorted(NORMALIZED.glob("cc_*.jsonl"))
        for m in load_transcript(p)
        if m["role"] == "tool" and m.get("content")
    ]


def synthetic(tokens: int, rounds: int, outputs: list[str]) -> tuple[str, list[list[dict[str, Any]]]]:
    """A conversation of about ``tokens`` tokens (4 characters a token), then ``rounds`` more tool round
    trips: the histories of the ``rounds + 1`` requests."""
    system = "You are a coding agent. " * 40
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing tests in this repository."}]
    size, k = 0, 0

    def round_trip() -> int:
        nonlocal k
        out = outputs[k % len(outputs)][:24_000]
        call = f"toolu_{k:06d}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {k}: looking further."},
                    {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"step {k}"}},
                ],
            }
        )
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": out}]})
        k += 1
        return len(out) // 4 + 30

    while size < tokens:
        size += round_trip()
    histories = [list(messages)]
    for _ in range(rounds):
        round_trip()
        histories.append(list(messages))
    return system, histories


# --------------------------------------------------------------------------- measuring


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def timed_post(client: httpx.Client, url: str, content: bytes, session: str) -> tuple[float, httpx.Response]:
    """Seconds the request took, minus the upstream's own time (its header), and the response."""
    t0 = time.perf_counter()
    headers = {**HEADERS, "x-microcompact-session": session}
    response = client.post(f"{url}/v1/messages", content=content, headers=headers)
    response.read()
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise SystemExit(f"bench_proxy: {url} answered {response.status_code}: {response.text[:300]}")
    return elapsed - float(response.headers.get("x-bench-upstream-ms", 0)) / 1000, response


def paired(
    client: httpx.Client, proxies: dict[str, Child], bodies: list[bytes], session: str
) -> dict[str, list[float]]:
    """Send every body through each proxy (order rotating); per mode, seconds per request, and for the
    compacting modes the added seconds over the passthrough, request by request."""
    times: dict[str, list[float]] = {m: [] for m in proxies}
    occupancy: list[float] = []
    for i, content in enumerate(bodies):
        order = list(proxies)[i % len(proxies) :] + list(proxies)[: i % len(proxies)]
        for mode in order:
            elapsed, response = timed_post(client, proxies[mode].url, content, f"{session}-{mode}")
            times[mode].append(elapsed)
            occ = response.headers.get("x-microcompact-occupancy")
            if mode == "compact" and occ:
                occupancy.append(float(occ))
    out = {f"{m} s": t for m, t in times.items()}
    for mode in proxies:
        if mode != "passthrough":
            out[f"{mode} added"] = [a - b for a, b in zip(times[mode], times["passthrough"], strict=True)]
    out["occupancy"] = occupancy
    return out


def ttfb(client: httpx.Client, url: str, content: bytes, session: str) -> float:
    t0 = time.perf_counter()
    with client.stream(
        "POST", f"{url}/v1/messages", content=content, headers={**HEADERS, "x-microcompact-session": session}
    ) as response:
        chunks = response.iter_raw()
        next(chunks)
        first = time.perf_counter() - t0
        for _ in chunks:
            pass
    return first - float(response.headers.get("x-bench-upstream-ms", 0)) / 1000


async def throughput(
    url: str, sessions: int, seconds: float, histories: list[list[bytes]], tag: str
) -> tuple[float, int]:
    """Requests per second with ``sessions`` conversations sending back to back for ``seconds``, and how
    many requests failed on the connection (each is retried once)."""
    done = failed = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=sessions + 10, max_keepalive_connections=sessions + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(n: int) -> None:
            nonlocal done, failed
            i = 0
            headers = {**HEADERS, "x-microcompact-session": f"{tag}-{n}"}
            while time.perf_counter() < deadline and i < len(histories[n]):
                try:
                    response = await client.post(f"{url}/v1/messages", content=histories[n][i], headers=headers)
                except httpx.TransportError:
                    failed += 1
                    if failed > 2 * sessions:
                        raise
                    continue
                if response.status_code != 200:
                    raise SystemExit(f"bench_proxy: {url} answered {response.status_code}")
                done += 1
                i += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(sessions)))
        return done / (time.perf_counter() - t0), failed


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def table(title: str, head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print(f"\n{title}")
    print(row(head, widths))
    print(row(["-" * w for w in widths], widths))
    for r in rows:
        print(row(r, widths))


# --------------------------------------------------------------------------- the engine step in-process


def breakdown(system: str, histories: list[list[dict[str, Any]]], db: str, profile: bool) -> None:
    """The engine step on ``histories`` in this process, phase by phase (median ms), a router alone on its
    store and a shared one side by side (request by request, so both see the same machine load)."""
    from microcompact.router import SessionRouter
    from microcompact.server.anthropic_format import AnthropicFormat
    from microcompact.server.compaction import Compaction
    from microcompact.server.metrics import Metrics
    from microcompact.server.run import proxy_config
    from microcompact.server.view import unchanged
    from microcompact.store import open_store

    provider = AnthropicFormat()
    profiler = cProfile.Profile()
    # "alternating": two shared routers (two processes) on one store taking turns on one conversation,
    # so every request finds the session written by the other: the cost of reloading it.
    names = ("alone", "shared", "alternating", "alternating'")
    stores = {name: open_store(db) for name in names}
    routers = {
        name: SessionRouter(proxy_config(None, CONTEXT_LIMIT), store=stores[name], shared=name != "alone")
        for name in names
    }
    steps = {name: Compaction(routers[name], Metrics()) for name in names}
    phases = {name: {"parse": [], "prepare": [], "serialize": [], "follow-up": [], "lock": []} for name in names}
    tag = time.time_ns()
    for i, messages in enumerate(histories):
        raw = body(system, messages)
        turn = names[:2] if i % 2 else names[1::-1]
        for name in (*turn, names[2 + i % 2]):
            compaction, router, key = steps[name], routers[name], f"breakdown-{name.rstrip(chr(39))}-{tag}"
            t0 = time.perf_counter()
            parsed = orjson.loads(raw)
            history = provider.history(parsed)
            t1 = time.perf_counter()
            prepared = compaction.prepare(provider, parsed, key, history)
            t2 = time.perf_counter()
            if not unchanged(history, prepared.messages):
                orjson.dumps({**parsed, "messages": prepared.messages})
            t3 = time.perf_counter()
            compaction.answered(prepared, len(raw) // 4)
            compaction.follow_up(key)
            t4 = time.perf_counter()
            with router.lock(key):
                pass
            t5 = time.perf_counter()
            if i:  # the first request builds the session: reported by the replays, not here
                for phase, took in zip(phases[name], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                    phases[name][phase].append(took)
    if profile:  # apart from the timed requests: the profiler slows what it watches
        compaction, key = steps["shared"], f"breakdown-profiled-{tag}"
        for i, messages in enumerate(histories):
            parsed = orjson.loads(body(system, messages))
            if i:
                profiler.enable()
            prepared = compaction.prepare(provider, parsed, key, provider.history(parsed))
            profiler.disable()
            compaction.answered(prepared, None)
            compaction.follow_up(key)
    for name in names:
        routers[name].close()
        stores[name].close()
    for phase, values in phases["alternating'"].items():
        phases["alternating"][phase] += values
    table(
        f"engine step in-process, {len(histories) - 1} requests on the largest history (median ms)",
        ["router", "parse+check", "prepare (route, sync, passes, view)", "serialize view", "follow-up", "empty lock()"],
        [[name, *(ms(statistics.median(v)) for v in phases[name].values())] for name in names[:3]],
    )
    if profile:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(18)
        print("\ncProfile of Compaction.prepare (shared router), top 18 by cumulative time:")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


# --------------------------------------------------------------------------- the tables


def added_cells(r: dict[str, list[float]], modes: list[str], skip_first: bool = False) -> list[str]:
    """Added p50 and p99 of each compacting mode, in ``modes`` order."""
    start = 1 if skip_first else 0
    return [ms(pct(r[f"{m} added"][start:], q)) for m in modes for q in (50, 99)]


def added_heads(modes: list[str]) -> list[str]:
    names = {"compact": "added", "shared": "shared added", VARIANT: "variant added", NOISE: "noise added"}
    return [f"{names[m]} p{q}" for m in modes for q in (50, 99)]


def replays(client: httpx.Client, proxies: dict[str, Child], modes: list[str], quick: bool) -> None:
    """The shared Claude Code sessions, each request through every proxy in turn."""
    rows = []
    files = sorted(NORMALIZED.glob("cc_*.jsonl"))
    for path in files[:2] if quick else files:
        bodies = claude_code_requests(path)
        r = paired(client, proxies, bodies, f"replay-{path.stem}")
        kb = statistics.median(len(b) for b in bodies) / 1024
        peak = f"{max(r['occupancy']):.1f}" if r["occupancy"] else "-"
        rows.append(
            [path.stem, str(len(bodies)), f"{kb:.0f}", ms(pct(r["passthrough s"], 50)), *added_cells(r, modes), peak]
        )
    table(
        "Claude Code sessions replayed (Anthropic API, full history resent each request)",
        ["session", "requests", "body KB p50", "passthrough p50", *added_heads(modes), "peak occ %"],
        rows,
    )


def synthetic_table(
    client: httpx.Client,
    proxies: dict[str, Child],
    modes: list[str],
    sizes: list[int],
    rounds: int,
    quick: bool,
    outputs: list[str],
    skip: set[str],
) -> tuple[str, list[list[dict[str, Any]]]] | None:
    """Synthetic histories of several sizes (unless skipped); the largest one's further histories, for the
    streaming table."""
    streamed = 8 if quick else 20
    rows = []
    largest: tuple[str, list[list[dict[str, Any]]]] | None = None
    for size in sizes:
        system, histories = synthetic(size, rounds + streamed, outputs)
        largest = (system, histories[rounds + 1 :])  # the largest size's go on streaming
        if "synthetic" in skip:
            continue
        bodies = [body(system, h) for h in histories[: rounds + 1]]
        r = paired(client, proxies, bodies, f"synthetic-{size}")
        first = [ms(r[f"{m} s"][0] - r["passthrough s"][0]) for m in modes if m not in ("shared", NOISE)]
        rows.append(
            [
                f"{size // 1000}K",
                f"{len(bodies[-1]) / 1024:.0f}",
                ms(pct(r["passthrough s"][1:], 50)),
                *added_cells(r, modes, skip_first=True),
                *first,
                f"{r['occupancy'][-1]:.1f}" if r["occupancy"] else "-",
            ]
        )
    if rows:
        firsts = [
            "first request added" if m == "compact" else f"{m} first added" for m in modes if m not in ("shared", NOISE)
        ]
        table(
            f"synthetic histories: {rounds} requests after the first, each one tool round trip more",
            ["tokens", "body KB", "passthrough p50", *added_heads(modes), *firsts, "occ %"],
            rows,
        )
    return largest


def streaming(
    client: httpx.Client, proxies: dict[str, Child], largest: tuple[str, list[list[dict[str, Any]]]], size: int
) -> None:
    """Time to first byte at the largest size: the same conversations, going on, every proxy in turn."""
    system, histories = largest
    modes = list(proxies)
    firsts: dict[str, list[float]] = {m: [] for m in modes}
    for i, history in enumerate(histories):
        content = body(system, history, stream=True)
        for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
            firsts[mode].append(ttfb(client, proxies[mode].url, content, f"synthetic-{size}-{mode}"))
    added = {m: [a - b for a, b in zip(firsts[m], firsts["passthrough"], strict=True)] for m in modes}
    table(
        f"streaming time to first byte, {size // 1000}K-token history, {len(histories)} requests",
        ["proxy", "ttfb p50", "added p50", "added p99"],
        [[m, ms(pct(firsts[m], 50)), ms(pct(added[m], 50)), ms(pct(added[m], 99))] for m in modes],
    )


def throughput_table(proxies: dict[str, Child], quick: bool, outputs: list[str]) -> None:
    """50 concurrent conversations through each proxy, and the memory per idle conversation."""
    sessions, seconds = 50, (4.0 if quick else 8.0)
    rss_before = proxies["compact"].rss_kb()
    system, histories = synthetic(20_000, 60, outputs)
    pre = [[body(system, h) for h in histories] for _ in range(sessions)]
    rows = []
    for mode in proxies:
        rps, failed = asyncio.run(throughput(proxies[mode].url, sessions, seconds, pre, f"rps-{mode}"))
        alive = "yes" if proxies[mode].process.poll() is None else "NO"
        rows.append([mode, f"{rps:.0f}", str(failed), alive])
    rss_after = proxies["compact"].rss_kb()
    table(
        f"{sessions} concurrent conversations (~20K tokens each, growing), {seconds:g} s per proxy",
        ["proxy", "requests/s", "connection errors (retried)", "process alive"],
        rows,
    )
    print(
        f"\nmemory: the compacting proxy grew by {(rss_after - rss_before) / 1024:.1f} MB for {sessions} "
        f"conversations left idle (~20-35K tokens each): {(rss_after - rss_before) / sessions:.0f} KB per "
        "idle conversation (resident set; includes allocator growth from serving them)"
    )


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (about a minute)")
    parser.add_argument("--db", help="a PostgreSQL DSN for the proxies' stores (default: fresh SQLite files)")
    parser.add_argument("--sizes", default="10000,50000,150000", help="synthetic history sizes, tokens")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--variant-switch-interval",
        type=float,
        metavar="MS",
        help="add a fourth proxy, the compacting one with this interpreter switch interval (ms), measured "
        "side by side with the others (request by request, so both see the same machine load)",
    )
    parser.add_argument(
        "--variant-src",
        metavar="DIR",
        help="add a fourth proxy, the compacting one running the package in DIR (another checkout's src/)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated sections to leave out: replays, synthetic, routes, streaming, throughput, breakdown",
    )
    parser.add_argument(
        "--noise-floor",
        action="store_true",
        help="add a second passthrough proxy, measured like the others: its added p50/p99 over the first is "
        "what the machine's load alone adds (on a shared machine, the floor under every other p99)",
    )
    parser.add_argument("--serve", choices=(*MODES, VARIANT, NOISE), help=argparse.SUPPRESS)
    parser.add_argument("--switch-interval", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--upstream-url", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        serve_upstream()
        return
    if args.serve:
        serve(args.serve, args.upstream_url, args.store, args.switch_interval)
        return

    logging.getLogger("microcompact").setLevel(logging.ERROR)  # the breakdown's passes log warnings
    quick = args.quick
    sizes = [int(s) for s in args.sizes.split(",")]
    rounds = 12 if quick else 40
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    # The proxies' home (their session salt) in the work folder, inherited by every child: never ~/.microcompact.
    os.environ["MICROCOMPACT_HOME"] = str(workdir / "home")
    started = time.perf_counter()
    upstream = Child("--upstream")
    proxies: dict[str, Child] = {}
    skip = set(filter(None, args.skip.split(",")))
    variant = args.variant_switch_interval is not None or args.variant_src is not None
    modes = (*MODES, VARIANT) if variant else MODES
    modes = (*modes, NOISE) if args.noise_floor else modes
    try:
        for mode in modes:
            db = args.db or str(workdir / f"{mode}.db")
            extra: list[str] = []
            if mode == VARIANT and args.variant_switch_interval is not None:
                extra += ["--switch-interval", str(args.variant_switch_interval / 1000)]
            if mode == VARIANT and args.variant_src is not None:
                extra += ["--src", args.variant_src]
            src = args.variant_src if mode == VARIANT else None
            proxies[mode] = Child("--serve", mode, "--upstream-url", upstream.url, "--store", db, *extra, src=src)
        if variant:
            print(
                f"bench_proxy: variant = the compacting proxy with switch interval "
                f"{args.variant_switch_interval if args.variant_switch_interval is not None else 'default'} ms"
                f", package from {args.variant_src or ROOT / 'src'} (compact: serve's default switch interval, "
                f"{ROOT / 'src'})"
            )
        client = httpx.Client(timeout=120)
        outputs = tool_outputs()
        print(
            f"bench_proxy: proxies on {'PostgreSQL' if args.db else 'SQLite'}, context limit {CONTEXT_LIMIT:,}, "
            f"scripted upstream without latency; times in ms"
        )

        added_modes = [m for m in proxies if m != "passthrough"]
        if "replays" not in skip:
            replays(client, proxies, added_modes, quick)
        largest = synthetic_table(client, proxies, added_modes, sizes, rounds, quick, outputs, skip)
        if "routes" not in skip:  # the same tool loop in chat, Anthropic, Responses and Gemini shape
            urls = {m: proxies[m].url for m in ("passthrough", "compact")}
            route_rounds = 8 if quick else 20
            table(
                f"API routes: one tool loop in each API's shape, {route_rounds} requests after the first per row "
                "(plain, then streamed: time to first byte), compact minus passthrough",
                [
                    "route",
                    "tokens",
                    "body KB",
                    "passthrough p50",
                    "added p50",
                    "added p99",
                    "SSE ttfb added p50",
                    "p99",
                ],
                proxy_routes.route_rows(client, urls, sizes, route_rounds, outputs, pct, ms),
            )
        if "streaming" not in skip and largest is not None:
            streaming(client, proxies, largest, sizes[-1])
        if "throughput" not in skip:
            throughput_table(proxies, quick, outputs)
        client.close()
    finally:
        for p in proxies.values():
            p.stop()
        upstream.stop()

    if "breakdown" not in skip:
        system, histories = synthetic(sizes[-1], 10 if quick else 20, outputs)
        breakdown(system, histories, args.db or str(workdir / "breakdown.db"), profile=not args.no_profile)
    print(f"\nbench_proxy: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
