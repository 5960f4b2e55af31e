"""What ``summarizer: upstream`` costs: the same tasks as ``bench_proxy_cost.py`` (Claude Code, an openai SDK
loop), direct, through ``serve`` with its defaults (extractive summaries) and through
``serve --summarizer upstream``, whose summary requests go to the same scripted upstream on the client's
credential and are priced there like any request (cache read, write, input, output).

    PYTHONPATH=src:tests python bench/bench_upstream_summary.py                 # 24k and the SDK loop
    PYTHONPATH=src:tests python bench/bench_upstream_summary.py --rows sdk      # only the SDK rows

The upstream answers a summary request (the one ending with microcompact's instruction) with a note on
each turn it lists, naming the turn's step; it tallies those requests apart ("summ calls",
their dollars in "cost $"), so "folds" and the main figures count the agent's requests only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench")]

from bench_proxy_cost import (  # noqa: E402
    ANTHROPIC,
    OPENAI,
    SDK_WINDOW,
    WINDOW,
    CostSteps,
    PricedUpstream,
    Row,
    Tally,
    sdk_loop,
    served_args,
    stop,
    table,
)
from support.claude_code import run_claude, unavailable_reason  # noqa: E402
from support.serve_process import ServeProcess  # noqa: E402
from upstream import Reply, text  # noqa: E402
from upstream.recorded import RecordedRequest  # noqa: E402

INSTRUCTION = "[microcompact] This message comes from microcompact"
LISTED = re.compile(r"^E(\d+): the assistant turn that begins “Step (\d+)\.”", re.MULTILINE)


def is_summary(record: RecordedRequest) -> bool:
    messages = record.body.get("messages") if isinstance(record.body, dict) else None
    return bool(messages) and INSTRUCTION in json.dumps(messages[-1], ensure_ascii=False)


class Summaries:
    """The summary requests' tally: calls and dollars at the main model's prices."""

    def __init__(self, prices: str) -> None:
        self.prices = prices
        self.calls = 0
        self.dollars = 0.0

    def add(self, read: int, write: int, uncached: int, output: int) -> None:
        self.calls += 1
        if self.prices == "anthropic":
            p = ANTHROPIC
            cost = read * p["read"] + write * p["write"] + uncached * p["input"] + output * p["output"]
        else:
            cost = read * OPENAI["read"] + uncached * OPENAI["input"] + output * OPENAI["output"]
        self.dollars += cost / 1e6


class NotesSteps(CostSteps):
    """The cost bench's steps, and notes for microcompact's summary requests."""

    def __call__(self, request: RecordedRequest) -> Reply:
        if is_summary(request):
            asked = request.body["messages"][-1]["content"]
            shown = asked if isinstance(asked, str) else asked[0]["text"]
            blocks = ["### Goal\nRun the numbered steps with the Bash tool until they are done."]
            for label, step in LISTED.findall(shown):
                blocks.append(
                    f"### E{label}\nWork done: Step {step} ran with the Bash tool.\n"
                    f"Findings: step {step} finished cleanly and step {step} printed its numbers.\n"
                    f"Next: run the step after step {step}."
                )
            return text("\n".join(blocks))
        return super().__call__(request)


class SummaryPricedUpstream(PricedUpstream):
    """The priced upstream, with summary requests tallied apart from the agent's."""

    def __init__(self, tally: Tally, summaries: Summaries, **options: Any) -> None:
        super().__init__(tally, **options)
        self.summaries = summaries

    def _count(self, record: RecordedRequest, prompt: int, read: int, write: int, output: int) -> None:
        if is_summary(record):
            self.summaries.add(read, write, prompt - read - write, output)
            return
        super()._count(record, prompt, read, write, output)


def serve_options(home: Path, route: str, flag: str, upstream: str, window: int) -> list[str]:
    options = served_args(home, flag, upstream, window)
    return [*options, "--summarizer", "upstream"] if route == "serve-upstream" else options


def claude_row(task: str, steps: int, lines: int, route: str, work: Path) -> Row:
    tally, summaries = Tally(), Summaries("anthropic")
    upstream = SummaryPricedUpstream(tally, summaries, context_window=WINDOW)
    upstream.script = NotesSteps(task.replace("k", ""), steps, lines, tally)
    home = work / f"{task}-{route}"
    home.mkdir(parents=True)
    started = time.monotonic()
    served: ServeProcess | None = None
    with upstream:
        try:
            base = upstream.base_url
            if route != "direct":
                options = serve_options(home, route, "--anthropic-upstream", base, WINDOW)
                served = ServeProcess(home, *options).start()
                base = served.base_url
            run = run_claude(
                base,
                "Run the numbered steps with the Bash tool until they are done.",
                workdir=home / "work",
                home=home / "claude",
                max_turns=steps + 20,
                timeout=3600,
            )
        finally:
            if served is not None:
                stop(served)
    row = Row(task, route, tally, time.monotonic() - started, run.ok)
    row.summarizer_calls, row.summarizer_cost = summaries.calls, summaries.dollars
    if not run.ok:
        print(f"  {task} {route}: Claude Code did not finish: {run.stderr[-500:] or run.stdout[-500:]}", flush=True)
    return row


def sdk_rows(work: Path, routes: list[str], steps: int = 48) -> list[Row]:
    rows = []
    for route in routes:
        tally, summaries = Tally(), Summaries("openai")
        upstream = SummaryPricedUpstream(tally, summaries)
        upstream.script = NotesSteps("sdk", steps, 3000, tally)
        home = work / f"sdk-{route}"
        home.mkdir(parents=True)
        started = time.monotonic()
        with upstream:
            served = None
            base = upstream.openai_base_url
            if route != "direct":
                options = serve_options(home, route, "--openai-upstream", upstream.openai_base_url, SDK_WINDOW)
                served = ServeProcess(home, *options).start()
                base = f"{served.base_url}/v1"
            try:
                ok = sdk_loop(base, steps)
            finally:
                if served is not None:
                    stop(served)
        row = Row("sdk-24k", route, tally, time.monotonic() - started, ok, prices="openai")
        row.summarizer_calls, row.summarizer_cost = summaries.calls, summaries.dollars
        rows.append(row)
    return rows


ROUTES = ("direct", "serve", "serve-upstream")
TASKS = {"24k": (50, 3000), "8k": (150, 1000), "smoke": (4, 3000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="claude,sdk", help="claude, sdk, or both (comma-separated)")
    parser.add_argument("--tasks", default="24k")
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores)")
    args = parser.parse_args()
    kinds, routes = set(args.rows.split(",")), args.routes.split(",")
    work = Path(tempfile.mkdtemp(prefix="mc-bench-upstream-"))
    rows: list[Row] = []
    try:
        if "claude" in kinds:
            reason = unavailable_reason()
            if reason:
                print(f"Claude Code rows skipped: {reason}", flush=True)
            else:
                for task in args.tasks.split(","):
                    steps, lines = TASKS[task]
                    for route in routes:
                        rows.append(claude_row(task, steps, lines, route, work))
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
        if "sdk" in kinds:
            rows += sdk_rows(work, routes)
        print(table(rows))
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
