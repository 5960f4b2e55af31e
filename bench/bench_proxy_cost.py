"""What the proxy costs with the provider's prompt cache: Claude Code and an OpenAI SDK loop, direct and
through ``microcompact serve``, priced from what a scripted upstream with the real cache rules reported.

    PYTHONPATH=src:tests python bench/bench_proxy_cost.py            # every row (about 20-40 min on 2 busy cores)
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows sdk # only the SDK rows
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows gemini  # the Gemini loop, 2.5 Pro and Flash
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows sdk --sdk-routes direct,serve,serve-inline
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows reactive --reactive-tasks 24k-reactive,8k-reactive,sdk
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows slow   # the 48-step task, 2 s summarizer, 1 s answers
    PYTHONPATH=src:tests python bench/bench_proxy_cost.py --rows reactive --config my.yaml  # serve rows over my.yaml

The upstream (tests/upstream, one per run) implements Anthropic's cache: breakpoints, a 20-block lookback,
a 5-minute TTL refreshed on every hit, a 1,024-token minimum; reads are billed at 0.1x input and writes at
1.25x. It refuses a prompt over the 200K window as the API does ("prompt is too long: N tokens > M
maximum"), so the direct run includes Claude Code's own compaction. Its OpenAI side reports automatic
prefix caching (``cached_tokens``), priced at 0.1x with the rest at 1x, or at 1.25x (the write premium).

Tasks (Claude Code 2.1.x from npm, ``claude -p``; the upstream counts its steps itself, since a compacting
proxy shortens the history): ``24k``, 50 Bash steps of ~24 KB outputs; ``8k``, 150 steps of ~8 KB. Rows:
direct, ``serve`` with its defaults (inline passes with the extractive summarizer; ``--config`` setting
``micro_compact_background: true`` gives the background ones), inline passes set explicitly, and a scripted
model summarizer of 2 s per call (serve's default for it: background passes) with model answers of 1 s. The
``-idle`` tasks are the same steps in three user turns (``claude -p`` then ``--continue``) with idle gaps
longer than the cache's life between them: the TTL is
scaled to 15 s (upstream and proxy) and the gaps are 20 s, so a cold cache costs what it would after 5
minutes without the bench waiting for them. The SDK loop: 48 tool steps of ~24 KB through the openai SDK
(no window refusal: a 400K-window model).

The reactive rows (``--rows reactive``; tasks ``24k-reactive``, 48 steps of ~24 KB, ``8k-reactive``, 150 of
~8 KB, and ``sdk``, the SDK loop with its Bash tool run for real) script an agent that needs what earlier
outputs showed (``tests/upstream/reactive.py``): each step's output carries a key and an id computed by the
shell; the reply after it must quote that key and, for some steps, the id printed 8 or 25 steps back (quoted
nowhere before), and a value the prompt no longer shows is re-fetched by running its command again. They
print, beside the cost (re-fetches included), the agent's turns (the model requests it answered, each one a
wait for the user), its re-fetches, those of the previous step's output (the one it was working on), and
values it gave up on after three re-fetches in one step. Claude Code's own compaction summary, in the direct
rows, keeps no value.

The slow rows (``--rows slow``; ``24k-reactive``, the 48-step task, direct and ``serve-model2s``: a 2 s model
summarizer and 1 s model answers) print, beside the cost and the peak, how many requests ``serve`` held over
0.5 s and over 1 s before forwarding them (its ``/metrics`` histogram of proxy overhead, read before it
stops): a request held that long waited on the summarizer, which a schedule that keeps ahead of it never does.
From ``serve``'s log they also count its passes by who wrote the summary (the model, or the offline summary
absorbing instead) and its batch prunes: a prune means the window came within reach of the batch
threshold, the micro schedule having fallen behind.

"steps seen" is min/mean of the tool results a request carried verbatim (after the first five requests):
how much of the recent work the model still saw whole. Cost is the main model's prompt and output at
Claude Sonnet / GPT-5 list prices, plus the summarizer's calls (a model summarizer at $0.80/$4 per
million tokens; the offline one is free). "folds" counts main
requests whose messages do not extend the previous request's (a rewrite of the cached prefix: a fold of
the proxy, or Claude Code's own compaction).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from cost_gemini import GEMINI_MODELS, GEMINI_WINDOW, gemini_cost, gemini_run  # noqa: E402  (this folder)
from cost_upstream import (  # noqa: E402  (this folder)
    TTL,
    CostSteps,
    Folds,
    PricedUpstream,
    SummarizerUpstream,
    Tally,
    proxy_waits,
)
from support.claude_code import run_claude, unavailable_reason  # noqa: E402
from support.serve_process import ServeProcess  # noqa: E402
from upstream.reactive import ReactiveStats, ReactiveSteps  # noqa: E402

WINDOW = 200_000
SDK_WINDOW = 400_000
ANTHROPIC = {"input": 3.00, "read": 0.30, "write": 3.75, "output": 15.00}
OPENAI = {"input": 1.25, "read": 0.125, "output": 10.00}
SUMMARIZER = {"input": 0.80, "output": 4.00}


@dataclass
class Row:
    task: str
    route: str
    tally: Tally
    seconds: float
    ok: bool
    summarizer_cost: float = 0.0
    summarizer_calls: int = 0
    prices: str = "anthropic"
    agent: ReactiveStats | None = None  # the reactive agent's turns and re-fetches (its rows only)
    waits: dict[float, int] | None = None  # requests serve held over 0.5 s / 1 s (its rows)
    folds: Folds | None = None  # serve's passes by summary (model / offline) and batch prunes (its rows)

    def cost(self) -> float:
        t = self.tally
        if self.prices.startswith("gemini"):  # implicit caching: reads at the read price, the rest plain input
            return gemini_cost(t, self.prices) + self.summarizer_cost
        if self.prices == "anthropic":
            p = ANTHROPIC
            main = t.read * p["read"] + t.write * p["write"] + t.uncached * p["input"] + t.output * p["output"]
        else:
            write = OPENAI["input"] * (1.25 if self.prices == "openai-write" else 1.0)
            main = t.read * OPENAI["read"] + (t.prompt - t.read) * write + t.output * OPENAI["output"]
        return main / 1e6 + self.summarizer_cost


def stop(served: ServeProcess) -> None:
    """Ctrl-C, as a user stops it (a background fold of a slow summarizer may still be running: it gets
    two minutes), then SIGKILL."""
    try:
        served.stop(timeout=120)
    except subprocess.TimeoutExpired:
        served.kill()


def served_args(home: Path, flag: str, upstream: str, window: int) -> list[str]:
    """``serve``'s arguments for a row: its store and log in ``home``, the upstream by ``flag``, the window."""
    where = ["--db", str(home / "s.db"), "--log", str(home / "proxy.log")]
    return [*where, flag, upstream, "--context-limit", str(window)]


