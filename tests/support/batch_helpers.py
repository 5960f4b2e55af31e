"""What the batch tests share: configs, scripted summarizers, hand-built transcripts, the invariant checker
checked around every batch compaction (``check_batch``, ``Checked``), and driving a session over a
transcript (``drive``, ``run_generated``). Split out of the former tests/test_batch.py."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck

from microcompact.batch import (
    BatchCompactor,
    BatchResult,
)
from microcompact.config import Config, parse_config
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import META_KEY, content_text, is_marker, marker_body, marker_count, marker_kind, to_api
from microcompact.session import Session
from microcompact.tokens import EstimateCounter, Ledger, TokenCounter
from microcompact.window import protected_head, tail_start
from support.paths import NORMALIZED
from support.strategies import head_of, same_head, units

TRANSCRIPTS = NORMALIZED
LONGEST = TRANSCRIPTS / "cc_4d5611e5.jsonl"
KEY_ENV = "MICROCOMPACT_TEST_BATCH_KEY"
OPENAI_KEY = "sk-proj-" + "Qw8Er4Ty6Ui2Op0As5Df7Gh3Jk9Lz1Xc"  # fake; concatenated to keep scanners quiet
CHANGED = {"pruned", "compacted", "user_floor_exceeded", "fallback"}
COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def counter() -> TokenCounter:
    return TokenCounter(EstimateCounter())


def config(context_length: int | None = 20_000, aux: dict[str, Any] | None = None, **compression: Any) -> Config:
    """Batch on (the default), micro off unless asked; with 20K tokens the threshold is 10K, the tail 2K."""
    base = {"tokenizer": "estimate", "protect_first_n": 2, "min_tail_messages": 3}
    base.update(compression)
    data: dict[str, Any] = {"compression": base, "model": {"context_length": context_length}}
    if aux:
        data["auxiliary"] = {"compression": aux}
    return parse_config(data)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --------------------------------------------------------------------------- summarizers for tests


class Scribe:
    """Deterministic, bounded: the summary keeps the previous summary's last lines and adds one line per call.

    Records what every ``batch`` call got (previous summary, messages, focus) and every ``merge`` call.
    """

    def __init__(self, name: str = "scribe", keep: int = 4) -> None:
        self.name = name
        self.keep = keep
        self.batches: list[tuple[str, list[dict[str, Any]], str | None]] = []
        self.merges: list[list[dict[str, Any]]] = []

    def _digest(self, *parts: str) -> str:
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        got = units(messages)
        line = f"- batch {len(self.batches)}: {len(messages)} msgs #{self._digest(summary, *got)}"
        old = [ln for ln in summary.splitlines() if ln.startswith("- ")][-self.keep :]
        return "\n".join(["### Completed actions", *old, line])

    def merge(self, summary: str, exchange: list[dict]) -> str:
        self.merges.append(exchange)
        line = f"- micro {len(self.merges)}: {len(exchange)} msgs #{self._digest(summary, *units(exchange))}"
        old = [ln for ln in summary.splitlines() if ln.strip()][-self.keep :]
        return "\n".join([*old, line])

    def condense(self, summary: str, target_tokens: int) -> str:
        return "\n".join(summary.splitlines()[-2:])


class Failing(Scribe):
    """Every batch call raises; merges work."""

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        raise RuntimeError("summarizer down")


# --------------------------------------------------------------------------- hand-built transcripts


def call(cid: str, name: str = "Bash", **args: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args or {"command": "ls"})},
    }


def iteration(cid: str, output: str, *, name: str = "Bash", text: str | None = None, **args: Any) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": text if text is not None else f"running {cid}",
            "tool_calls": [call(cid, name, **args)],
        },
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def turn(n: int, iterations: int = 2, size: int = 200, user: str | None = None) -> list[dict[str, Any]]:
    """A user message, ``iterations`` Bash calls with ~``size``-word outputs, a final answer."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": user or f"request {n}: please continue"}]
    for k in range(iterations):
        cid = f"c{n}_{k}"
        msgs += iteration(cid, f"output {cid}\n" + "word " * size, command=f"make step{n}_{k}")
    msgs.append({"role": "assistant", "content": f"done {n}"})
    return msgs


def system() -> dict[str, Any]:
    return {"role": "system", "content": "You are a coding agent."}


