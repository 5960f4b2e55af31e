"""Property-based tests: the library's contract, checked on generated agent transcripts.

Every property drives a :class:`Session` the way an agent loop (or ``replay``) does: ``before_request`` before
each assistant message, ``finalize_turn`` before each user message and at the end, plus hypothesis-chosen
extra hook calls at arbitrary points (mid-iteration requests, interrupted turns). After *every* hook call
:class:`Driver` checks the invariants, so a property fails at the first hook that breaks one:

1. user messages of the input are in the transcript verbatim and in order (also after ``to_api``);
2. tool pairs intact, role sequence valid, and valid under ``to_api(strict_alternation=True)``;
3. at most one marker, a micro one, whose text holds the marker prefix once;
4. the head is identical to the input's; the tail protected before the hook ends the transcript after it;
plus: a hook that ran no pass or only failed ones (``summarize_failed``, ``exchange_skipped``,
``no_reclaim``, ``store_failed``) left the transcript exactly as it was; apart from the marker, the
transcript is a subsequence of the input (nothing changed, reordered or invented); the ledger's token
counts stay exact; no engine exception was swallowed (logged) by the hooks.

Properties 5-10 (determinism, no mutation, resume, off = absent, failures, defrag convergence) have their
own tests below, then focused examples (marker inside a long turn, reclaim gate, cadence, defrag vs tail).

Batch compaction is kept out of reach (see ``strategies.isolated_config_data``) while small tails (400-4000
tokens) and exchange budgets (256-8000) make passes, pieces of long turns and defrags happen. The token
counter is the byte estimator for speed; one property runs the real tiktoken counter, one the real
``ExtractiveSummarizer``. ``MC_PROPERTY_SCALE=10`` runs ten times as many examples.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

from microcompact.config import Config, parse_config
from microcompact.contract import role_sequence_errors, tool_pairing_errors, user_message_errors
from microcompact.messages import MARKER_PREFIX, content_text, is_marker, marker_body, marker_count, to_api
from microcompact.micro import micro_compact
from microcompact.replay import replay
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, TokenCounter, make_text_counter
from microcompact.window import protected_head, tail_start
from support.strategies import (
    Scenario,
    examples,
    head_of,
    isolated_config_data,
    long_turn_transcripts,
    micro_configs,
    same_head,
    scenarios,
    transcripts,
    units,
)

FAILED = {"summarize_failed", "exchange_skipped", "no_reclaim", "store_failed"}
PASS_OUTCOMES = {"absorbed", "summarize_failed", "exchange_skipped", "no_reclaim", "store_failed"}
DEFRAG_OUTCOMES = {"defrag", "defrag_failed"}

COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def estimate_counter() -> TokenCounter:
    return TokenCounter(EstimateCounter())


# --------------------------------------------------------------------------- summarizers for tests


class DigestSummarizer:
    """Deterministic and bounded: the last few lines of the old summary plus one digest line per exchange.

    Records what every ``merge`` call was given (as units) so tests can tell which messages were summarized.
    """

    name = "digest"

    def __init__(self, max_lines: int = 6) -> None:
        self.max_lines = max_lines
        self.calls: list[list[str]] = []
        self.condense_calls = 0

    def merge(self, summary: str, exchange: list[dict]) -> str:
        got = units(exchange)
        self.calls.append(got)
        roles = "".join(str(m.get("role"))[0] for m in exchange)
        digest = hashlib.sha1(f"{summary}|{','.join(got)}".encode()).hexdigest()[:10]
        line = f"- {len(exchange)} msgs [{roles[:24]}] {' '.join(got)[:100] or '-'} #{digest}"
        lines = [ln for ln in summary.splitlines() if ln.strip()][-(self.max_lines - 1) :]
        return "\n".join([*lines, line])

    def condense(self, summary: str, target_tokens: int) -> str:
        self.condense_calls += 1
        lines = summary.splitlines()
        return "\n".join(lines[len(lines) // 2 :]) or summary[:40]

    def seen(self) -> list[str]:
        return [u for call in self.calls for u in call]


class FlakySummarizer(DigestSummarizer):
    """Fails the merge calls whose (0-based) numbers are in ``fail_calls``, in one of several ways."""

    MODES = ("raise", "timeout", "none", "empty", "blank", "runaway", "not_text")

    def __init__(self, fail_calls: set[int] | None = None, mode: str = "raise", always: bool = False) -> None:
        super().__init__()
        self.fail_calls = fail_calls or set()
        self.mode = mode
        self.always = always
        self.n = 0
        self.failed: list[int] = []

    def merge(self, summary: str, exchange: list[dict]) -> Any:
        i = self.n
        self.n += 1
        if not (self.always or i in self.fail_calls):
            return super().merge(summary, exchange)
        self.failed.append(i)
        mode = self.mode
        if mode == "raise":
            raise RuntimeError("summarizer exploded")
        if mode == "timeout":
            raise TimeoutError("aux model timed out")
        if mode == "none":
            return None
        if mode == "empty":
            return ""
        if mode == "blank":
            return " \n\t "
        if mode == "runaway":
            return "word " * 200_000
        return 12345


class EchoSummarizer:
    """A model that never shortens: ``condense`` echoes its input, ``merge`` appends a lot every time."""

    name = "echo"

    def __init__(self, chunk_chars: int = 240) -> None:
        self.chunk_chars = chunk_chars
        self.merges = 0
        self.condenses = 0

    def merge(self, summary: str, exchange: list[dict]) -> str:
        self.merges += 1
        line = f"- exchange {self.merges}: " + " ".join(units(exchange))
        body = (line + " " + "detail " * self.chunk_chars)[: self.chunk_chars]
        return f"{summary}\n{body}" if summary else body

    def condense(self, summary: str, target_tokens: int) -> str:
        self.condenses += 1
        return summary


class SlowCondenser(DigestSummarizer):
    """A wordy model: ``merge`` appends ``lines_per_merge`` long bullets, ``condense`` keeps 3/4 of the lines.

    Its condensed output is clearly shorter (so the engine accepts it) yet can stay above the defrag
    threshold, so defrag also runs in hooks that absorb nothing, until the summary is small enough.
    """

    name = "slow-condenser"

    def __init__(self, lines_per_merge: int = 8) -> None:
        super().__init__()
        self.lines_per_merge = lines_per_merge

    def merge(self, summary: str, exchange: list[dict]) -> str:
        got = units(exchange)
        self.calls.append(got)
        new = [f"- {len(self.calls)}.{k} {' '.join(got)[:40]} " + "note " * 8 for k in range(self.lines_per_merge)]
        return "\n".join(([summary] if summary else []) + new)

    def condense(self, summary: str, target_tokens: int) -> str:
        self.condense_calls += 1
        lines = summary.splitlines()
        return "\n".join(lines[: max(1, len(lines) * 3 // 4)])


# --------------------------------------------------------------------------- the driver and its checks


def strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if not k.startswith("_")}


class _ErrorLog(logging.Handler):
    """Collects ERROR records of the ``microcompact`` logger: an engine bug swallowed by the hooks shows here."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "unexpectedly" in record.getMessage():  # not e.g. a store failure tests provoke
            self.records.append(record)