# Settings every serve row gets over its own (--config): a YAML mapping of config sections.
EXTRA_CONFIG: dict[str, Any] = {}


def serve_config(
    home: Path, route: str, summarizer_url: str | None, ttl: float = TTL, prices: str | None = None
) -> list[str]:
    """The proxy's config for a ``route`` (``-inline``: inline passes; ``-tail3``: ``min_tail_messages: 3``,
    folds keep the two newest steps as before the low-water mark ruled): ``prices`` names the pricing preset
    the user configured (None: the API's default preset); ``ttl`` is the idle rows' scaled cache life."""
    compression = []
    if "inline" in route:
        compression.append("  micro_compact_background: false")
    if "tail3" in route:
        compression.append("  min_tail_messages: 3")
    lines = ["compression:", *compression] if compression else []
    if ttl != TTL:  # the idle rows' scaled clock: the proxy's cache life is the upstream's
        lines += ["pricing:", f"  preset: {prices or 'anthropic'}", f"  ttl_seconds: {ttl}"]
    elif prices:
        lines += ["pricing:", f"  preset: {prices}"]
    if summarizer_url:
        lines += [
            "auxiliary:",
            "  compression:",
            "    provider: openai",
            "    model: scripted-summarizer",
            f"    base_url: {summarizer_url}",
            "    api_key_env: BENCH_SUMMARIZER_KEY",
            "    timeout: 60",
        ]
    if EXTRA_CONFIG:  # --config: the user's settings over the row's (a section's keys merged)
        merged: dict[str, Any] = yaml.safe_load("\n".join(lines)) or {} if lines else {}
        for section, values in EXTRA_CONFIG.items():
            if isinstance(values, dict) and isinstance(merged.get(section), dict):
                merged[section] = {**merged[section], **values}
            else:
                merged[section] = values
        lines = yaml.safe_dump(merged, sort_keys=False).splitlines()
    if not lines:
        return []
    path = home / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return ["--config", str(path)]


