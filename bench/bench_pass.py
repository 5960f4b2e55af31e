"""Engine time per micro-compaction pass, summarizer excluded, for transcripts of ~10K, ~100K and ~1M tokens.

Run: ``.venv/bin/python bench/bench_pass.py`` (``make bench``). Prints figures; asserts nothing.

Targets: median engine time at 1M tokens / median at 10K tokens < 2 (pass cost independent of transcript
length), and < 5 ms per pass at 1M tokens.

Method
------
* Synthetic agent sessions from one seeded stream of turns (same figures every run): a system prompt, then
  turns of a user message, 1-20 assistant tool-calling iterations (bash, read_file, grep, str_replace; 1-3
  calls each) whose results are log-uniform 50-3000 tokens (edit confirmations smaller), and a closing answer.
* Every message is counted once, with the real tokenizer (``TokenCounter()``: tiktoken o200k_base), before
  anything is timed; ``Session.append``/``Ledger.append`` reuse that cached count, so no timed pass counts.
* One fixed config for all sizes (``CONFIG``). The default tail (``target_ratio`` 0.2 of a 100K threshold =
  20K tokens) is larger than the whole 10K transcript, so ``target_ratio`` is 0.04 (4K-token tail) and the
  piece budget ``micro_compact_max_exchange_tokens`` 4000, so that the 10K transcript has a middle in which
  both turn- and request-mode passes find something to absorb. Section E repeats A with the default 8000.
* Sizes run side by side, interleaved round by round in one process, after a warm-up round. Round ``r`` builds a
  fresh Session of each size from turn ``r * passes`` of the stream on, so every size absorbs the very same
  exchanges and only the length of transcript behind them differs. A round's first pass is "cold" (no
  cursor yet: the engine recovers it from the transcript) and is reported apart. Before every timed pass the
  next turns of the stream are appended (untimed) until the transcript is back at its size, as an agent
  would between passes.
* Engine time = ``PassResult.record['engine_ms']`` (pass time minus the summarizer's time, as the engine
  measures it), cross-checked with ``perf_counter`` around the hook call minus the summarizer's own measured
  time ("wall-summ"; it also covers what the engine does after stopping its clock: telemetry, defrag check).
* Sections: A finalize_turn, B before_request (zero-cost stub); C real ExtractiveSummarizer; D one long
  autonomous turn (a single user message); E default piece budget; F/G cProfile of the timed passes at 10K
  vs 1M, flagging any function whose time or call count per pass grows with transcript length.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import logging
import math
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from microcompact.config import parse_config
from microcompact.session import Session
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.tokens import TOKENS_KEY, TokenCounter

SIZES = (("10K", 10_000), ("100K", 100_000), ("1M", 1_000_000))
RATIO_TARGET = 2.0
MS_TARGET = 5.0

CONFIG = parse_config(
    {
        "compression": {
            "enabled": True,
            "micro_compact": True,
            "threshold": 0.5,
            "target_ratio": 0.04,  # tail budget 0.04 * 0.5 * 200_000 = 4_000 tokens
            "micro_compact_every_n_turns": 1,
            "micro_compact_max_exchange_tokens": 4_000,
            "micro_compact_min_reclaim_tokens": 0,
            "micro_compact_defrag_threshold_tokens": 2_000,
        },
        "model": {"context_length": 200_000},
    },
    source="bench",
)

Message = dict[str, Any]


# --------------------------------------------------------------------------- summarizers


class StubSummarizer:
    """Zero-cost summarizer: a fixed short summary; times itself so the harness can subtract it."""

    name = "stub"
    SUMMARY = "- Worked through the earlier requests; files and commands are in the messages that follow."

    def __init__(self) -> None:
        self.elapsed = 0.0

    def merge(self, summary: str, exchange: list[dict]) -> str:
        t = time.perf_counter()
        out = self.SUMMARY
        self.elapsed += time.perf_counter() - t
        return out

    def condense(self, summary: str, target_tokens: int) -> str:
        t = time.perf_counter()
        out = self.SUMMARY
        self.elapsed += time.perf_counter() - t
        return out

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        return self.SUMMARY


class TimedSummarizer:
    """Wraps a real summarizer and measures its time (for the cross-check)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.elapsed = 0.0

    def merge(self, summary: str, exchange: list[dict]) -> str:
        t = time.perf_counter()
        try:
            return self.inner.merge(summary, exchange)
        finally:
            self.elapsed += time.perf_counter() - t

    def condense(self, summary: str, target_tokens: int) -> str:
        t = time.perf_counter()
        try:
            return self.inner.condense(summary, target_tokens)
        finally:
            self.elapsed += time.perf_counter() - t

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        return self.inner.batch(summary, messages, focus)


