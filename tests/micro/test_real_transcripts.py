"""Every recorded real agent session, replayed with micro-compaction on, invariants checked after every hook.

The driver mirrors :func:`microcompact.replay.replay` (``before_request`` before each assistant message,
``finalize_turn`` before each user message and at the end) so the invariants can be checked after each hook
call, not only on the final transcript; the final transcript is then compared with what ``replay`` itself
produces, so the mirror cannot drift from the real thing.

Sessions: shared/transcripts/normalized beside the repository (see its MANIFEST.md). The module skips when it is
missing.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import content_text, marker_count, to_api
from microcompact.replay import load_transcript, replay
from microcompact.session import Session
from support.builders import config
from support.paths import NORMALIZED, manifest_sessions
from support.strategies import head_of, same_head

CORPUS = NORMALIZED
FILES = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
LIMITS = (200_000, 64_000, 32_000)

if not FILES:
    pytest.skip(f"real transcripts not found in {CORPUS}", allow_module_level=True)


def strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if not k.startswith("_")}


class _Errors(logging.Handler):
    """ERROR records of the ``microcompact`` logger: an engine exception the hooks swallowed shows up here."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Checked:
    """Replays ``source`` through ``session`` like ``replay.replay`` and checks the invariants after each hook."""

    def __init__(self, session: Session, source: list[dict[str, Any]]) -> None:
        self.s = session
        self.source = source
        self.appended = 0
        self.hooks = 0
        self.results: list[Any] = []
        self.occupancy: list[float] = []
        self.user_floor_exceeded = False
        self.protect = session.config.compression.protect_first_n
        self.over_window = 0

    def run(self) -> Checked:
        in_turn = False
        for m in self.source:
            role = m.get("role")
            if role == "user" and in_turn:
                self.hook(self.s.finalize_turn(), "finalize_turn")
                in_turn = False
            if role == "assistant":
                self.hook(self.s.before_request(), "before_request")
                occ = self.s.occupancy_pct()
                if occ is not None:
                    self.occupancy.append(occ)
                in_turn = True
            self.s.append(m)
            self.appended += 1
        if in_turn:
            self.hook(self.s.finalize_turn(), "finalize_turn")
        return self

    def hook(self, results: list[Any], name: str) -> None:
        self.hooks += 1
        if name == "before_request":  # the prompt about to be sent fits the window, unless what is never cut
            limit = self.s.config.model.context_length or 0  # (user and system messages) alone does not
            fixed = sum(
                t
                for m, t in zip(self.s.ledger.messages, self.s.ledger.tokens, strict=True)
                if m.get("role") in ("user", "system", "developer")
            )
            if self.s.tokens > limit:
                self.over_window += 1
                assert fixed > limit, f"request {self.hooks}: {self.s.tokens} tokens in a {limit}-token window"
        self.results += results
        if any(r.outcome == "user_floor_exceeded" for r in results):
            self.user_floor_exceeded = True
        self.check(
            f"after {name} #{self.hooks} (message {self.appended} of {len(self.source)}, "
            f"outcomes {[r.outcome for r in results]})"
        )

    def check(self, where: str) -> None:
        out = self.s.transcript
        before = self.source[: self.appended]
        if not self.user_floor_exceeded:
            assert user_message_errors(before, out) == [], where
        users = [m for m in before if m.get("role") == "user"]
        if users:  # the latest user message is never absorbed, whatever happened (it may be joined)
            last = next(m for m in reversed(out) if m.get("role") == "user")
            assert content_text(users[-1]) in content_text(last), where
        assert role_sequence_errors(out) == [], where
        api = to_api(out, strict_alternation=True)
        assert role_sequence_errors(api, strict_alternation=True) == [], where
        assert marker_count(out, "micro") <= 1, where
        h = head_of(before, self.s.config, self.s.counter)
        assert same_head(out, before, h), f"head changed {where}"
        assert self.s.ledger.total == sum(self.s.ledger.tokens), where

    def outcomes(self, kind: str) -> list[str]:
        return [r.outcome for r in self.results if (r.record.get("event") == "batch_compaction") == (kind == "batch")]


@pytest.fixture(scope="module")
def transcripts() -> dict[str, list[dict[str, Any]]]:
    return {p.stem: load_transcript(p) for p in FILES}