def claude_row(task: str, steps: int, lines: int, route: str, work: Path) -> Row:
    """One Claude Code run of ``task`` by ``route``: direct, serve, serve-inline, serve-model2s(-inline).
    An ``-idle`` task is IDLE_TURNS user turns with an idle gap longer than the (scaled) TTL between them."""
    tally = Tally()
    model = "model2s" in route
    idle = task.endswith("-idle")
    ttl = IDLE_TTL if idle else TTL
    upstream = PricedUpstream(tally, ttl=ttl, context_window=WINDOW, latency=1.0 if model else 0.0)
    per_turn = -(-steps // IDLE_TURNS) if idle else None
    run_id = task.split("-")[0].replace("k", "")
    agent = ReactiveSteps(f"r{run_id}", steps, lines) if task.endswith("-reactive") else None
    upstream.script = agent or CostSteps(run_id, steps, lines, tally, per_turn)
    # The reactive agent's re-fetches are turns too: the limit leaves room for two per step.
    max_turns = 3 * steps + 20 if agent else (per_turn or steps) + 20
    summarizer = SummarizerUpstream(2.0) if model else None
    served: ServeProcess | None = None
    waits: dict[float, int] | None = None
    home = work / f"{task}-{route}"
    home.mkdir(parents=True)
    started = time.monotonic()
    with upstream:
        if summarizer is not None:
            summarizer.start()
        try:
            base = upstream.base_url
            if route != "direct":
                summarizer_url = summarizer.openai_base_url if summarizer else None
                options = serve_config(home, route, summarizer_url, ttl)
                served = ServeProcess(home, *options, *served_args(home, "--anthropic-upstream", base, WINDOW)).start()
                base = served.base_url
            run = run_claude(
                base,
                "Run the numbered steps with the Bash tool until they are done.",
                workdir=home / "work",
                home=home / "claude",
                max_turns=max_turns,
                timeout=3600,
            )
            for _ in range(IDLE_TURNS - 1 if idle else 0):
                time.sleep(IDLE_GAP)  # the user is away longer than the cache lives
                run = run_claude(
                    base,
                    "Go on with the numbered steps.",
                    workdir=home / "work",
                    home=home / "claude",
                    max_turns=max_turns,
                    continue_session=True,
                    timeout=3600,
                )
        finally:
            if served is not None:
                waits = proxy_waits(served.base_url)  # before it stops: its own counts
                stop(served)
            if summarizer is not None:
                summarizer.close()
    row = Row(task, route, tally, time.monotonic() - started, run.ok, waits=waits)
    row.folds = Folds.of_log(home / "proxy.log") if route != "direct" else None
    if agent is not None:
        row.agent, tally.compactions = agent.stats, agent.stats.compactions
    if summarizer is not None:
        row.summarizer_calls = summarizer.calls
        row.summarizer_cost = (
            summarizer.input_tokens * SUMMARIZER["input"] + summarizer.output_tokens * SUMMARIZER["output"]
        ) / 1e6
    if not run.ok:
        print(f"  {task} {route}: Claude Code did not finish: {run.stderr[-500:] or run.stdout[-500:]}", flush=True)
    return row


def sdk_loop(base_url: str, steps: int) -> bool:
    """An agent loop on the openai SDK: a tool call per step, each answered with ~24 KB of output."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object", "properties": {}}}}]
    messages: list[Any] = [
        {"role": "system", "content": "You run shell steps. " + "Rules. " * 400},
        {"role": "user", "content": "Run the numbered steps with the Bash tool until they are done."},
    ]
    for n in range(steps + 1):
        reply = client.chat.completions.create(
            model="gpt-bench", messages=messages, tools=tools, extra_headers={"x-session-id": "sdk-bench"}
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return n == steps
        output = "\n".join(str(i) for i in range(n * 1_000_000 + 1, n * 1_000_000 + 3001))
        messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": output})
    return False


def sdk_reactive_loop(base_url: str, steps: int) -> bool:
    """The SDK loop with a real tool: each call's ``command`` runs in Bash and its stdout is the tool result,
    so the reactive agent's keys reach the conversation only through what the command printed. Re-fetches
    are turns: the loop allows two per step."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": schema}}]
    messages: list[Any] = [
        {"role": "system", "content": "You run shell steps. " + "Rules. " * 400},
        {"role": "user", "content": "Run the numbered steps with the Bash tool until they are done."},
    ]
    for _ in range(3 * steps + 20):
        reply = client.chat.completions.create(
            model="gpt-bench", messages=messages, tools=tools, extra_headers={"x-session-id": "sdk-bench"}
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return f"all {steps} steps are done" in (message.content or "")
        call = message.tool_calls[0]
        command = json.loads(call.function.arguments)["command"]  # type: ignore[union-attr]
        ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True, timeout=60)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": ran.stdout})
    return False