class Driver:
    """Drives a Session over ``source`` (the caller's messages) and checks the invariants at every hook.

    ``base`` is how many messages of ``source`` the session already holds (compacted) when the driver starts,
    for resumed sessions.
    """

    def __init__(
        self,
        session: Session,
        source: list[dict[str, Any]],
        *,
        base: int = 0,
        in_turn: bool = False,
        check: bool = True,
        settle: bool = False,
        clock: FakeClock | None = None,
        gaps: list[float] | None = None,
    ) -> None:
        self.settle = settle  # background mode: wait for the pass a hook started and apply it, then check
        self.clock = clock  # cache-aware mode: advanced by the next of ``gaps`` before every model request
        self.gaps = gaps or [0.0]
        self.s = session
        self.source = source
        self.appended = base
        self.in_turn = in_turn
        self.check = check
        self.calls: list[tuple[str, list[str]]] = []  # (hook, outcomes) per hook call
        self.results: list[Any] = []
        self.cfg = session.config.compression

    # -- driving

    def run(
        self, extras: dict[int, list[str]] | None = None, *, stop: int | None = None, finalize: bool = True
    ) -> Driver:
        extras = extras or {}
        stop = len(self.source) if stop is None else stop
        handler = _ErrorLog()
        logger = logging.getLogger("microcompact")
        level = logger.level
        if logger.getEffectiveLevel() > logging.ERROR:
            logger.setLevel(logging.ERROR)
        logger.addHandler(handler)
        try:
            while self.appended < stop:
                i = self.appended
                for hook in extras.get(i, ()):
                    self.hook(hook)
                m = self.source[i]
                role = m.get("role")
                if role == "user" and self.in_turn:
                    self.hook("turn")
                    self.in_turn = False
                if role == "assistant":
                    self.hook("request")
                    self.in_turn = True
                self.s.append(m)
                self.appended += 1
            if stop == len(self.source):
                for hook in extras.get(stop, ()):
                    self.hook(hook)
            if finalize and self.in_turn:
                self.hook("turn")
                self.in_turn = False
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        assert not handler.records, [r.getMessage() for r in handler.records]
        return self

    def hook(self, name: str) -> list[Any]:
        ledger = self.s.ledger
        msgs = ledger.messages
        before = snapshot(msgs) if self.check else None
        h = protected_head(msgs, ledger.tokens, self.s.config)
        t = tail_start(
            msgs,
            ledger.tokens,
            self.s.config.tail_budget_tokens(),
            min_messages=self.s.config.tail_min_messages(),
            floor=h,
        )
        tail = before[t:] if before is not None else None
        if name == "request":
            if self.clock is not None:
                self.clock.now += self.gaps[len(self.calls) % len(self.gaps)]
            res = self.s.before_request()
        elif name == "turn":
            res = self.s.finalize_turn()
        else:
            res = self.s.finalize_turn(completed=False)
        if self.settle:
            res = list(res) + self.s.drain()
        outcomes = [r.outcome for r in res]
        assert all(r.record.get("event") == "micro_compaction" for r in res), "batch compaction ran"
        self.calls.append((name, outcomes))
        self.results += res
        if self.check:
            self.check_invariants(name, before, tail, outcomes)
        return res

    # -- checks

    @property
    def transcript(self) -> list[dict[str, Any]]:
        return self.s.ledger.messages

    def check_invariants(
        self, name: str, before: list[dict[str, Any]], tail: list[dict[str, Any]], outcomes: list[str]
    ) -> None:
        after = self.transcript
        src = self.source[: self.appended]
        where = f"after {name} hook #{len(self.calls)} (outcomes {outcomes})"

        # The ledger's bookkeeping stays exact.
        led = self.s.ledger
        assert len(led.tokens) == len(after)
        assert led.total == sum(led.tokens), where
        assert all(m.get("_tokens") == n for m, n in zip(after, led.tokens, strict=True)), where

        # No pass, or only failed passes: the transcript is exactly as before.
        if not outcomes or set(outcomes) <= FAILED:
            assert after == before, f"{where}: transcript changed"

        # Property 3: at most one marker, a micro one, with its text once.
        markers = [i for i, m in enumerate(after) if is_marker(m)]
        assert len(markers) <= 1, f"{where}: markers at {markers}"
        assert marker_count(after, "micro") == len(markers) and marker_count(after, "batch") == 0
        for i in markers:
            text = content_text(after[i])
            assert text.count(MARKER_PREFIX) == 1, f"{where}: marker text duplicated"
            assert i + 1 == len(after) or after[i + 1].get("role") != "tool", where

        # Nothing but the marker is new: the other messages are input messages, unchanged, in order.
        rest = [strip(m) for m in after if not is_marker(m)]
        assert _is_subsequence(rest, src), f"{where}: a message was changed, reordered or invented"

        # Property 1: user messages verbatim and in order (and the helper agrees, also after to_api).
        assert [strip(m) for m in after if m.get("role") == "user"] == [m for m in src if m.get("role") == "user"]
        assert user_message_errors(src, after) == [], where
        strict = to_api(after, strict_alternation=True)
        assert user_message_errors(src, strict) == [], where

        # Property 2: pairing and role sequence, whenever the input so far is itself consistent.
        if not tool_pairing_errors(src):
            assert tool_pairing_errors(after) == [], where
            assert role_sequence_errors(after) == [], where
            assert role_sequence_errors(strict, strict_alternation=True) == [], where

        # Property 4: head and tail untouched.
        h = head_of(src, self.s.config, self.s.counter)
        assert same_head(after, src, h), f"{where}: head changed"
        if tail:
            assert after[len(after) - len(tail) :] == tail, f"{where}: protected tail changed"

    # -- helpers for properties

    def outcomes(self) -> list[str]:
        return [o for _, outs in self.calls for o in outs]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def snapshot(value: Any) -> Any:
    """A deep copy of JSON-shaped data (what a transcript is), compared with ``==`` after a hook: dicts and
    lists copied, immutable leaves shared, anything else by ``copy.deepcopy``. Every hook of every example
    copies the transcript, and ``copy.deepcopy`` spent more there than the passes it checks."""
    kind = type(value)
    if kind is dict:
        return {k: snapshot(v) for k, v in value.items()}
    if kind is list:
        return [snapshot(v) for v in value]
    if value is None or kind in (str, int, float, bool):
        return value
    return copy.deepcopy(value)