def test_corpus_is_the_one_the_manifest_lists_and_every_message_loads(
    transcripts: dict[str, list[dict[str, Any]]],
) -> None:
    """The replays below run over every listed session (a partial copy of shared/ fails here, not silently),
    and loading a session yields every message it recorded."""
    listed = manifest_sessions()
    assert sorted(p.stem for p in FILES) == sorted(listed)
    assert {name: len(messages) for name, messages in transcripts.items()} == listed


def replays() -> list[Any]:
    """The fast suite: every session but the long Claude Code recordings at 32K (micro and batch compaction
    together, the hardest window), and one Claude Code recording at each of 32K and 200K (the product's
    point, checked below); every other replay, a second or more each, is slow (CI runs them all)."""
    return [
        pytest.param(p.stem, limit, id=f"{p.stem}-{limit}", marks=() if fast(p.stem, limit) else pytest.mark.slow)
        for limit in LIMITS
        for p in FILES
    ]


FAST_RECORDINGS = {32_000: "cc_fa812bfe", 200_000: "cc_4d5611e5"}  # the Claude Code replays make test runs


def fast(name: str, limit: int) -> bool:
    if name.startswith("cc_"):
        return FAST_RECORDINGS.get(limit) == name
    return limit == 32_000


@pytest.mark.parametrize("name,limit", replays())
def test_invariants_hold_after_every_hook(name: str, limit: int, transcripts: dict[str, list[dict[str, Any]]]) -> None:
    source = transcripts[name]
    # The recordings themselves satisfy what we demand of the output (else the checks prove nothing).
    assert role_sequence_errors(source) == []
    assert role_sequence_errors(to_api(source, strict_alternation=True), strict_alternation=True) == []

    errors = _Errors()
    logger = logging.getLogger("microcompact")
    logger.addHandler(errors)
    try:
        run = Checked(Session(config(limit), session_id=name), source).run()
    finally:
        logger.removeHandler(errors)
    assert [r.getMessage() for r in errors.records] == [], "the engine logged errors (swallowed exceptions?)"
    run.check("at the end")
    final = run.s.transcript
    if not run.user_floor_exceeded:
        assert user_message_errors(source, final) == []
    assert len(final) <= len(source)
    assert "error" not in run.outcomes("batch") and "store_failed" not in run.outcomes("micro")

    # The mirror is faithful: replay() gives the same final transcript.
    reference = Session(config(limit), session_id=name)
    replay(source, reference)
    assert [strip(m) for m in reference.transcript] == [strip(m) for m in final]

    # Whatever the session, every prompt fits the context window (threshold = half of it), unless its user
    # and system messages alone do not (swesmith_largest at 32K: a 26K-token user message); checked per request.
    assert max(run.occupancy) < 200 or run.over_window, f"a prompt reached {max(run.occupancy)}% of the threshold"

    if name.startswith("cc_") and limit == 200_000:
        # The point of the product: Claude Code sessions run 120-170K tokens, yet occupancy stays flat and
        # batch compaction (the long stall) never comes at a 200K window.
        assert run.outcomes("batch") == [] and run.s.batch.compactions == 0
        assert max(run.occupancy) < 60, f"max occupancy {max(run.occupancy)}% of the threshold"
        assert run.s.occupancy_pct() < 60


@pytest.mark.parametrize(
    "name,most", [("cc_fa812bfe", 3), ("cc_subagent_a2898e3", 2), ("sweplay_openhands_largest", 3)]
)
def test_batch_converges_at_a_32k_window(name: str, most: int, transcripts: dict[str, list[dict[str, Any]]]) -> None:
    """Issue 8.7: at 32K, cc_fa812bfe did 6 full batch compactions (10 with prunes); a session with large user
    messages (cc_subagent_a2898e3: 12 requests) batched again and again and never settled."""
    session = Session(config(32_000), session_id=name)
    prompts: list[int] = []
    stats = replay(transcripts[name], session, on_request=lambda _i, s: prompts.append(s.tokens))
    summarized = sum(
        n for outcome, n in stats.batch_outcomes.items() if outcome in ("compacted", "user_floor_exceeded", "fallback")
    )
    assert summarized <= most, dict(stats.batch_outcomes)
    assert max(prompts) <= 32_000