def sdk_rows(work: Path, routes: list[str], steps: int = 48, reactive: bool = False) -> list[Row]:
    """The SDK loop by each route (``reactive``: the reactive agent, with its Bash tool run for real).
    Direct runs once and is priced both ways; through the proxy, each price preset is its own run with that
    preset configured, as a user on that model would (the proxy folds by the prices it is told)."""
    rows = []
    task = "sdk-24k-reactive" if reactive else "sdk-24k"
    for route in routes:
        for prices in ("openai", "openai-write") if route != "direct" else (None,):
            tally = Tally()
            upstream = PricedUpstream(tally)
            agent = ReactiveSteps("sdk", steps, 3000) if reactive else None
            upstream.script = agent or CostSteps("sdk", steps, 3000, tally)
            home = work / f"{task}-{route}-{prices or 'direct'}"
            home.mkdir(parents=True)
            started = time.monotonic()
            with upstream:
                served = None
                base = upstream.openai_base_url
                if route != "direct":
                    options = serve_config(home, route, None, prices=prices)
                    args = served_args(home, "--openai-upstream", upstream.openai_base_url, SDK_WINDOW)
                    served = ServeProcess(home, *options, *args).start()
                    base = f"{served.base_url}/v1"
                try:
                    ok = (sdk_reactive_loop if reactive else sdk_loop)(base, steps)
                finally:
                    if served is not None:
                        stop(served)
            seconds = time.monotonic() - started
            for priced in (prices,) if prices else ("openai", "openai-write"):
                rows.append(Row(task, route, tally, seconds, ok, prices=priced, agent=agent and agent.stats))
    return rows


def gemini_rows(work: Path, routes: list[str], steps: int = 48) -> list[Row]:
    """The Gemini generateContent loop by each route, once per model (each run priced at its model's list
    prices; the proxy prices each request by its model too: its own dollars are printed beside)."""
    rows = []
    for model in GEMINI_MODELS:
        for route in routes:
            tally, seconds, ok, headers = gemini_run(work, route, model, steps)
            rows.append(Row("gemini-24k", route, tally, seconds, ok, prices=model))
            said = (
                f", proxy says ${float(headers['x-microcompact-cost']):.2f}" if "x-microcompact-cost" in headers else ""
            )
            print(f"  gemini-24k {route} {model}: ${rows[-1].cost():.2f}{said} in {seconds:.0f} s", flush=True)
    return rows


def seen(counts: list[int]) -> str:
    """``min/mean`` tool results a request carried verbatim, past the first five requests (the session's
    start, before anything could be folded)."""
    later = counts[5:] or counts
    return f"{min(later)}/{sum(later) / len(later):.1f}" if later else "-"


