"""Claude Code itself through a real ``microcompact serve`` process, checked from both ends of the wire.

``claude -p`` (the pinned npm package) talks to a byte-recording TCP relay (``http_tap``), which talks to
``microcompact serve`` run as a subprocess on a free port with a small ``--context-limit`` and a SQLite
``--db``, in front of the scripted upstream. The upstream makes Claude Code run Bash with 24 KB outputs and
signed (sometimes redacted) thinking for 32 steps, answers one step with a 529 and breaks another's stream
(Claude Code retries both). Every request Claude Code sent is compared with the one the upstream received,
and every response Claude Code read with the bytes the upstream answered. The server is killed (SIGKILL)
while Claude Code runs step 16 and again between two turns, and started again on the same store each time;
the turn and the ``--continue`` turn must go on in the one stored session. Skipped, naming the install
command, when Claude Code is missing.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.anthropic_contract import marker_texts, request_errors
from support.claude_code import ClaudeRun, comparable, run_claude, unavailable_reason
from support.http_tap import Exchange, TapRelay
from support.numbered_steps import NumberedSteps, wait_for_pause
from support.serve_process import ServeProcess, run_cli
from support.session_ids import named
from support.stored_session import stored_session_errors
from upstream import (
    RecordedRequest,
    ScriptedUpstream,
)
from upstream.usage import DEFAULT_OVERHEAD, prompt_tokens

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

PROMPT = "Run the numbered steps with the Bash tool until they are done."
MORE = "Run four more steps."
STEPS = 32
MORE_STEPS = 4
OVERLOADED = 24  # the step whose first request is answered 529 (Claude Code retries it)
CUT = 28  # the step whose first answer breaks off mid-stream (Claude Code retries it too)
CONTEXT_LIMIT = 100_000  # Claude Code's head alone is about 20K tokens; 32 outputs of 24 KB are about 200K


@dataclass
class Turn:
    run: ClaudeRun
    requests: list[tuple[Exchange, RecordedRequest]]  # what Claude Code sent and read, with what went upstream


@dataclass
class Scenario:
    first: Turn
    second: Turn
    db: Path
    home: Path
    served: list[ServeProcess]  # the serve processes in order: killed mid-turn, killed between turns, stopped
    restarts: list[int]  # for each restart, the index (over both turns) of the first request the new server got


def pair_up(exchanges: list[Exchange], received: list[RecordedRequest]) -> list[tuple[Exchange, RecordedRequest]]:
    assert [e.path for e in exchanges] == [r.path for r in received], "the proxy added or dropped requests"
    return list(zip(exchanges, received, strict=True))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    """A 32-step turn during which the server is killed (SIGKILL, while Claude Code runs step 16) and started
    again on the same store; a second kill and start; then a 4-step ``--continue`` turn."""
    tmp = tmp_path_factory.mktemp("proxy_claude_code")
    db, home, gate = tmp / "sessions.db", tmp / "mchome", tmp / "gate"
    workdir, claude_home = tmp / "work", tmp / "claude-home"
    served: list[ServeProcess] = []
    restarts: list[int] = []
    with ScriptedUpstream() as upstream, TapRelay() as tap:

        def restart() -> None:
            if served:
                served[-1].kill()
                restarts.append(len(upstream.requests))
            options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--log", str(tmp / "proxy.log"))
            served.append(ServeProcess(home, *options, "--context-limit", str(CONTEXT_LIMIT)).start())
            tap.target_port = served[-1].port

        def restart_when_paused() -> None:
            try:
                wait_for_pause(gate)
                restart()
            finally:
                gate.with_suffix(".go").touch()  # never leave Claude Code waiting

        def turn(prompt: str, script: NumberedSteps, **options: Any) -> Turn:
            seen = len(upstream.requests)
            upstream.script = script
            run = run_claude(tap.base_url, prompt, workdir=workdir, home=claude_home, **options)
            assert run.ok, run.stderr or run.stdout
            return Turn(run, pair_up(tap.exchanges()[seen:], upstream.requests[seen:]))

        restart()
        midway = threading.Thread(target=restart_when_paused, daemon=True)
        midway.start()
        try:
            first = turn(PROMPT, NumberedSteps("a", STEPS, pause=(STEPS // 2, gate), overloaded=OVERLOADED, cut=CUT))
            midway.join()
            restart()
            second = turn(MORE, NumberedSteps("b", MORE_STEPS), continue_session=True)
            assert served[-1].stop() == 0, "".join(served[-1].stderr)
        finally:
            for process in served:
                process.kill()
    assert len(restarts) == 2, "the server was restarted in the middle of the turn and between the turns"
    yield Scenario(first, second, db, home, served, restarts)


def all_requests(scenario: Scenario) -> list[tuple[Exchange, RecordedRequest]]:
    return scenario.first.requests + scenario.second.requests


def stored_id(scenario: Scenario) -> str:
    """The conversation Claude Code's session id names: that id with its API key's fingerprint."""
    assert scenario.first.run.result is not None
    key = scenario.first.requests[0][1].headers["x-api-key"]
    return named(scenario.first.run.result["session_id"], scenario.home / "session-salt", key)


def test_claude_code_finished_both_turns_in_one_session(scenario: Scenario) -> None:
    first, second = scenario.first.run.result, scenario.second.run.result
    assert first is not None and second is not None
    assert first["result"] == "Run a: all steps are done." and first["num_turns"] == STEPS + 1
    assert second["result"] == "Run b: all steps are done." and second["num_turns"] == MORE_STEPS + 1
    assert second["session_id"] == first["session_id"]
    # two more requests than model calls in the first turn: the 529 and the broken stream Claude Code retried
    assert len(scenario.first.requests) == STEPS + 3 and len(scenario.second.requests) == MORE_STEPS + 1


def test_every_forwarded_request_keeps_the_contract(scenario: Scenario) -> None:
    statuses = []
    for n, (sent, received) in enumerate(all_requests(scenario)):
        assert (sent.method, sent.target) == ("POST", "/v1/messages?beta=true")
        statuses.append(received.status)  # the upstream answers 400 to what the API would refuse
        assert request_errors(json.loads(sent.request_body), received.body) == [], f"request {n}"
    failed = OVERLOADED - 1  # the request for step n is the n-th
    assert statuses == [200] * failed + [529] + [200] * (len(statuses) - failed - 1)


def test_an_overloaded_answer_reaches_claude_code_verbatim_and_its_retry_stores_nothing_twice(
    scenario: Scenario,
) -> None:
    (failed, _), (retry, upstream_retry) = scenario.first.requests[OVERLOADED - 1 : OVERLOADED + 1]
    assert failed.status == 529 and json.loads(failed.response_body)["error"]["type"] == "overloaded_error"
    assert retry.request_body == failed.request_body, "Claude Code resent the identical request"
    assert upstream_retry.status == 200 and request_errors(json.loads(retry.request_body), upstream_retry.body) == []
    # the rows the retry could have duplicated are checked with the rest of the store below


def test_a_broken_stream_reaches_claude_code_as_broken_and_its_retry_goes_on(scenario: Scenario) -> None:
    (cut, upstream_cut), (retry, upstream_retry) = scenario.first.requests[CUT : CUT + 2]  # one later: the 529
    assert not upstream_cut.completed and not cut.complete, "the proxy passed the cut on, it did not end the stream"
    assert cut.response_body == bytes(upstream_cut.response) and b"message_start" in cut.response_body
    assert retry.request_body == cut.request_body, "Claude Code resent the identical request"
    assert upstream_retry.completed and request_errors(json.loads(retry.request_body), upstream_retry.body) == []


def test_responses_are_the_upstreams_bytes(scenario: Scenario) -> None:
    for sent, received in all_requests(scenario):
        assert sent.complete == received.completed  # both false only for the broken stream
        assert sent.status == received.status
        assert sent.response_headers["content-type"] == received.response_headers["content-type"]
        assert sent.response_body == bytes(received.response)
    assert any(f"sig-a-{STEPS}".encode() in sent.response_body for sent, _ in scenario.first.requests)


def test_the_long_turn_was_compacted_and_said_so(scenario: Scenario) -> None:
    session_id = stored_id(scenario)
    compacted = []
    segments = []  # which serve process answered each compacted request (its totals are that process's)
    for index, (sent, received) in enumerate(all_requests(scenario)):
        headers = sent.response_headers
        assert headers["x-microcompact-session"] == session_id
        assert 0 < float(headers["x-microcompact-occupancy"]) <= 100
        if marker_texts(received.messages):
            compacted.append((sent, received))
            segments.append(sum(1 for first in scenario.restarts if first <= index))
            assert len(received.raw) < len(sent.request_body)
    assert len(compacted) >= STEPS // 2, "compaction started early in a 100K window and stayed"
    # A stream's totals run through the requests answered before it began (Claude Code may send the next one
    # as soon as it reads the stop event, before the proxy has billed the last), counted by the serve process
    # that answered (a restarted one starts again): within each they only grow; by the end tokens were saved.
    saved = [int(sent.response_headers["x-microcompact-tokens-saved"]) for sent, _ in compacted]
    for segment in set(segments):
        own = [n for n, s in zip(saved, segments, strict=True) if s == segment]
        assert own == sorted(own), own
    assert saved[-1] > 0
    assert all(sent.response_headers["x-microcompact-totals-through"] == "previous-request" for sent, _ in compacted)
    sent, received = scenario.first.requests[-1]
    assert prompt_tokens(received.body) < prompt_tokens(json.loads(sent.request_body)) / 2
    assert received.usage is not None
    reported = sum(
        received.usage.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    assert reported < CONTEXT_LIMIT, "the upstream was never asked for more than the window"


def test_the_restarted_server_resumed_the_stored_session(scenario: Scenario) -> None:
    session_id = stored_id(scenario)
    listed = run_cli(scenario.home, "sessions", "list", "--db", str(scenario.db))
    assert listed.returncode == 0, listed.stderr
    assert session_id in listed.stdout and f"{session_id}~" not in listed.stdout, "one session, never forked"
    requests = all_requests(scenario)
    final = json.loads(requests[-1][0].request_body)["messages"]
    before_kills = [t for first_after in scenario.restarts for t in marker_texts(requests[first_after - 1][1].messages)]
    assert len(before_kills) >= len(scenario.restarts), "each server was killed with compacted work behind it"
    assert stored_session_errors(scenario.db, session_id, len(final), before_kills) == []
    for first_after in scenario.restarts:
        assert marker_texts(requests[first_after][1].messages), "the first request after a restart went out compacted"


def test_the_killed_servers_left_nothing_behind_that_blocks_the_next(scenario: Scenario) -> None:
    *killed, stopped = scenario.served
    assert [p.process.returncode for p in killed if p.process] == [-9, -9]
    assert stopped.process is not None and stopped.process.returncode == 0
    for process in scenario.served:
        log = "".join(process.stderr)
        assert "Traceback" not in log and "busy" not in log.lower(), log[-2000:]
    for sent, _ in all_requests(scenario):
        assert "x-microcompact-degraded" not in sent.response_headers, sent.response_headers


def test_the_prompt_cache_keeps_reading(scenario: Scenario) -> None:
    """Tools and system (Claude Code's own breakpoint on ``system[2]``) are read from the cache on every
    request, and when no pass ran between two requests (the view only grew), the whole previous request is.

    After a pass the rest is written again: the marker changed, and Claude Code's last breakpoint finds the
    head's entry only within the API's 20-block lookback, so a view with a longer tail rewrites the head too.
    """
    # The broken stream counts as a "before": the upstream read its prompt and wrote it to the cache before
    # the answer broke off, as the API does, so the retry after it reads that request's prefix.
    requests = [received for _, received in all_requests(scenario) if received.status == 200]
    prefix = prompt_tokens({"tools": requests[0].body["tools"], "system": requests[0].body["system"]}, 0)
    assert prefix > 5_000
    grew = 0
    for before, after in itertools.pairwise(requests):
        if not after.completed:
            continue
        assert after.usage is not None and after.usage["cache_read_input_tokens"] >= prefix
        kept = len(before.messages) - 1
        if comparable(after.messages[:kept]) == comparable(before.messages[:kept]):
            grew += 1
            assert after.usage["cache_read_input_tokens"] == prompt_tokens(before.body) - DEFAULT_OVERHEAD
    assert grew >= 3, "the requests before the first pass, and after a restart, only append"


def test_the_sonnet_shape_keeps_the_contract_too(tmp_path: Path) -> None:
    """With ``--model claude-sonnet-4-5`` Claude Code sends no environment message: the head is one user
    message of nine text blocks whose last (the prompt) carries a breakpoint, and thinking has a budget."""
    db = tmp_path / "sessions.db"
    with ScriptedUpstream() as upstream, TapRelay() as tap:
        upstream.script = NumberedSteps("s", 20)
        options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT))
        served = ServeProcess(tmp_path / "mchome", *options, "--log", str(tmp_path / "proxy.log")).start()
        tap.target_port = served.port
        try:
            run = run_claude(
                tap.base_url,
                PROMPT,
                workdir=tmp_path / "work",
                home=tmp_path / "home",
                extra_args=("--model", "claude-sonnet-4-5"),
            )
            assert served.stop() == 0
        finally:
            served.kill()
        requests = pair_up(tap.exchanges(), upstream.requests)
    assert run.ok and run.result is not None, run.stderr or run.stdout
    assert run.result["result"] == "Run s: all steps are done." and len(requests) == 21
    head = json.loads(requests[0][0].request_body)
    assert head["thinking"]["type"] == "enabled" and [m["role"] for m in head["messages"]] == ["user"]
    assert len(head["messages"][0]["content"]) > 2 and "cache_control" in head["messages"][0]["content"][-1]
    for n, (sent, received) in enumerate(requests):
        assert sent.response_body == bytes(received.response), f"request {n}"
        assert request_errors(json.loads(sent.request_body), received.body) == [], f"request {n}"
    assert sum(1 for _, received in requests if marker_texts(received.messages)) >= 10
    final = json.loads(requests[-1][0].request_body)["messages"]
    stored = named(run.result["session_id"], tmp_path / "mchome" / "session-salt", requests[0][1].headers["x-api-key"])
    assert stored_session_errors(db, stored, len(final), []) == []