# --------------------------------------------------------------------------- synthetic transcripts

_WORDS = (
    "config session ledger token window cursor summary marker parser loader handler request response "
    "client server cache index record buffer stream reader writer schema model field value item entry "
    "batch queue worker task job result error retry timeout limit offset status state event hook plugin "
    "registry manager service router view form user account order invoice payment price report metric "
    "counter gauge trace span logger path file folder module package build test fixture mock patch"
).split()
_CLASSES = (
    "Session Ledger TokenCounter Window Parser Loader Handler Client Server Cache Index Record Buffer "
    "Schema Model Worker Registry Manager Service Router Report Metric Tracer"
).split()
_ERRORS = (
    "ValueError KeyError TypeError RuntimeError AssertionError AttributeError IndexError FileNotFoundError TimeoutError"
).split()
_DIRS = ("src/app", "src/app/core", "src/app/api", "src/app/db", "tests", "tests/unit", "scripts", "lib")


class Gen:
    """Deterministic generator of agent-transcript text and messages."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.call_seq = 0
        self.files = [f"{self.r.choice(_DIRS)}/{self.w()}_{self.w()}.py" for _ in range(120)]
        self.code = [self._code_line() for _ in range(6000)]
        self.logs = [self._log_line() for _ in range(3000)]

    def w(self) -> str:
        return self.r.choice(_WORDS)

    def ident(self) -> str:
        return f"{self.w()}_{self.w()}" if self.r.random() < 0.6 else self.w()

    def _code_line(self) -> str:
        r = self.r
        ind = "    " * r.randint(0, 3)
        k = r.randrange(10)
        if k == 0:
            return (
                f"{ind}def {self.ident()}(self, {self.ident()}: {r.choice(_CLASSES)}, "
                f"{self.w()}: int = {r.randint(0, 99)}) -> {r.choice(_CLASSES)}:"
            )
        if k == 1:
            return f"{ind}class {r.choice(_CLASSES)}{r.choice(_CLASSES)}({r.choice(_CLASSES)}):"
        if k == 2:
            return f"{ind}if {self.ident()} is None or len({self.w()}) > {r.randint(1, 4096)}:"
        if k == 3:
            return (
                f'{ind}    raise {r.choice(_ERRORS)}(f"{self.w()} {self.w()} {{{self.ident()}!r}} is not {self.w()}")'
            )
        if k == 4:
            return f"{ind}return {self.ident()}.{self.ident()}({self.w()}, {self.w()}={self.ident()})"
        if k == 5:
            return f"{ind}# {' '.join(self.w() for _ in range(r.randint(3, 12)))}"
        if k == 6:
            return f"{ind}for {self.w()} in self.{self.ident()}[{r.randint(0, 9)}:]:"
        if k == 7:
            return ""
        return f'{ind}{self.ident()} = {self.ident()}({self.w()}, {r.randint(0, 10_000)}, "{self.w()}")'

    def _log_line(self) -> str:
        r = self.r
        k = r.randrange(6)
        if k == 0:
            test_id = f"tests/test_{self.w()}.py::test_{self.ident()}"  # drawn before the outcome, as always
            return f"{test_id} {r.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'])}"
        if k == 1:
            return f"E       {r.choice(_ERRORS)}: assert {r.randint(0, 99)} == {r.randint(0, 99)}"
        if k == 2:
            return f"{r.choice(self.files)}:{r.randint(1, 900)}: {self._code_line().strip()}"
        if k == 3:
            return (
                f"2025-0{r.randint(1, 9)}-{r.randint(10, 28)} {r.randint(10, 23)}:{r.randint(10, 59)}:"
                f"{r.randint(10, 59)} {r.choice(['INFO', 'DEBUG', 'WARNING', 'ERROR'])} {self.w()}.{self.w()}: "
                f"{' '.join(self.w() for _ in range(r.randint(3, 10)))}"
            )
        if k == 4:
            return f'  File "/work/{r.choice(self.files)}", line {r.randint(1, 900)}, in {self.ident()}'
        return " ".join(self.w() for _ in range(r.randint(4, 14)))

    def lines(self, pool: list[str], tokens: int) -> str:
        """About ``tokens`` tokens of consecutive lines from ``pool`` (about 3.4 characters a token)."""
        want = tokens * 3.4
        start = self.r.randrange(len(pool))
        out: list[str] = []
        size = 0
        i = start
        while size < want:
            line = pool[i % len(pool)]
            out.append(line)
            size += len(line) + 1
            i += 1
        return "\n".join(out)

    def prose(self, tokens: int) -> str:
        parts: list[str] = []
        size = 0
        while size < tokens * 4.5:
            s = " ".join(self.w() for _ in range(self.r.randint(5, 16))).capitalize()
            if self.r.random() < 0.3:
                s += f" in `{self.r.choice(self.files)}`"
            s += self.r.choice([".", ".", ".", "?", "; I'll fix it."])
            parts.append(s)
            size += len(s) + 1
        return " ".join(parts)

    def loguniform(self, lo: int, hi: int) -> int:
        return int(math.exp(self.r.uniform(math.log(lo), math.log(hi))))

    def user(self) -> Message:
        n = self.loguniform(15, 300)
        text = self.prose(n)
        if self.r.random() < 0.15:
            text += "\n\n```\n" + self.lines(self.logs, self.loguniform(50, 400)) + "\n```"
        return {"role": "user", "content": text}

    def _call(self) -> tuple[dict, str]:
        """(tool call, its result text)."""
        self.call_seq += 1
        cid = f"call_{self.call_seq:07d}"
        kind = self.r.choices(("bash", "read_file", "grep", "str_replace"), weights=(4, 4, 2, 2))[0]
        path = self.r.choice(self.files)
        size = self.loguniform(50, 3000)
        if kind == "bash":
            args = {
                "command": self.r.choice(
                    [
                        f"python -m pytest -q tests/test_{self.w()}.py",
                        f"ruff check {path}",
                        "git diff --stat",
                        f"python {path} --{self.w()}",
                        f"ls -la {self.r.choice(_DIRS)}",
                    ]
                )
            }
            result = self.lines(self.logs, size) + f"\n[exit code: {self.r.choice([0, 0, 0, 1, 2])}]"
        elif kind == "read_file":
            args = {"path": path}
            body = self.lines(self.code, size)
            result = "\n".join(f"{i + 1:5d}\t{line}" for i, line in enumerate(body.split("\n")))
        elif kind == "grep":
            args = {"pattern": f"def {self.ident()}", "path": self.r.choice(_DIRS)}
            result = self.lines(self.logs, size)
        else:
            args = {
                "command": "str_replace",
                "path": path,
                "old_str": self.lines(self.code, self.loguniform(20, 300)),
                "new_str": self.lines(self.code, self.loguniform(20, 300)),
            }
            result = f"The file {path} has been edited. " + self.prose(self.loguniform(15, 60))
        call = {"id": cid, "type": "function", "function": {"name": kind, "arguments": json.dumps(args)}}
        return call, result

    def turn(self, with_user: bool = True) -> list[Message]:
        msgs: list[Message] = [self.user()] if with_user else []
        iterations = min(20, 1 + int(self.r.expovariate(1 / 3.5)))
        for _ in range(iterations):
            ncalls = self.r.choices((1, 2, 3), weights=(80, 15, 5))[0]
            calls = [self._call() for _ in range(ncalls)]
            content = self.prose(self.loguniform(10, 150)) if self.r.random() < 0.7 else None
            msgs.append({"role": "assistant", "content": content, "tool_calls": [c for c, _ in calls]})
            msgs.extend({"role": "tool", "tool_call_id": c["id"], "content": res} for c, res in calls)
        msgs.append({"role": "assistant", "content": self.prose(self.loguniform(40, 400))})
        return msgs


def system_prompt(gen: Gen) -> Message:
    return {"role": "system", "content": "You are a coding agent working in a repository. " + gen.prose(700)}


@dataclass
class Corpus:
    """One pre-counted stream of turns shared by all sizes.

    A session of size S starting at turn ``offset`` is the system prompt plus the turns from ``offset`` on
    until about S tokens; top-ups continue the same stream. So at every size a round absorbs the very same
    exchanges (the oldest ones, from ``offset`` on) and sizes differ only in how much transcript lies behind.
    """

    system: Message
    turns: list[list[Message]]
    turn_tokens: list[int]

    def base(self, target: int, offset: int) -> tuple[list[Message], int]:
        """(messages, index of the next turn): the turn boundary closest to ``target`` tokens."""
        msgs, total, i = [self.system], self.system[TOKENS_KEY], offset
        while total < target:
            t = self.turn_tokens[i % len(self.turns)]
            if total + t - target > target - total and len(msgs) > 1:
                break
            msgs += self.turns[i % len(self.turns)]
            total += t
            i += 1
        return msgs, i

    def turn(self, i: int) -> list[Message]:
        return self.turns[i % len(self.turns)]


def build_corpus(counter: TokenCounter, seed: int, max_offset: int, passes: int) -> tuple[Corpus, float]:
    """Every message is counted once here with the real tokenizer (``TokenCounter.annotate``, as
    ``Ledger.append`` does); later appends reuse the cached count, so no timed pass ever counts the
    transcript."""
    t0 = time.perf_counter()
    gen = Gen(seed)
    system = counter.annotate(system_prompt(gen))
    turns: list[list[Message]] = []
    turn_tokens: list[int] = []

    def add() -> None:
        turn = [counter.annotate(m) for m in gen.turn()]
        turns.append(turn)
        turn_tokens.append(sum(m[TOKENS_KEY] for m in turn))

    largest = max(t for _, t in SIZES)
    while len(turns) <= max_offset or sum(turn_tokens[max_offset:]) < largest:
        add()
    for _ in range(3 * passes + 10):  # stream left for the top-ups of the largest size
        add()
    return Corpus(system, turns, turn_tokens), time.perf_counter() - t0


# --------------------------------------------------------------------------- measurement


@dataclass
class Samples:
    engine: list[float] = field(default_factory=list)  # PassResult.record['engine_ms'] (summed per call)
    wall: list[float] = field(default_factory=list)  # perf_counter around the call minus summarizer time
    summ: list[float] = field(default_factory=list)  # summarizer's own time per call
    cold_engine: list[float] = field(default_factory=list)
    outcomes: Counter = field(default_factory=Counter)
    absorbed_tokens: list[int] = field(default_factory=list)
    messages: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


class Scenario:
    """One (size, mode, summarizer, transcript shape) combination, run round by round."""

    def __init__(
        self,
        label: str,
        target: int,
        corpus: Corpus,
        counter: TokenCounter,
        mode: str,
        make_summarizer: Callable[[], Any],
        long_turn: bool = False,
        config: Any = None,
    ) -> None:
        self.label, self.target, self.mode = label, target, mode
        self.config = config or CONFIG
        self.corpus = corpus
        self.counter = counter
        self.make_summarizer = make_summarizer
        self.long_turn = long_turn  # one autonomous turn: only the first user message is kept
        self.next_turn = 0
        self.samples = Samples()

    def _shape(self, msgs: list[Message], first: bool) -> list[Message]:
        if not self.long_turn:
            return msgs
        out, seen_user = [], not first
        for m in msgs:
            if m["role"] == "user":
                if seen_user:
                    continue
                seen_user = True
            out.append(m)
        return out

    def _topup(self, sess: Session) -> None:
        while sess.tokens < self.target:
            for m in self._shape(self.corpus.turn(self.next_turn), first=False):
                sess.append(m)  # pre-counted: the cached count is reused
            self.next_turn += 1

    def _call(self, sess: Session) -> tuple[list, float, float]:
        summ = sess.summarizer
        before = summ.elapsed
        t = time.perf_counter()
        # The micro engine alone: at 1M tokens Session.before_request would (rightly) run batch compaction.
        res = sess.finalize_turn() if self.mode == "turn" else sess.micro.before_request(sess.ledger)
        wall = (time.perf_counter() - t) * 1000
        return res, wall, (summ.elapsed - before) * 1000

    def run_round(
        self, passes: int, offset: int, record: bool = True, profiler: cProfile.Profile | None = None
    ) -> None:
        base, self.next_turn = self.corpus.base(self.target, offset)
        sess = Session(
            self.config, self.make_summarizer(), counter=self.counter, messages=self._shape(base, first=True)
        )
        res, _, _ = self._call(sess)  # cold: the engine recovers its cursor from the transcript
        if record and res:
            self.samples.cold_engine.append(sum(r.record["engine_ms"] for r in res))
        s = self.samples
        for _ in range(passes):
            self._topup(sess)
            tokens, messages = sess.tokens, len(sess.ledger)
            if profiler:
                profiler.enable()
            res, wall, summ_ms = self._call(sess)
            if profiler:
                profiler.disable()
            if not record:
                continue
            s.tokens.append(tokens)
            s.messages.append(messages)
            if not res:
                s.outcomes["no pass"] += 1
                continue
            for r in res:
                s.outcomes[r.outcome] += 1
                if r.outcome == "absorbed":
                    s.absorbed_tokens.append(r.record["exchange_tokens"])
            s.engine.append(sum(r.record["engine_ms"] for r in res))
            s.wall.append(wall - summ_ms)
            s.summ.append(summ_ms)


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[max(0, math.ceil(q * len(ys)) - 1)] if ys else float("nan")


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run_interleaved(scenarios: list[Scenario], rounds: int, passes: int) -> None:
    for sc in scenarios:  # warm-up: imports, regex and tokenizer caches, allocator
        sc.run_round(min(passes, 5), offset=rounds * passes, record=False)
    for r in range(rounds):
        for sc in scenarios:
            gc.collect()
            sc.run_round(passes, offset=r * passes)


# --------------------------------------------------------------------------- reporting


def fmt(x: float) -> str:
    return f"{x:7.3f}" if x == x else "    n/a"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def table(title: str, scenarios: list[Scenario], extra_summ: bool = False) -> dict[str, float]:
    print(f"\n{title}")
    head = (
        f"  {'size':>5} {'tokens':>9} {'msgs':>5} {'n':>4} | engine_ms {'median':>7} {'p95':>7} {'max':>7}"
        f" | wall-summ {'median':>7} {'p95':>7} {'max':>7} | {'absorbed/pass':>13}"
    )
    if extra_summ:
        head += f" | summ_ms {'median':>7}"
    print(head)
    medians = {}
    for sc in scenarios:
        s = sc.samples
        medians[sc.label] = med(s.engine)
        medians[sc.label + ":wall"] = med(s.wall)
        line = (
            f"  {sc.label:>5} {int(med(s.tokens)):>9,} {int(med(s.messages)):>5} {len(s.engine):>4} | "
            f"          {fmt(med(s.engine))} {fmt(pct(s.engine, 0.95))} {fmt(max(s.engine, default=float('nan')))}"
            f" |           {fmt(med(s.wall))} {fmt(pct(s.wall, 0.95))} {fmt(max(s.wall, default=float('nan')))}"
            f" | {int(med(s.absorbed_tokens)) if s.absorbed_tokens else 0:>7,} tok   "
        )
        if extra_summ:
            line += f" |         {fmt(med(s.summ))}"
        print(line)
    outcomes = "; ".join(
        f"{sc.label}: " + ", ".join(f"{k} {v}" for k, v in sorted(sc.samples.outcomes.items())) for sc in scenarios
    )
    print(f"  outcomes: {outcomes}")
    small, large = scenarios[0].label, scenarios[-1].label
    r_eng = medians[large] / medians[small]
    r_wall = medians[large + ":wall"] / medians[small + ":wall"]
    print(
        f"  ratio median {large}/{small}: engine_ms {r_eng:.2f}, wall-summ {r_wall:.2f}  "
        f"(target < {RATIO_TARGET:g}: {verdict(r_eng < RATIO_TARGET)} / {verdict(r_wall < RATIO_TARGET)})"
    )
    print(
        f"  median at {large}: engine_ms {medians[large]:.3f} ms, wall-summ {medians[large + ':wall']:.3f} ms  "
        f"(target < {MS_TARGET:g} ms: {verdict(medians[large] < MS_TARGET)} / "
        f"{verdict(medians[large + ':wall'] < MS_TARGET)})"
    )
    return medians


def profile_compare(corpus: Corpus, counter: TokenCounter, passes: int, rounds: int, long_turn: bool, top: int) -> None:
    """cProfile the timed passes only, at the smallest and the largest size; compare per pass."""
    stats: dict[str, dict] = {}
    n_passes: dict[str, int] = {}
    for label, target in (SIZES[0], SIZES[-1]):
        sc = Scenario(label, target, corpus, counter, "turn", StubSummarizer, long_turn=long_turn)
        sc.run_round(3, offset=rounds * passes, record=False)
        prof = cProfile.Profile()
        for r in range(rounds):
            sc.run_round(passes, offset=r * passes, profiler=prof)
        n_passes[label] = rounds * passes
        stats[label] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    small, large = SIZES[0][0], SIZES[-1][0]

    def per_pass(label: str) -> dict[tuple, tuple[float, float, float]]:
        n = n_passes[label]
        return {k: (v[1] / n, v[2] * 1000 / n, v[3] * 1000 / n) for k, v in stats[label].items()}

    a, b = per_pass(small), per_pass(large)

    def name(k: tuple) -> str:
        file, line, func = k
        if file == "~":
            return func
        parts = Path(file).parts
        short = "/".join(parts[-2:]) if "microcompact" in parts else Path(file).name
        return f"{short}:{line}({func})"

    total_a = sum(v[1] for v in a.values())
    total_b = sum(v[1] for v in b.values())
    print(
        f"  profiled per pass (cProfile on, so slower than above): {small} {total_a:.3f} ms, {large} {total_b:.3f} ms"
    )
    print(
        f"  top {top} by own time at {large}:   calls/pass {small:>6} {large:>7} | own ms/pass {small:>6} "
        f"{large:>7} | cum ms/pass {large:>7}"
    )
    for k in sorted(b, key=lambda k: -b[k][1])[:top]:
        ca, ta, _ = a.get(k, (0.0, 0.0, 0.0))
        cb, tb, cub = b[k]
        print(f"    {name(k)[:58]:<58} {ca:>9.1f} {cb:>7.1f} | {ta:>14.3f} {tb:>7.3f} | {cub:>15.3f}")
    grown = []
    for k, (cb, tb, _cub) in b.items():
        ca, ta, _ = a.get(k, (0.0, 0.0, 0.0))
        if tb >= 0.01 and (tb > 3 * max(ta, 1e-3) or cb > 3 * max(ca, 1.0)):
            grown.append((tb - ta, k, ca, cb, ta, tb))
    if grown:
        print(f"  grows with transcript length ({small} -> {large}, own time >= 0.01 ms/pass and > 3x):")
        for _, k, ca, cb, ta, tb in sorted(grown, reverse=True)[:top]:
            print(f"    {name(k)[:58]:<58} calls/pass {ca:>8.1f} -> {cb:>8.1f}, own ms/pass {ta:.3f} -> {tb:.3f}")
    else:
        print(
            f"  nothing grows with transcript length ({small} -> {large}: no function with own time "
            f">= 0.01 ms/pass that grew > 3x in time or calls)"
        )


def cold_table(scenarios: list[Scenario]) -> None:
    cells = ", ".join(f"{sc.label} {med(sc.samples.cold_engine):.3f}" for sc in scenarios)
    print(f"  first pass of a fresh Session (cursor recovered from the transcript), median engine_ms: {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="fresh sessions per size (default 10)")
    ap.add_argument("--passes", type=int, default=20, help="timed passes per round (default 20)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-extras", action="store_true", help="only the stub runs (no extractive, long turn, profile)")
    args = ap.parse_args()

    logging.basicConfig(level=logging.WARNING, format="  [log] %(levelname)s %(name)s: %(message)s")
    t_start = time.perf_counter()
    counter = TokenCounter()
    try:
        tt_version = metadata.version("tiktoken")
    except metadata.PackageNotFoundError:
        tt_version = "?"
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("microcompact: engine time per micro-compaction pass (summarizer excluded)")
    print(
        f"machine: {platform.system()} {platform.machine()}, {cpu or platform.processor() or '?'}, "
        f"{os.cpu_count()} logical cores ({affinity} usable); Python {platform.python_version()} "
        f"({platform.python_implementation()}); tiktoken {tt_version}; tokenizer {counter.name}"
    )
    c = CONFIG.compression
    print(
        f"config (all sizes): context_length {CONFIG.model.context_length:,}, threshold {c.threshold}, "
        f"target_ratio {c.target_ratio} -> tail budget {CONFIG.tail_budget_tokens():,} tokens; "
        f"max_exchange_tokens {c.micro_compact_max_exchange_tokens:,}; "
        f"every_n_turns {c.micro_compact_every_n_turns}; min_reclaim {c.micro_compact_min_reclaim_tokens}; "
        f"defrag threshold {c.micro_compact_defrag_threshold_tokens:,}"
    )

    corpus, build_s = build_corpus(counter, args.seed, max_offset=(args.rounds + 1) * args.passes, passes=args.passes)
    print(
        f"transcripts: one seeded stream (seed {args.seed}) of {len(corpus.turns)} synthetic agent turns, "
        f"{sum(corpus.turn_tokens):,} tokens, every message counted once with {counter.name} "
        f"({build_s:.1f} s); a size-S session = system prompt + turns from the round's offset up to ~S tokens:"
    )
    for label, target in SIZES:
        msgs, _ = corpus.base(target, 0)
        tool = sorted(m[TOKENS_KEY] for m in msgs if m["role"] == "tool")
        print(
            f"  {label:>5}: {sum(m[TOKENS_KEY] for m in msgs):>9,} tokens, {len(msgs):>5} messages, "
            f"{sum(m['role'] == 'user' for m in msgs):>4} user turns, {len(tool):>5} tool results "
            f"(tokens min {tool[0]}, median {tool[len(tool) // 2]}, max {tool[-1]})  [round 0]"
        )
    it = [sum(1 for m in t if m["role"] == "assistant") - 1 for t in corpus.turns]
    print(
        f"  turn size tokens median {int(statistics.median(corpus.turn_tokens)):,}, max {max(corpus.turn_tokens):,}; "
        f"iterations per turn median {int(statistics.median(it))}, max {max(it)}"
    )
    print(
        f"method: {args.rounds} rounds x {args.passes} timed passes per size, sizes interleaved, after a warm-up "
        f"round; round r starts at turn r*{args.passes} of the stream, so all sizes absorb the same exchanges; "
        f"each round = fresh Session + 1 cold pass (reported apart); the next turns of the stream are appended "
        f"(untimed) before each pass to hold the size"
    )

    def scenarios(mode: str, make: Callable[[], Any], long_turn: bool = False, config: Any = None) -> list[Scenario]:
        return [Scenario(label, target, corpus, counter, mode, make, long_turn, config) for label, target in SIZES]

    turn = scenarios("turn", StubSummarizer)
    request = scenarios("request", StubSummarizer)
    run_interleaved(turn + request, args.rounds, args.passes)
    med_a = table("A. finalize_turn passes, zero-cost stub summarizer", turn)
    cold_table(turn)
    med_b = table("B. before_request passes (long-turn pieces across turns), zero-cost stub summarizer", request)
    cold_table(request)

    if not args.no_extras:
        extractive = scenarios("turn", lambda: TimedSummarizer(ExtractiveSummarizer(counter.count_text)))
        run_interleaved(extractive, max(1, args.rounds // 2), args.passes)
        table(
            "C. finalize_turn passes, real ExtractiveSummarizer (its own time excluded; summ_ms shown)",
            extractive,
            extra_summ=True,
        )

        long_turn = scenarios("turn", StubSummarizer, long_turn=True)
        run_interleaved(long_turn, max(1, args.rounds // 2), args.passes)
        table(
            "D. finalize_turn passes on ONE long autonomous turn (only the first user message kept), stub;\n"
            "   here the exchange at the cursor runs to the end of the transcript",
            long_turn,
        )

        default_budget = CONFIG.with_overrides(compression={"micro_compact_max_exchange_tokens": 8_000})
        budget8k = scenarios("turn", StubSummarizer, config=default_budget)
        run_interleaved(budget8k, max(1, args.rounds // 2), args.passes)
        table(
            "E. finalize_turn passes, stub, with the DEFAULT piece budget max_exchange_tokens 8000 "
            "(everything else as above)",
            budget8k,
        )

        print(
            "\nF. cProfile of the timed finalize_turn passes (stub), per pass, "
            f"{SIZES[0][0]} vs {SIZES[-1][0]}, normal turns"
        )
        profile_compare(corpus, counter, args.passes, 3, long_turn=False, top=14)
        print("\nG. same, one long autonomous turn (scenario D)")
        profile_compare(corpus, counter, args.passes, 3, long_turn=True, top=6)

    small, large = SIZES[0][0], SIZES[-1][0]
    print("\nSUMMARY (zero-cost stub; engine_ms = PassResult.record['engine_ms'])")
    for name, m in (("finalize_turn", med_a), ("before_request", med_b)):
        ratio = m[large] / m[small]
        print(
            f"  {name:<14}: median {small} {m[small]:.3f} ms, {large} {m[large]:.3f} ms; ratio {ratio:.2f} "
            f"(< {RATIO_TARGET:g}: {verdict(ratio < RATIO_TARGET)}); {large} < {MS_TARGET:g} ms: "
            f"{verdict(m[large] < MS_TARGET)}"
        )
    print(f"\ntotal benchmark time {time.perf_counter() - t_start:.1f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