def table(rows: list[Row]) -> str:
    head = [
        "task",
        "route",
        "prices",
        "requests",
        "prompt M",
        "read M",
        "written M",
        "peak %",
        "steps seen",
        "refused",
        "CC compactions",
        "folds",
        "summ calls",
        "cost $",
        "x direct",
        "ok",
        "s",
    ]
    direct = {(r.task, r.prices): r.cost() for r in rows if r.route == "direct"}
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        t = r.tally
        window = SDK_WINDOW if r.task.startswith("sdk") else GEMINI_WINDOW if r.task.startswith("gemini") else WINDOW
        base = direct.get((r.task, r.prices))
        written = t.write if r.prices == "anthropic" else t.prompt - t.read  # Gemini: the rest, plain input
        cells = [
            r.task, r.route, r.prices, str(t.requests), f"{t.prompt / 1e6:.2f}", f"{t.read / 1e6:.2f}",
            f"{written / 1e6:.2f}", f"{100 * t.peak / window:.0f}", seen(t.steps_seen), str(t.refused),
            str(t.compactions),
            str(t.folds), str(r.summarizer_calls), f"{r.cost():.2f}",
            f"{r.cost() / base:.2f}" if base else "-", "yes" if r.ok else "NO", f"{r.seconds:.0f}",
        ]  # fmt: skip
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def reactive_table(rows: list[Row]) -> str:
    """The reactive agent's rows: its turns (model requests it answered) and re-fetches beside the cost, each
    against the direct row of the same task and prices."""
    head = "task | route | prices | steps | turns | turns x direct | re-fetches | of previous step | given up"
    head += " | requests | peak % | CC compactions | folds | cost $ | x direct | ok | s"
    direct = {(r.task, r.prices): r for r in rows if r.route == "direct"}
    lines = [head, " | ".join("---" for _ in head.split(" | "))]
    for r in rows:
        t, a, base = r.tally, r.agent or ReactiveStats(), direct.get((r.task, r.prices))
        window = SDK_WINDOW if r.task.startswith("sdk") else WINDOW
        turns_x = f"{a.turns / base.agent.turns:.2f}" if base and base.agent and base.agent.turns else "-"
        cells = [
            r.task, r.route, r.prices, str(a.steps), str(a.turns), turns_x, str(a.refetches), str(a.previous),
            str(a.given_up), str(t.requests), f"{100 * t.peak / window:.0f}", str(t.compactions), str(t.folds),
            f"{r.cost():.2f}", f"{r.cost() / base.cost():.2f}" if base else "-", "yes" if r.ok else "NO",
            f"{r.seconds:.0f}",
        ]  # fmt: skip
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def slow_table(rows: list[Row]) -> str:
    """The slow-summarizer rows: a 2 s model summarizer and 1 s model answers through serve, against direct.
    "waited" counts requests serve held over 0.5 s and over 1 s before forwarding them (its own /metrics):
    a request over 0.5 s waited on the summarizer, which the schedule should never make it do."""
    head = "task | route | steps | turns | re-fetches | of previous step | requests | peak % | summ calls"
    head += " | model passes | offline passes | prunes | waited >0.5 s | waited >1 s | cost $ | x direct | ok | s"
    direct = {(r.task, r.prices): r for r in rows if r.route == "direct"}
    lines = [head, " | ".join("---" for _ in head.split(" | "))]
    for r in rows:
        t, a, base = r.tally, r.agent or ReactiveStats(), direct.get((r.task, r.prices))
        waits = [str(r.waits[b]) if r.waits else "-" for b in (0.5, 1.0)]
        f = r.folds
        folds = [str(n) for n in (f.model, f.offline, f.prunes)] if f else ["-"] * 3
        cells = [
            r.task, r.route, str(a.steps or "-"), str(a.turns or "-"), str(a.refetches), str(a.previous),
            str(t.requests), f"{100 * t.peak / WINDOW:.0f}", str(r.summarizer_calls), *folds, *waits, f"{r.cost():.2f}",
            f"{r.cost() / base.cost():.2f}" if base else "-", "yes" if r.ok else "NO", f"{r.seconds:.0f}",
        ]  # fmt: skip
        lines.append(" | ".join(cells))
    return "\n".join(lines)


TASKS = {
    "24k": (50, 3000),
    "8k": (150, 1000),
    "smoke": (4, 3000),
    "24k-idle": (50, 3000),
    "8k-idle": (150, 1000),
    "smoke-idle": (4, 3000),
    "24k-reactive": (48, 3000),
    "8k-reactive": (150, 1000),
    "smoke-reactive": (10, 3000),
}
SDK_STEPS = 48
ROUTES = ("direct", "serve", "serve-inline", "serve-model2s")  # and serve-tail3, on request
IDLE_ROUTES = ("direct", "serve")
REACTIVE_TASKS = ("24k-reactive", "8k-reactive")
SLOW_TASKS = ("24k-reactive",)  # the 48-step task, with a 2 s model summarizer and 1 s model answers
SLOW_ROUTES = ("direct", "serve-model2s")
# The idle tasks: IDLE_TURNS user turns, IDLE_GAP seconds apart, against a cache that lives IDLE_TTL
# seconds (upstream and proxy alike): the 5-minute TTL scaled down so the gaps take seconds, not minutes.
IDLE_TURNS = 3
IDLE_TTL = 15.0
IDLE_GAP = 20.0