def _is_subsequence(small: list[Any], big: list[Any]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def make_session(config: Config, summarizer: Any, counter: TokenCounter | None = None, **kw: Any) -> Session:
    return Session(config, summarizer, counter=counter or estimate_counter(), session_id="test", **kw)


def input_units(messages: list[dict[str, Any]]) -> Counter[str]:
    return Counter(u for u in units(messages) if u != "USER")


# --------------------------------------------------------------------------- properties 1-4 (+ accounting)


@settings(max_examples=examples(60), **COMMON)
@given(scenario=scenarios(), cfg=micro_configs(), summary_lines=st.sampled_from([6, 40]))
def test_invariants_hold_at_every_hook(scenario: Scenario, cfg: dict[str, Any], summary_lines: int) -> None:
    """Properties 1-4 after every hook call, plus exact accounting of what was summarized.

    With a summarizer that never fails and no reclaim gate, every merge is committed, so the messages missing
    from the final transcript are exactly the ones the summarizer saw, each seen once, and it never saw a user
    message.
    """
    config = parse_config(cfg)
    summ = DigestSummarizer(summary_lines)  # 40 lines outgrow the smaller defrag thresholds
    d = Driver(make_session(config, summ), scenario.messages).run(scenario.extras)
    note(f"outcomes: {Counter(d.outcomes())}")

    seen = summ.seen()
    assert "USER" not in seen, "a user message was handed to the summarizer"
    assert len(seen) == len(set(seen)), f"summarized twice: {[u for u, c in Counter(seen).items() if c > 1]}"
    gone = input_units(scenario.messages) - input_units(d.transcript)
    assert set(gone) == set(seen), "absorbed messages and summarized messages differ"
    assert d.outcomes().count("absorbed") == len(summ.calls)
    assert set(d.outcomes()) <= {"absorbed", "defrag", "defrag_failed"}


@settings(max_examples=examples(12), **COMMON)
@given(messages=long_turn_transcripts(), cfg=micro_configs(micro_compact_max_exchange_tokens=256))
def test_long_turns_are_absorbed_in_pieces_before_requests(messages: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
    """Long turns: pieces are absorbed by before_request while the turn runs, invariants hold at every hook."""
    config = parse_config(cfg)
    summ = DigestSummarizer()
    Driver(make_session(config, summ), messages).run()
    seen = summ.seen()
    assert "USER" not in seen and len(seen) == len(set(seen))
    # A piece never cuts an iteration: a call and its results are summarized in the same merge.
    for call in summ.calls:
        calls = {u[2:] for u in call if u.startswith("C:")}
        results = {u[2:] for u in call if u.startswith("T:")}
        assert calls == results, f"a merge got calls without results or the reverse: {call}"


@settings(max_examples=examples(10), **COMMON)
@given(scenario=scenarios(max_turns=5), cfg=micro_configs(tokenizer="o200k_base"))
def test_invariants_with_real_tokenizer(scenario: Scenario, cfg: dict[str, Any]) -> None:
    """Properties 1-4 again with the real tiktoken counter (o200k_base, offline)."""
    config = parse_config(cfg)
    counter = TokenCounter(make_text_counter("o200k_base"))
    assume(counter.name == "o200k_base")
    Driver(make_session(config, DigestSummarizer(), counter), scenario.messages).run(scenario.extras)


@settings(max_examples=examples(25), **COMMON)
@given(scenario=scenarios(), cfg=micro_configs())
def test_invariants_with_extractive_summarizer(scenario: Scenario, cfg: dict[str, Any]) -> None:
    """Properties 1-4 with the real ExtractiveSummarizer (which may refuse content-free exchanges)."""
    from microcompact.summarizers import ExtractiveSummarizer

    config = parse_config(cfg)
    counter = estimate_counter()
    d = Driver(
        make_session(config, ExtractiveSummarizer(count_text=counter.count_text), counter), scenario.messages
    ).run(scenario.extras)
    note(f"outcomes: {Counter(d.outcomes())}")
    _check_failure_runs(d.outcomes(), config.compression.micro_compact_max_failures)


# Shrinking a failure of this one takes minutes (it needs several absorbs and a large output); the focused
# test_defrag_never_rewrites_a_marker_inside_the_protected_tail gives the minimal case, so skip the shrink phase.
@settings(max_examples=examples(30), phases=[Phase.explicit, Phase.reuse, Phase.generate], **COMMON)
@given(
    scenario=scenarios(), cfg=micro_configs(micro_compact_defrag_threshold_tokens=200), lines=st.sampled_from([8, 4])
)  # at most ~190 tokens a merge: within what the engine accepts
def test_invariants_with_a_slowly_condensing_model(scenario: Scenario, cfg: dict[str, Any], lines: int) -> None:
    """Properties 1-4 when defrag keeps running after the absorbing hook (its output stays over threshold).

    A defrag rewrites the marker in place; it must not do so once the marker has become part of the
    protected tail (which happens when an absorb makes room for the marker in the tail's token budget).
    """
    config = parse_config(cfg)
    summ = SlowCondenser(lines)
    d = Driver(make_session(config, summ), scenario.messages).run(scenario.extras)
    note(f"outcomes: {Counter(d.outcomes())}")
    seen = summ.seen()
    assert "USER" not in seen and len(seen) == len(set(seen))


@settings(max_examples=examples(40), **COMMON)
@given(
    scenario=scenarios(),
    cfg=micro_configs(),
    gate=st.sampled_from([0, 100, 400, 1500]),
    cadence=st.sampled_from([1, 2, 3]),
)
def test_invariants_with_reclaim_gate_and_cadence(
    scenario: Scenario, cfg: dict[str, Any], gate: int, cadence: int
) -> None:
    """Properties 1-4 with the reclaim gate and a cadence; refused passes change nothing (driver checks).

    The gate may ask the summarizer about a span it then refuses, and that span is asked again later together
    with more: so here only "every absorbed message was summarized" holds, not "summarized once".
    """
    cfg["compression"].update(micro_compact_min_reclaim_tokens=gate, micro_compact_every_n_turns=cadence)
    config = parse_config(cfg)
    summ = DigestSummarizer(40)
    d = Driver(make_session(config, summ), scenario.messages).run(scenario.extras)
    outs = d.outcomes()
    note(f"outcomes: {Counter(outs)}")
    seen = summ.seen()
    assert "USER" not in seen
    gone = input_units(scenario.messages) - input_units(d.transcript)
    assert set(gone) <= set(seen)
    if not gate:
        assert "no_reclaim" not in outs
    # Cadence: a finalize_turn hook runs a pass only when the turn counter is a multiple of the cadence.
    turns = 0
    for hook, outcomes in d.calls:
        if hook in ("turn", "turn_interrupted"):
            turns += 1
            if outcomes and (turns % cadence or hook == "turn_interrupted"):
                raise AssertionError(f"finalize_turn #{turns} ran a pass ({outcomes}) off cadence {cadence}")
    if gate:  # every committed pass but the first (no marker yet) reclaimed at least the gate
        for r in [r for r in d.results if r.outcome == "absorbed"][1:]:
            reclaimed = r.record["tokens_before"] - r.record["tokens_after"]
            assert reclaimed >= gate, f"a pass reclaiming {reclaimed} < {gate} tokens was committed"


@settings(max_examples=examples(30), **COMMON)
@given(
    scenario=scenarios(),
    cfg=micro_configs(),
    background=st.booleans(),
    settle=st.booleans(),
    ttl=st.sampled_from([None, 300.0]),
    gaps=st.lists(st.sampled_from([5.0, 60.0, 600.0]), min_size=1, max_size=6),
    max_occupancy=st.sampled_from([60.0, 1.0]),
)
def test_invariants_with_cache_aware_and_background_scheduling(
    scenario: Scenario,
    cfg: dict[str, Any],
    background: bool,
    settle: bool,
    ttl: float | None,
    gaps: list[float],
    max_occupancy: float,
) -> None:
    """Properties 1-4 at every hook with cache-aware scheduling (passes deferred while the provider's cache is
    warm) and/or background passes (summarizer on a worker thread, applied at a later hook). ``settle``
    waits for each background pass right after the hook that started it; without it timing decides when a
    pass lands, and the invariants must hold at every hook anyway."""
    cfg["compression"].update(
        micro_compact_background=background,
        micro_compact_cache_ttl_seconds=ttl,
        micro_compact_max_occupancy_pct=max_occupancy,
    )
    config = parse_config(cfg)
    summ = DigestSummarizer(40)
    clock = FakeClock()
    session = make_session(config, summ, clock=clock)
    try:
        d = Driver(session, scenario.messages, settle=background and settle, clock=clock, gaps=gaps)
        d.run(scenario.extras)
        if background:
            d.results += session.drain()
    finally:
        session.close()
    seen = summ.seen()
    assert "USER" not in seen
    gone = input_units(scenario.messages) - input_units(session.transcript)
    assert set(gone) <= set(seen), "messages disappeared without being summarized"
    if not background:  # in background mode a pass discarded because the transcript changed is asked again
        assert len(seen) == len(set(seen))
        assert set(gone) == set(seen)


# --------------------------------------------------------------------------- property 5: determinism


@settings(max_examples=examples(20), **COMMON)
@given(scenario=scenarios(), cfg=micro_configs())
def test_replay_is_deterministic(scenario: Scenario, cfg: dict[str, Any]) -> None:
    config = parse_config(cfg)
    a = make_session(config, DigestSummarizer())
    b = make_session(config, DigestSummarizer())
    stats_a, stats_b = replay(scenario.messages, a), replay(scenario.messages, b)
    assert a.transcript == b.transcript
    assert [p["outcome"] for p in stats_a.passes] == [p["outcome"] for p in stats_b.passes]
    assert a.micro.state.text == b.micro.state.text


# --------------------------------------------------------------------------- property 6: no mutation


@settings(max_examples=examples(20), **COMMON)
@given(scenario=scenarios(), cfg=micro_configs())
def test_caller_dicts_are_never_mutated(scenario: Scenario, cfg: dict[str, Any]) -> None:
    config = parse_config(cfg)
    original = copy.deepcopy(scenario.messages)
    session = make_session(config, DigestSummarizer())
    Driver(session, scenario.messages, check=False).run(scenario.extras)
    _ = session.messages, session.transcript
    assert scenario.messages == original

    # Resuming from the caller's copy of a transcript does not touch it either.
    exported = copy.deepcopy(session.transcript)
    frozen = copy.deepcopy(exported)
    resumed = make_session(config, DigestSummarizer(), messages=exported)
    resumed.finalize_turn()
    resumed.before_request()
    assert exported == frozen

    # The history-processor entry point: a new list, the input list and its dicts untouched.
    current = scenario.messages
    for _ in range(3):
        frozen = copy.deepcopy(current)
        out = micro_compact(current, DigestSummarizer(), config=config, counter=estimate_counter())
        assert current == frozen
        assert out is not current
        current = out
    assert scenario.messages == original


# --------------------------------------------------------------------------- property 7: resume


@settings(max_examples=examples(30), **COMMON)
@given(data=st.data(), cfg=micro_configs(), via_api=st.booleans())
def test_resume_never_redoes_work(data: st.DataObject, cfg: dict[str, Any], via_api: bool) -> None:
    """Replay a prefix, restart from the transcript, replay the rest: same result as without the restart.

    ``via_api`` restarts from an export (``session.messages`` plus the marker metadata ``_mc``, as
    ``sessions export`` writes it): only metadata makes a marker, never text (tests/test_markers_api.py).
    """
    messages = data.draw(transcripts(), label="messages")
    split = data.draw(st.integers(0, len(messages)), label="split")
    config = parse_config(cfg)

    ref_summ = DigestSummarizer()
    ref = Driver(make_session(config, ref_summ), messages).run()

    summ = DigestSummarizer()
    first = Driver(make_session(config, summ), messages).run(stop=split, finalize=False)
    exported = [{k: v for k, v in m.items() if not k.startswith("_") or k == "_mc"} for m in first.s.transcript]
    saved = exported if via_api else first.s.transcript
    second_session = make_session(config, summ, messages=copy.deepcopy(saved))

    # The engine recovers cursor and summary from the marker.
    st1 = first.s.micro.state
    second_session.micro.sync(second_session.ledger)
    st2 = second_session.micro.state
    assert st2.text == st1.text
    if st1.cursor is not None:  # a cursor inside the (since grown) head means the head's end
        h = protected_head(second_session.ledger.messages, second_session.ledger.tokens, config)
        assert (max(st2.cursor, h), st2.marker_index) == (max(st1.cursor, h), st1.marker_index)

    second = Driver(second_session, messages, base=split, in_turn=first.in_turn).run()
    seen = summ.seen()
    assert len(seen) == len(set(seen)), (
        f"summarized again after the restart: {[u for u, c in Counter(seen).items() if c > 1]}"
    )
    assert seen == ref_summ.seen()
    assert to_api(second.transcript) == to_api(ref.transcript)


# --------------------------------------------------------------------------- property 8: off means absent


@settings(max_examples=examples(20), **COMMON)
@given(
    scenario=scenarios(),
    limit=st.sampled_from([None, 200_000, 4096]),
    disabled=st.sampled_from(["default", "micro_off", "compression_off"]),
)
def test_off_means_absent(scenario: Scenario, limit: int | None, disabled: str) -> None:
    """Micro-compaction off: nothing happens. (Batch compaction, on by default, is kept out of reach: no
    context limit, or one generated transcripts never get near; with compression off any limit will do.)"""
    if limit == 4096 and disabled != "compression_off":
        limit = None
    data: dict[str, Any] = {"model": {"context_length": limit}} if limit else {}
    if disabled == "micro_off":
        data["compression"] = {"micro_compact": False, "micro_compact_max_exchange_tokens": 256}
    elif disabled == "compression_off":
        data["compression"] = {"enabled": False, "micro_compact": True, "micro_compact_max_exchange_tokens": 256}
    config = parse_config(data)
    summ = DigestSummarizer()
    session = make_session(config, summ)
    d = Driver(session, scenario.messages).run(scenario.extras)
    assert d.outcomes() == []
    assert summ.calls == [] and summ.condense_calls == 0
    assert session.messages == scenario.messages
    assert [strip(m) for m in session.transcript] == scenario.messages
    replayed = make_session(config, summ)
    replay(scenario.messages, replayed)
    assert replayed.messages == scenario.messages


# --------------------------------------------------------------------------- property 9: failures


def _check_failure_runs(outcomes: list[str], max_failures: int) -> None:
    """Consecutive failures on one exchange: skipped exactly at the ``max_failures``-th, never earlier."""
    run = 0
    for o in outcomes:
        if o == "summarize_failed":
            run += 1
            assert run < max_failures, outcomes
        elif o == "exchange_skipped":
            run += 1
            assert run == max_failures, outcomes
            run = 0
        elif o == "absorbed":
            run = 0


@settings(max_examples=examples(40), **COMMON)
@given(
    scenario=scenarios(),
    cfg=micro_configs(),
    fail_calls=st.sets(st.integers(0, 40), max_size=20),
    mode=st.sampled_from(FlakySummarizer.MODES),
)
def test_failing_summarizer_leaves_transcript_untouched(
    scenario: Scenario, cfg: dict[str, Any], fail_calls: set[int], mode: str
) -> None:
    """A failed pass changes nothing (checked by the driver at every hook) and nothing escapes the hooks."""
    config = parse_config(cfg)
    summ = FlakySummarizer(fail_calls, mode)
    d = Driver(make_session(config, summ), scenario.messages).run(scenario.extras)
    outs = d.outcomes()
    assert outs.count("summarize_failed") + outs.count("exchange_skipped") == len(summ.failed)
    assert outs.count("absorbed") == summ.n - len(summ.failed)
    _check_failure_runs(outs, config.compression.micro_compact_max_failures)


@settings(max_examples=examples(25), **COMMON)
@given(
    scenario=scenarios(),
    cfg=micro_configs(),
    fail_commits=st.sets(st.integers(0, 30), max_size=15),
    summary_lines=st.sampled_from([6, 40]),
)
def test_store_failures_roll_back_in_memory(
    scenario: Scenario, cfg: dict[str, Any], fail_commits: set[int], summary_lines: int
) -> None:
    """A commit hook (the session store) that fails leaves the transcript as it was (driver checks
    ``store_failed`` hooks); it is always handed the event before anything is applied."""
    config = parse_config(cfg)
    events: list[tuple[str, bool]] = []
    holder: dict[str, Session] = {}

    def commit(event: Any, msgs: list[dict[str, Any]]) -> None:
        session = holder["s"]
        assert msgs is session.ledger.messages
        if type(event).__name__ == "Rewrite":
            assert msgs[event.index] is not event.marker and is_marker(msgs[event.index])
        else:
            assert all(not is_marker(msgs[i]) for i in event.absorbed), "not applied yet, nothing absorbed twice"
        fail = len(events) in fail_commits
        events.append((type(event).__name__, not fail))
        if fail:
            raise OSError("disk full")

    session = make_session(config, DigestSummarizer(summary_lines), commit=commit)
    holder["s"] = session
    d = Driver(session, scenario.messages).run(scenario.extras)
    outs = d.outcomes()
    assert outs.count("store_failed") == sum(1 for _, ok in events if not ok)
    assert outs.count("absorbed") == sum(1 for kind, ok in events if ok and kind == "Absorb")
    assert sum(outs.count(o) for o in DEFRAG_OUTCOMES) == sum(1 for kind, ok in events if ok and kind == "Rewrite")


@settings(max_examples=examples(20), **COMMON)
@given(scenario=scenarios(), cfg=micro_configs(), mode=st.sampled_from(FlakySummarizer.MODES))
def test_always_failing_summarizer_skips_after_three_failures(
    scenario: Scenario, cfg: dict[str, Any], mode: str
) -> None:
    config = parse_config(cfg)
    assert config.compression.micro_compact_max_failures == 3
    summ = FlakySummarizer(mode=mode, always=True)
    session = make_session(config, summ)
    d = Driver(session, scenario.messages).run(scenario.extras)
    outs = [o for o in d.outcomes() if o in PASS_OUTCOMES]
    assert set(outs) <= {"summarize_failed", "exchange_skipped"}
    text = "".join("f" if o == "summarize_failed" else "S" for o in outs)
    assert re.fullmatch(r"(ffS)*f{0,2}", text), text
    assert session.messages == scenario.messages
    assert len(session.micro.state.skipped) == text.count("S")


# --------------------------------------------------------------------------- property 10: defrag converges


@settings(max_examples=examples(20), **COMMON)
@given(
    scenario=scenarios(),
    cfg=micro_configs(),
    chunk=st.sampled_from([80, 240, 600]),
    threshold=st.sampled_from([200, 400, 1000]),
)
def test_defrag_converges_with_an_echoing_summarizer(
    scenario: Scenario, cfg: dict[str, Any], chunk: int, threshold: int
) -> None:
    cfg["compression"]["micro_compact_defrag_threshold_tokens"] = threshold
    config = parse_config(cfg)
    summ = EchoSummarizer(chunk)
    session = make_session(config, summ)
    count = session.counter.count_text
    contribution = count("\n" + "x" * chunk) + 1  # what one merge adds at most (estimator: chars / 4)
    d = Driver(session, scenario.messages)
    sizes: list[int] = []
    original_hook = d.hook
    merged_since_defrag = [False]

    def hook(name: str) -> list[Any]:
        res = original_hook(name)
        outs = [r.outcome for r in res]
        size = count(session.micro.state.text)
        sizes.append(size)
        assert size <= threshold + contribution, f"rolling summary at {size} tokens"
        if "absorbed" in outs:
            merged_since_defrag[0] = True
        if any(o in DEFRAG_OUTCOMES for o in outs):
            # A defrag can wait (the marker was inside the protected tail) but never runs twice on one merge.
            assert merged_since_defrag[0], "defrag ran twice without a merge in between"
            merged_since_defrag[0] = False
            assert size <= threshold // 2, "defrag did not reach its target"
        for r in res:
            if r.outcome in DEFRAG_OUTCOMES:
                assert r.record.get("defrag_method") == "deterministic"
        return res

    d.hook = hook  # type: ignore[method-assign]
    d.run(scenario.extras)
    outs = d.outcomes()
    absorbed, defrags = outs.count("absorbed"), sum(outs.count(o) for o in DEFRAG_OUTCOMES)
    note(f"absorbed={absorbed} defrags={defrags} sizes={sizes}")
    # After a defrag the summary is at most threshold/2, so reaching the threshold again takes several merges.
    per_defrag = max(1, (threshold - threshold // 2) // contribution)
    assert defrags <= 1 + absorbed // per_defrag
    # The marker carries the (bounded) summary.
    for m in session.transcript:
        if is_marker(m):
            assert marker_body(m) == session.micro.state.text


# --------------------------------------------------------------------------- focused examples


def call(cid: str, name: str = "Bash") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": '{"command": "make test"}'}}


def A(text: str | None, *ids: str) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant", "content": text}
    if ids:
        m["tool_calls"] = [call(i) for i in ids]
    return m


def T(cid: str, chars: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": ("lorem ipsum dolor " * (chars // 18 + 1))[:chars]}


def U(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_marker_inside_long_turn_sits_before_an_assistant_and_merges_for_strict_providers() -> None:
    config = parse_config(isolated_config_data(820, micro_compact_max_exchange_tokens=256, protect_first_n=1))
    summ = DigestSummarizer()
    session = make_session(config, summ)
    session.append({"role": "system", "content": "agent"})
    session.append(U("u1: fix the build"))
    request_passes = []
    for i in range(30):
        request_passes += session.before_request()
        session.append(A(f"s{i}: step {i}" if i % 2 else None, f"c{i}"))
        session.append(T(f"c{i}", 800))
    assert "absorbed" in [r.outcome for r in request_passes], "no piece absorbed while the turn ran"
    assert all(r.record.get("partial") for r in request_passes if r.outcome == "absorbed")

    t = session.transcript
    idx = [i for i, m in enumerate(t) if is_marker(m)]
    assert len(idx) == 1
    j = idx[0]
    assert t[j - 1] == {**U("u1: fix the build"), "_tokens": t[j - 1]["_tokens"]}
    assert t[j + 1]["role"] == "assistant" and t[j + 1].get("tool_calls") and not is_marker(t[j + 1])
    assert role_sequence_errors(t) == [] and tool_pairing_errors(t) == []

    strict = to_api(t, strict_alternation=True)
    assert role_sequence_errors(strict, strict_alternation=True) == []
    merged = strict[j]
    assert merged["content"].startswith(MARKER_PREFIX)
    assert merged["tool_calls"] == t[j + 1]["tool_calls"]
    assert not any(k.startswith("_") for m in strict for k in m)
    assert len(strict) == len(t) - 1

    session.append(A("s99: done"))
    session.finalize_turn()
    assert marker_count(session.transcript, "micro") == 1


def _turn(n: int, chars: int) -> list[dict[str, Any]]:
    if chars == 0:
        return [U(f"u{n}: small question"), A(f"s{n}: short answer")]
    return [U(f"u{n}: task {n}"), A(f"s{n}: running", f"g{n}"), T(f"g{n}", chars), A(f"s{n}0: done")]


def test_reclaim_gate_refuses_small_passes_then_takes_exchanges_together() -> None:
    # Tail: only the last message (tiny budget); estimator counts are easy to reason about.
    config = parse_config(
        isolated_config_data(20, protect_first_n=0, min_tail_messages=1, micro_compact_min_reclaim_tokens=300)
    )
    summ = DigestSummarizer()
    session = make_session(config, summ)
    outcomes: list[list[str]] = []
    merges: list[int] = []
    sizes = [0, 0, 2400, 2400]  # exchange 1: tiny (first pass, exempt); 2: tiny (refused); 3: large
    for n, chars in enumerate(sizes, 1):
        for m in _turn(n, chars):
            if m["role"] == "assistant":
                session.before_request()
            session.append(m)
        before = copy.deepcopy(session.transcript)
        res = session.finalize_turn()
        outcomes.append([r.outcome for r in res])
        merges.append(len(summ.calls))
        if [r.outcome for r in res] == ["no_reclaim"]:
            assert session.transcript == before
    assert outcomes[0] == [], "the exchange of the running turn is in the tail"
    # Turn 2 ends: exchange 1 is tiny but the first pass is exempt from the gate.
    assert outcomes[1] == ["absorbed"] and summ.calls[0] == ["S:1"]
    # Turn 3 ends: exchange 2 alone would reclaim too little and exchange 3 is still in the tail.
    assert outcomes[2] == ["no_reclaim"]
    assert merges[2] == 1, "the gate refused before asking the summarizer"
    # Turn 4 ends: exchange 2 is taken together with exchange 3, in one merge; the user message between stays.
    assert outcomes[3] == ["absorbed"]
    assert summ.calls[1] == ["S:2", "S:3", "C:g3", "T:g3", "S:30"]
    users = [m["content"] for m in session.transcript if m["role"] == "user"]
    assert users == ["u1: small question", "u2: small question", "u3: task 3", "u4: task 4"]
    assert marker_count(session.transcript, "micro") == 1


def test_cadence_every_third_turn_counts_turns_without_work() -> None:
    config = parse_config(
        isolated_config_data(20, protect_first_n=0, min_tail_messages=1, micro_compact_every_n_turns=3)
    )
    summ = DigestSummarizer()
    session = make_session(config, summ)
    # Calls 1 and 2: nothing to absorb, yet the counter advances.
    assert session.finalize_turn() == [] and session.finalize_turn() == []
    assert session.micro.state.turns == 2
    session.extend(_turn(1, 400) + _turn(2, 400))
    # Call 3 is due: exchange 1 (outside the tail) is absorbed.
    assert [r.outcome for r in session.finalize_turn()] == ["absorbed"]
    results: list[list[str]] = []
    for n in range(3, 12):
        session.extend(_turn(n, 400))
        results.append([r.outcome for r in session.finalize_turn()])
    # Calls 4..12: passes on calls 6, 9 and 12 only, although every call had an exchange to absorb.
    assert results == [["absorbed"] if call_no % 3 == 0 else [] for call_no in range(4, 13)]
    assert session.micro.state.turns == 12 and len(summ.calls) == 4
    # An interrupted turn advances the counter but never runs a pass, even when due.
    session.extend(_turn(12, 400))
    assert session.finalize_turn() == [] and session.finalize_turn(completed=False) == []
    assert session.micro.state.turns == 14
    assert [r.outcome for r in session.finalize_turn()] == ["absorbed"]
    assert marker_count(session.transcript, "micro") == 1


class _WordyModel:
    """merge adds ~370 tokens; condense keeps 3/4 of the lines (accepted as clearly shorter, still too long)."""

    name = "wordy"

    def merge(self, summary: str, exchange: list[dict]) -> str:
        lines = [f"- point {k} " + "abc " * 16 for k in range(20)]
        return "\n".join(([summary] if summary else []) + lines)

    def condense(self, summary: str, target_tokens: int) -> str:
        lines = summary.splitlines()
        return "\n".join(lines[: len(lines) * 3 // 4])


def test_defrag_never_rewrites_a_marker_inside_the_protected_tail() -> None:
    """Property 4 for defrag: once an absorb has made room for the marker in the tail's token budget, the
    marker is part of the protected tail, and a later defrag must not rewrite it there."""
    config = parse_config(
        isolated_config_data(
            820,
            protect_first_n=0,
            min_tail_messages=1,
            micro_compact_max_exchange_tokens=256,
            micro_compact_defrag_threshold_tokens=200,
        )
    )
    session = make_session(config, _WordyModel())
    messages = [
        U("u1: go"),
        A("s1: a", "c1"),
        T("c1", 2000),
        A("s2: b", "c2"),
        T("c2", 1000),
        A("s3: c", "c3"),
        T("c3", 400),
    ]
    # Request 4 absorbs iteration 1 (and defrags once, to 3/4); request 5 finds the marker in the tail.
    d = Driver(session, messages, check=False).run({len(messages): ["request"]}, finalize=False)
    assert d.calls[-1] == ("request", ["absorbed", "defrag"])
    msgs, tokens = session.ledger.messages, session.ledger.tokens
    t = tail_start(msgs, tokens, config.tail_budget_tokens(), min_messages=1, floor=0)
    marker = next(i for i, m in enumerate(msgs) if is_marker(m))
    assert t <= marker, "the marker is part of the protected tail now"
    tail = copy.deepcopy(msgs[t:])
    session.before_request()
    assert session.ledger.messages[-len(tail) :] == tail, "defrag rewrote the marker inside the protected tail"


# --------------------------------------------------------------------------- the user-message checker itself


def _users(texts: list[str]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": t} for t in texts]


def test_user_message_checker_accepts_empty_and_repeated_messages() -> None:
    """Issue 8.8: 48/800 fuzzed sessions raised false alarms on empty or repeated user messages."""
    for texts in (["", ""], ["a", "", "b"], ["x", "x", "x"], ["", "a", "a", ""], ["ab", "b", "b"]):
        assert user_message_errors(_users(texts), _users(texts)) == [], texts


def test_user_message_checker_still_catches_loss_reordering_and_substrings() -> None:
    assert user_message_errors(_users(["a", "b"]), _users(["b", "a"]))
    assert user_message_errors(_users(["a", "b"]), _users(["a"]))
    assert user_message_errors(_users(["", "a"]), _users(["a", ""]))  # an empty message moved
    assert user_message_errors(_users(["hello"]), _users(["hello world"]))  # changed, not verbatim
    assert user_message_errors(_users(["x", "x"]), _users(["x"]))  # a repeat lost


@settings(max_examples=examples(300), **COMMON)
@given(texts=st.lists(st.sampled_from(["", "a", "b", "a\n\nb", "x y", "\n"]), max_size=8), data=st.data())
def test_user_message_checker_accepts_every_joining_of_consecutive_messages(
    texts: list[str], data: st.DataObject
) -> None:
    from microcompact.messages import join_user_messages

    originals = _users(texts)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(texts) - 1)), max_size=len(texts))))
    groups = [originals[a:b] for a, b in zip([0, *cuts], [*cuts, len(originals)], strict=True) if originals[a:b]]
    joined = [join_user_messages(g) for g in groups]
    assert user_message_errors(originals, joined) == []
