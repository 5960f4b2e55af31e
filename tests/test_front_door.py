"""The package's top level is its front door: exactly what a user builds with, and enough to build it all.

Each test below imports from ``microcompact`` only (plus the standard library and the shared transcripts):
a working Session and AsyncSession, a summarizer of one's own that raises the exported errors inside a
FallbackChain, a router that forks a diverged history, and the one-call ``micro_compact``. The export list
is pinned as the set of names a user needs, so an engine internal or a test-only checker that leaks back
to the top level fails here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

import microcompact
from microcompact import (
    AsyncSession,
    Config,
    ConfigError,
    ExtractiveSummarizer,
    FallbackChain,
    HistoryDiverged,
    Outcome,
    Session,
    SessionBusy,
    SessionRouter,
    StoreError,
    Summarizer,
    SummarizerError,
    SummarizerTimeout,
    SummarizerUnavailable,
    TranscriptError,
    load_config,
    micro_compact,
    open_store,
    parse_config,
    summarizer_from,
    to_api,
)
from support.paths import NORMALIZED

FRONT_DOOR = {
    "Session",
    "AsyncSession",
    "SessionRouter",
    "HistoryDiverged",
    "TranscriptError",
    "Outcome",
    "Config",
    "ConfigError",
    "load_config",
    "parse_config",
    "open_store",
    "StoreError",
    "SessionBusy",
    "Summarizer",
    "SummarizerError",
    "SummarizerTimeout",
    "SummarizerRateLimited",
    "SummarizerAuthError",
    "SummarizerUnavailable",
    "SummarizerBadOutput",
    "summarizer_from",
    "FallbackChain",
    "ExtractiveSummarizer",
    "micro_compact",
    "to_api",
    "log_telemetry",
}

SMALL = {"model": {"context_length": 40_000}, "compression": {"micro_compact": True, "tokenizer": "estimate"}}


def _turns() -> list[list[dict[str, Any]]]:
    """A real agent session, cut into turns (each starts with what a person wrote)."""
    lines = (NORMALIZED / "sweplay_openhands_largest.jsonl").read_text(encoding="utf-8").splitlines()
    turns: list[list[dict[str, Any]]] = []
    for message in (json.loads(line) for line in lines if line.strip()):
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def test_the_top_level_exports_exactly_the_front_door() -> None:
    assert set(microcompact.__all__) == FRONT_DOOR
    assert len(microcompact.__all__) == len(FRONT_DOOR), "no name listed twice"
    public = {n for n, v in vars(microcompact).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public == FRONT_DOOR, "every public attribute is on the list, and only those"


@pytest.mark.parametrize("name", ["tool_pairing_errors", "user_message_errors", "MicroCompactor", "is_marker"])
def test_checkers_and_engine_internals_stay_off_the_front_door(name: str) -> None:
    assert not hasattr(microcompact, name)


class Flaky:
    """A summarizer of one's own: times out on its first call, then says no more than ``extractive``."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0
        self.inner = ExtractiveSummarizer()

    def _call(self) -> None:
        self.calls += 1
        if self.calls == 1:
            raise SummarizerTimeout("flaky: first call times out")

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        self._call()
        return self.inner.merge(summary, exchange)

    def condense(self, summary: str, target_tokens: int) -> str:
        self._call()
        return self.inner.condense(summary, target_tokens)

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        self._call()
        return self.inner.batch(summary, messages, focus)


class Down:
    """A summarizer whose endpoint is gone: every call raises the exported error."""

    name = "down"

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        raise SummarizerUnavailable("down: connection refused")

    def condense(self, summary: str, target_tokens: int) -> str:
        raise SummarizerUnavailable("down: connection refused")

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        raise SummarizerUnavailable("down: connection refused")


def _drive(session: Session, turns: list[list[dict[str, Any]]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for turn in turns:
        session.extend(turn)
        outcomes += [r.outcome for r in session.before_request()]
        outcomes += [r.outcome for r in session.finalize_turn()]
    return outcomes


def test_a_session_with_an_own_summarizer_in_a_fallback_chain(tmp_path: Path) -> None:
    flaky = Flaky()
    assert isinstance(flaky, Summarizer)
    chain = FallbackChain(flaky, ExtractiveSummarizer(), cooldown=0)  # no rest: asked again at the next call
    config = parse_config(SMALL)
    with open_store(tmp_path / "s.db") as store:
        with Session(config, chain, session_id="front", store=store) as session:
            outcomes = _drive(session, _turns())
            assert Outcome.ABSORBED in outcomes, outcomes
            assert flaky.calls > 1, "the chain fell back once, then went on asking the summarizer"
            with pytest.raises(SessionBusy):
                Session.open(store, "front", config)
            with pytest.raises(TranscriptError):
                session.append({"role": "user", "content": float("nan")})
            sent = session.messages
            assert sent == to_api(session.transcript) and len(sent) < sum(map(len, _turns()))
        with pytest.raises(ValueError, match="already exists in the store"):
            Session(config, chain, session_id="front", store=store)  # a new session under a stored id
        with Session.open(store, "front", config, chain) as resumed:
            assert resumed.messages == sent
        with pytest.raises(StoreError):
            open_store(tmp_path / "not-a-dir" / "s.db", read_only=True)


def test_a_summarizer_that_raises_leaves_the_session_going() -> None:
    session = Session(parse_config(SMALL), Down())
    outcomes = _drive(session, _turns())
    assert outcomes and not {Outcome.ABSORBED, Outcome.COMPACTED} & set(outcomes), outcomes
    assert Outcome.SUMMARIZE_FAILED in outcomes, outcomes
    assert issubclass(SummarizerUnavailable, SummarizerError)


def test_a_router_routes_and_forks_and_a_session_refuses_a_diverged_history(tmp_path: Path) -> None:
    history = [m for turn in _turns()[:3] for m in turn]
    edited = [*history[:-1], {**history[-1], "content": "edited: " + json.dumps(history[-1].get("content"))}]
    with open_store(tmp_path / "r.db") as store:
        router = SessionRouter(parse_config(SMALL), store=store, summarizer=ExtractiveSummarizer())
        try:
            with router.lock("conv"):
                first = router.route("conv", history)
                assert first.session.session_id == "conv" and first.sync.appended == len(history)
                view = first.session.compacted(history)
                assert view == first.session.messages
                with pytest.raises(HistoryDiverged):
                    first.session.compacted(edited)
                fork = router.route("conv", edited)
                assert fork.forked_from == "conv" and fork.session.session_id == "conv~2"
        finally:
            router.close()


def test_an_async_session_and_the_one_call_pass() -> None:
    turns = _turns()

    async def run() -> int:
        async with AsyncSession(parse_config(SMALL), summarizer_from(lambda prompt: "notes: " + prompt[:40])) as s:
            for turn in turns:
                s.extend(turn)
                await s.before_request()
                await s.finalize_turn()
            return len(s.messages)

    assert asyncio.run(run()) < sum(map(len, turns))
    flat = [m for turn in turns for m in turn]
    once = micro_compact(flat, ExtractiveSummarizer(), config=parse_config(SMALL))
    assert len(to_api(once)) <= len(flat)


def test_config_loading_from_the_top_level(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  context_length: 32000\n", encoding="utf-8")
    assert isinstance(load_config(path), Config) and load_config(path).model.context_length == 32_000
    with pytest.raises(ConfigError):
        parse_config({"compression": {"no_such_key": 1}})