def claude_rows(tasks: list[str], routes_of: dict[str, str], work: Path) -> list[Row]:
    """Claude Code's rows: each task by each of its routes (``routes_of``: by the task's kind)."""
    missing = unavailable_reason()
    if missing:
        print(f"Claude Code rows skipped: {missing}")
        return []
    rows = []
    for task in tasks:
        steps, lines = TASKS[task]
        for route in routes_of[task.split("-")[-1] if "-" in task else "plain"].split(","):
            rows.append(claude_row(task, steps, lines, route, work))
            print(f"  {task} {route}: ${rows[-1].cost():.2f} in {rows[-1].seconds:.0f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", default="claude,sdk,reactive", help="claude, sdk, reactive, slow, gemini (comma-separated)"
    )
    parser.add_argument("--gemini-routes", default="direct,serve", help="for the Gemini loop")
    parser.add_argument("--tasks", default="24k,8k,24k-idle,8k-idle")
    parser.add_argument("--routes", default=",".join(ROUTES), help="for the tasks without gaps (+ serve-tail3)")
    parser.add_argument("--idle-routes", default=",".join(IDLE_ROUTES), help="for the -idle tasks")
    parser.add_argument("--sdk-routes", default="direct,serve", help="direct, serve, serve-inline, serve-tail3")
    parser.add_argument(
        "--reactive-tasks", default=",".join(REACTIVE_TASKS), help="+ smoke-reactive; sdk: the SDK loop"
    )
    parser.add_argument("--reactive-routes", default="direct,serve", help="for Claude Code's reactive tasks")
    parser.add_argument("--slow-tasks", default=",".join(SLOW_TASKS), help="the slow rows' tasks (+ 24k, 8k)")
    parser.add_argument("--slow-routes", default=",".join(SLOW_ROUTES), help="the slow rows' routes (+ -inline)")
    parser.add_argument("--sdk-steps", type=int, default=SDK_STEPS, help="steps of the SDK loops")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores)")
    parser.add_argument("--config", type=Path, help="a YAML config merged into every serve row's (sections' keys)")
    args = parser.parse_args()
    if args.config is not None:
        if not args.config.is_file():
            raise SystemExit(f"bench_proxy_cost.py: --config: no file {args.config}")
        EXTRA_CONFIG.update(yaml.safe_load(args.config.read_text(encoding="utf-8")) or {})
    chosen = set(args.rows.split(","))
    os.environ.setdefault("BENCH_SUMMARIZER_KEY", "sk-bench-summarizer")  # the scripted summarizer takes any key
    work = Path(tempfile.mkdtemp(prefix="bench-cost-"))
    routes_of = {"plain": args.routes, "idle": args.idle_routes, "reactive": args.reactive_routes}
    rows: list[Row] = []
    reactive: list[Row] = []
    slow: list[Row] = []
    try:
        if "claude" in chosen:
            rows += claude_rows(args.tasks.split(","), routes_of, work)
        if "sdk" in chosen:
            rows += sdk_rows(work, args.sdk_routes.split(","), args.sdk_steps)
        if "gemini" in chosen:
            rows += gemini_rows(work, args.gemini_routes.split(","), args.sdk_steps)
        if "reactive" in chosen:
            tasks = args.reactive_tasks.split(",")
            reactive += claude_rows([t for t in tasks if t != "sdk"], routes_of, work)
            if "sdk" in tasks:
                reactive += sdk_rows(work, args.sdk_routes.split(","), args.sdk_steps, reactive=True)
        if "slow" in chosen:
            slow_routes = {kind: args.slow_routes for kind in ("plain", "reactive")}
            slow += claude_rows(args.slow_tasks.split(","), slow_routes, work)
        if rows:
            print(table(rows))
        if reactive:
            print(reactive_table(reactive))
        if slow:
            print(slow_table(slow))
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