def opening() -> list[dict[str, Any]]:
    """System prompt plus a first exchange: the protected head (``protect_first_n=2``)."""
    return [system(), {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"}]


def build(turns: int, **kw: Any) -> list[dict[str, Any]]:
    msgs = [system()]
    for n in range(turns):
        msgs += turn(n, **kw)
    return msgs


def strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if not k.startswith("_")}


# --------------------------------------------------------------------------- the invariant checker


def bounds(config: Config, ledger: Ledger) -> tuple[int, int]:
    h = protected_head(ledger.messages, ledger.tokens, config)
    t = tail_start(
        ledger.messages, ledger.tokens, config.tail_budget_tokens(), min_messages=config.tail_min_messages(), floor=h
    )
    return h, t


def check_batch(
    config: Config, before: list[dict[str, Any]], h: int, t: int, ledger: Ledger, result: BatchResult
) -> None:
    """What must hold after one batch compaction (``before``/``h``/``t``: the transcript and bounds before it)."""
    after = ledger.messages
    rec = result.record
    where = f"batch outcome {result.outcome} ({ {k: rec.get(k) for k in ('tokens_before', 'tokens_after')} })"
    assert rec["event"] == "batch_compaction" and rec["outcome"] == result.outcome
    assert rec["tokens_before"] == sum(m["_tokens"] for m in before)
    assert rec["tokens_after"] == ledger.total == sum(ledger.tokens), where
    assert rec["messages_before"] == len(before) and rec["messages_after"] == len(after), where
    if result.outcome not in CHANGED:
        assert after == before, f"{where}: a batch that changed nothing must leave the transcript as it was"
        return
    # Head and tail untouched (same dicts, same order).
    n_tail = len(before) - t
    assert after[:h] == before[:h], f"{where}: head changed"
    assert after[len(after) - n_tail :] == before[t:], f"{where}: tail changed"
    # Valid conversation: pairing and role sequence, also for strict-alternation providers.
    strict = to_api(after, strict_alternation=True)
    if not role_sequence_errors(before):
        assert role_sequence_errors(after) == [], where  # (pairing included)
        assert role_sequence_errors(strict, strict_alternation=True) == [], where
    # Under the threshold, or the record says it is not.
    threshold = config.threshold_tokens()
    if threshold and ledger.total > threshold:
        assert rec.get("still_over_threshold") is True, f"{where}: over the threshold without saying so"
    # User messages verbatim and in order; folded ones only with the user floor (and then only the oldest).
    folded = rec.get("users_folded") or 0
    if folded:  # every fold is reported under its own outcome, also when the fallback wrote the summary
        assert result.outcome == "user_floor_exceeded", where
        middle_users = [i for i in range(h, t) if before[i].get("role") == "user"][:folded]
        expected = [m for i, m in enumerate(before) if i not in middle_users]
        assert user_message_errors(expected, after) == [], where
    else:
        assert user_message_errors(before, after) == [], where
        assert user_message_errors(before, strict) == [], where
    if result.outcome == "pruned":
        assert len(after) == len(before)
        for i in range(h, t):
            if after[i] is not before[i]:
                meta = after[i].get(META_KEY) or {}
                assert meta.get("stub") or meta.get("shortened"), f"{where}: prune changed message {i} oddly"
                assert after[i].get("role") == before[i].get("role")
        return
    # Summarized, in time order: the kept user messages (the same dicts, in order) with at most one batch marker
    # in each gap between them, exactly where the gap held work before; nothing else in the middle.
    middle = after[h : len(after) - n_tail]
    folded_at = set([i for i in range(h, t) if before[i].get("role") == "user"][:folded])
    kept_users = [i for i in range(h, t) if before[i].get("role") == "user" and i not in folded_at]
    assert [m for m in middle if not is_marker(m)] == [before[i] for i in kept_users], where
    assert all(marker_kind(m) == "batch" for m in middle if is_marker(m)), where
    cuts = [h - 1, *kept_users, t]
    gaps_before = [
        any(before[i].get("role") != "user" or i in folded_at for i in range(a + 1, b))
        for a, b in itertools.pairwise(cuts)
    ]
    gaps_after: list[int] = [0]
    for m in middle:
        if is_marker(m):
            gaps_after[-1] += 1
        else:
            gaps_after.append(0)
    assert gaps_after == [int(g) for g in gaps_before], f"{where}: markers {gaps_after} for work {gaps_before}"
    assert marker_count(middle, "micro") == 0, where
    assert rec["runs"] >= 1 and rec["summarizer_calls"] <= min(rec["runs"], config.compression.batch_max_calls)


class Checked:
    """Wraps ``BatchCompactor.compact`` of a session (or compactor) so every call is checked and kept."""

    def __init__(self, compactor: BatchCompactor, config: Config) -> None:
        self.results: list[BatchResult] = []
        self.middles: list[list[dict[str, Any]]] = []  # what lay between head and tail before each call
        self.folded = 0
        original = compactor.compact

        def compact(ledger: Ledger, **kw: Any) -> BatchResult:
            before = list(ledger.messages)
            h, t = bounds(config, ledger)
            result = original(ledger, **kw)
            check_batch(config, before, h, t, ledger, result)
            self.results.append(result)
            self.middles.append(before[h:t])
            self.folded += result.record.get("users_folded") or 0
            return result

        compactor.compact = compact  # type: ignore[method-assign]

    def outcomes(self) -> list[str]:
        return [r.outcome for r in self.results]


def check_markers(session: Session, where: str = "", *, unique_lines: bool = True) -> None:
    """At most one micro marker, after every batch marker; batch markers never adjacent (kept user messages
    separate their runs); no marker text repeated.

    ``unique_lines``: every summary line names what it summarized (``Scribe``), so no line may be in two
    markers. The extractive summarizer may extract the same fact (a path, say) from old and new exchanges, so
    with it only a whole batch body must not reappear inside the micro marker.
    """
    out = session.ledger.messages
    assert marker_count(out, "micro") <= 1, where
    kinds = [marker_kind(m) for m in out]
    assert not any(a == b == "batch" for a, b in itertools.pairwise(kinds)), f"{where}: two batch markers in a row"
    batch_bodies = [marker_body(m) for m in out if marker_kind(m) == "batch"]
    micro_body = next((marker_body(m) for m in out if marker_kind(m) == "micro"), None)
    if unique_lines:  # (an extractive summary may quote a user message that quotes the marker prefix)
        for m in out:
            if is_marker(m):
                assert content_text(m).count("[CONTEXT COMPACTION]") == 1, f"{where}: marker text doubled"
        seen: set[str] = set()
        for body in batch_bodies + ([micro_body] if micro_body is not None else []):
            lines = {ln for ln in body.splitlines() if ln.startswith("- ")}
            assert not lines & seen, f"{where}: marker text duplicated: {lines & seen}"
            seen |= lines
    if micro_body is not None and batch_bodies:
        assert all(body not in micro_body for body in batch_bodies), where
        # micro never removes a batch marker's content: the micro marker follows the last batch marker
        mi = kinds.index("micro")
        bi = len(kinds) - 1 - kinds[::-1].index("batch")
        assert bi < mi, f"{where}: micro marker at {mi} before batch marker at {bi}"


class Echo(Scribe):
    """Names, in its summary, every tool call it was given: where each summarized call went is checkable."""

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.batches.append((summary, messages, focus))
        ids = [tc["id"] for m in messages for tc in m.get("tool_calls") or ()]
        return "\n".join(["### Completed actions", f"- call {len(self.batches)}: " + " ".join(ids)])


def drive(
    session: Session,
    messages: list[dict[str, Any]],
    *,
    every: Callable[[str], None] | None = None,
    compact_at: set[int] = frozenset(),
    focus: str | None = None,
) -> None:
    """Replay-like driving: requests before assistant messages, turn ends before user messages."""
    in_turn = False
    for i, m in enumerate(messages):
        if i in compact_at:
            session.compact(focus=focus)
            if every:
                every(f"compact before message {i}")
        if m.get("role") == "user" and in_turn:
            session.finalize_turn()
            in_turn = False
            if every:
                every(f"turn end before message {i}")
        if m.get("role") == "assistant":
            session.before_request()
            in_turn = True
            if every:
                every(f"request before message {i}")
        session.append(m)
    if in_turn:
        session.finalize_turn()
        if every:
            every("final turn end")


def run_generated(
    messages: list[dict[str, Any]],
    cfg: Config,
    summarizer: Any,
    compact_at: set[int],
    focus: str | None,
    unique_lines: bool = True,
) -> tuple[Session, Checked]:
    s = Session(cfg, summarizer, counter=counter(), session_id="gen")
    checked = Checked(s.batch, cfg)
    appended: list[dict[str, Any]] = []

    def every(where: str) -> None:
        out = s.ledger.messages
        assert role_sequence_errors(out) == [] or role_sequence_errors(messages[: len(appended)]), where
        if not checked.folded:
            assert user_message_errors(appended, out) == [], where
        check_markers(s, where, unique_lines=unique_lines)
        h = head_of(appended, cfg, s.counter)
        assert same_head(out, appended, h), f"{where}: head changed"

    # keep the appended list in step with the session (drive appends before the next hook runs)
    original_append = s.append

    def append(m: dict[str, Any]) -> None:
        original_append(m)
        appended.append(m)

    s.append = append  # type: ignore[method-assign]
    drive(s, messages, every=every, compact_at=compact_at, focus=focus)
    return s, checked
