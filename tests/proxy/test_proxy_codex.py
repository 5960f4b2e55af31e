"""Codex CLI itself through a real ``microcompact serve`` process, checked from both ends of the wire
(issue 19).

``codex exec`` (the pinned npm package, Responses API only) talks to a byte-recording TCP relay
(``http_tap``), which talks to ``microcompact serve`` run as a subprocess with a small ``--context-limit``
and a SQLite ``--db``, in front of the scripted Responses upstream. The upstream makes Codex run
``exec_command`` with 16 KB outputs for 20 steps, each call opened by a reasoning item with its
``encrypted_content``. The server is killed (SIGKILL) while Codex runs step 8 and started again on the
same store; the turn must go on in the one stored conversation. Skipped, naming the install command,
when Codex is missing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from microcompact.messages import MARKER_PREFIX
from microcompact.server.responses_format import grouped
from support.codex_cli import API_KEY, CodexRun, run_codex, unavailable_reason
from support.http_tap import Exchange, TapRelay
from support.numbered_steps import wait_for_pause
from support.serve_process import ServeProcess
from support.stored_session import stored_session_errors
from upstream import RecordedRequest
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream, last_call_step

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

PROMPT = "Run the numbered steps with exec_command until they are done."
STEPS = 20
PAUSE = 8  # the step during which the server is killed and started again
LINES = 2000  # numbers printed per step: about 16 KB of output
CONTEXT_LIMIT = 65_536  # Codex's own head (instructions, tools) is about 10K tokens; 20 outputs about 80K


@dataclass
class Scenario:
    run: CodexRun
    requests: list[tuple[Exchange, RecordedRequest]]  # what Codex sent and read, with what went upstream
    restarted_at: int  # index of the first request the restarted server forwarded
    served: list[ServeProcess]
    db: Path


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    tmp = tmp_path_factory.mktemp("proxy_codex")
    db, home, gate = tmp / "sessions.db", tmp / "mchome", tmp / "gate"
    served: list[ServeProcess] = []
    restarted_at: list[int] = []

    def command(step: int) -> dict[str, Any]:
        cmd = f"seq {step * 1_000_000 + 1} {step * 1_000_000 + LINES}"
        if step == PAUSE:
            cmd = f"touch {gate}.waiting; while [ ! -e {gate}.go ]; do sleep 0.05; done; {cmd}"
        return {"cmd": cmd, "yield_time_ms": 30000, "max_output_tokens": 20000}

    with ResponsesUpstream(ResponsesToolLoop(STEPS, make_input=command)) as upstream, TapRelay() as tap:

        def restart() -> None:
            if served:
                served[-1].kill()
                restarted_at.append(len(upstream.responses_requests()))
            options: tuple[str, ...] = ("--db", str(db), "--openai-upstream", upstream.openai_base_url)
            options += ("--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT))
            served.append(ServeProcess(home, *options).start())
            tap.target_port = served[-1].port

        def restart_when_paused() -> None:
            try:
                wait_for_pause(gate)
                restart()
            finally:
                gate.with_suffix(".go").touch()  # never leave Codex waiting

        restart()
        midway = threading.Thread(target=restart_when_paused, daemon=True)
        midway.start()
        try:
            run = run_codex(f"{tap.base_url}/v1", PROMPT, workdir=tmp / "work", home=tmp / "codex-home")
            midway.join(timeout=60)
            assert served[-1].stop() == 0, "".join(served[-1].stderr)
        finally:
            for process in served:
                process.kill()
        exchanges = [e for e in tap.exchanges() if e.method == "POST" and e.path == "/v1/responses"]
        received = upstream.responses_requests()
    assert run.ok, run.stderr[-3000:]
    answered = [e for e in exchanges if e.status]  # a request that met the killed server never went up
    assert len(answered) == len(received), "the proxy added or dropped requests"
    assert len(restarted_at) == 1, "the server was killed and started again mid-turn"
    yield Scenario(run, list(zip(answered, received, strict=True)), restarted_at[0], served, db)


def _inputs(scenario: Scenario) -> list[list[dict[str, Any]]]:
    return [received.body["input"] for _, received in scenario.requests]


def _is_marker(item: dict[str, Any]) -> bool:
    content = item.get("content")
    texts = [p.get("text", "") for p in content if isinstance(p, dict)] if isinstance(content, list) else []
    return item.get("role") == "assistant" and any(t.startswith(MARKER_PREFIX) for t in texts)


def test_codex_finished_the_turn(scenario: Scenario) -> None:
    assert scenario.run.last_message.strip() == "All steps are done."
    steps = [last_call_step(received.body) for _, received in scenario.requests]
    assert steps[-1] == STEPS - 1 and len(scenario.requests) >= STEPS + 1


def test_every_request_went_up_with_its_items_paired(scenario: Scenario) -> None:
    for n, (_, received) in enumerate(scenario.requests):
        assert received.status == 200, f"request {n}: {received.response_text[:300]}"
        assert received.headers["authorization"] == f"Bearer {API_KEY}"


def test_the_turn_was_compacted_under_the_window(scenario: Scenario) -> None:
    inputs = _inputs(scenario)
    assert any(_is_marker(i) for i in inputs[-1]), "the last request carries a marker"
    client_last = json.loads(scenario.requests[-1][0].request_body)["input"]
    assert len(json.dumps(inputs[-1])) < len(json.dumps(client_last)) / 2
    peak = max(received.usage["input_tokens"] for _, received in scenario.requests if received.usage)
    assert peak < CONTEXT_LIMIT, f"peak prompt {peak} tokens over a {CONTEXT_LIMIT}-token window"
    modes = {sent.response_headers["x-microcompact-mode"] for sent, _ in scenario.requests}
    assert modes == {"compacted"}


def test_the_head_and_the_prompt_go_verbatim_in_every_request(scenario: Scenario) -> None:
    first = json.loads(scenario.requests[0][0].request_body)["input"]
    prompt = [i for i in first if i.get("role") == "user" and PROMPT in json.dumps(i)]
    assert len(prompt) == 1 and first[-1] == prompt[0], "Codex's first request ends with the prompt"
    for n, items in enumerate(_inputs(scenario)):
        assert items[: len(first)] == first, f"request {n}: the head (instructions, environment, prompt) changed"


def test_reasoning_items_stay_with_their_calls(scenario: Scenario) -> None:
    for n, (sent, received) in enumerate(scenario.requests):
        client = json.loads(sent.request_body)["input"]
        items = received.body["input"]
        for i, item in enumerate(items):
            if item.get("type") == "reasoning":
                step = item["encrypted_content"].removeprefix("enc-step-")
                following = [x.get("call_id") for x in items[i + 1 : i + 3] if x.get("type") == "function_call"]
                assert following == [f"call_step_{step}"], f"request {n}: reasoning of step {step} orphaned"
            elif not _is_marker(item):
                assert item in client or item.get("type") == "function_call_output", f"request {n}: {item}"


def test_codex_read_the_upstreams_bytes(scenario: Scenario) -> None:
    for n, (sent, received) in enumerate(scenario.requests):
        assert sent.status == received.status and received.completed
        assert sent.response_body == bytes(received.response), f"request {n}"
        assert sent.response_body.rstrip().split(b"\n")[-1].startswith(b'data: {"type":"response.completed"')
        # Not asserted: the chunked body's empty last chunk. Codex drops the connection as soon as it has
        # read response.completed, so the relay sees that last chunk only when it wins the race.


def test_the_killed_server_resumed_the_stored_conversation(scenario: Scenario) -> None:
    before = scenario.requests[: scenario.restarted_at]
    after = scenario.requests[scenario.restarted_at :]
    assert before and after, "requests were served by both processes"
    sessions = {sent.response_headers["x-microcompact-session"] for sent, _ in scenario.requests}
    assert len(sessions) == 1, f"one conversation across the restart, got {sessions}"
    assert last_call_step(after[0][1].body) == PAUSE, "the restarted server took the paused step's output"
    markers_sent = [i["content"][0]["text"] for _, r in before for i in r.body["input"] if _is_marker(i)]
    assert markers_sent, "the killed server had compacted"
    client_last = json.loads(scenario.requests[-1][0].request_body)["input"]
    [session] = sessions
    errors = stored_session_errors(scenario.db, session, len(grouped(client_last)), list(dict.fromkeys(markers_sent)))
    assert errors == [], "one stored conversation, every item once, the killed server's markers kept"
