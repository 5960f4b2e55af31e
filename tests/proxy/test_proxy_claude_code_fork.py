"""Claude Code's background fork through a real ``microcompact serve``: two histories under one session id.

The scripted model makes Claude Code call its Agent tool with ``subagent_type: "fork"``. The fork inherits
the whole conversation and runs in the background, so its requests interleave with the main agent's under
the same ``x-claude-code-session-id``, and the two histories part at the Agent call (the fork's copy of
that assistant message drops its thinking). The proxy must keep each history in its own branch of the
key (``ID`` and ``ID~2``) and never mix them, every request keeping the contract; after a SIGKILL and a
restart, the main agent's requests must find their branch again instead of forking a third.
Skipped, naming the install command, when Claude Code is missing.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.anthropic_contract import request_errors
from support.claude_code import run_claude, unavailable_reason
from support.http_tap import Exchange, TapRelay
from support.serve_process import ServeProcess, run_cli
from support.session_ids import named
from support.stored_session import stored_session_errors
from upstream import Answer, RecordedRequest, Reply, ScriptedUpstream, Text, Thinking, ToolCall, text
from upstream.scripts import offers_tool, seq_command

_missing = unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

MAIN_STEPS = 20
AGENT_STEP = 5  # the main agent's step that launches the fork
FORK_STEPS = 3
PAUSE_STEP = 14  # the main agent's step during which the server is killed and started again
DIRECTIVE = "SUBTASK-42: run three seq commands with Bash."
CONTEXT_LIMIT = 60_000


def highest(request: RecordedRequest, prefix: str) -> int:
    """The highest step whose tool call (id ``PREFIX_N``) is in the request: the newest exchange is never
    compacted away, so this is where the agent stands."""
    ids = [
        b.get("id", "")
        for m in request.messages
        if m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    return max((int(found.group(1)) for i in ids if (found := re.fullmatch(rf"{prefix}_(\d+)", i))), default=0)


def is_fork(body: dict[str, Any]) -> bool:
    """The fork's requests carry the directive as user text (the main agent's only as the Agent call's input)."""
    for m in body.get("messages") or []:
        blocks = m["content"] if isinstance(m.get("content"), list) else []
        if m.get("role") == "user" and any(DIRECTIVE in b.get("text", "") for b in blocks if b.get("type") == "text"):
            return True
    return False


class MainAndFork:
    def __init__(self, gate: Path) -> None:
        self.gate = gate
        self.fork_finished = False

    def __call__(self, request: RecordedRequest) -> Answer:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        if is_fork(request.body):
            n = highest(request, "toolu_fork") + 1
            if n > FORK_STEPS:
                self.fork_finished = True
                return text("Fork finished its part.")
            command = {"command": seq_command(100 + n), "description": f"Fork step {n}"}
            return Reply(
                (Thinking(f"Fork plan {n}.", f"sig-fork-{n}"), ToolCall("Bash", command, id=f"toolu_fork_{n}"))
            )
        n = highest(request, "toolu_main") + 1
        if n > MAIN_STEPS:
            return text("All steps are done.")
        if n == AGENT_STEP:
            launch = {"description": "Side work", "prompt": DIRECTIVE, "subagent_type": "fork"}
            call = ToolCall("Agent", launch, id=f"toolu_main_{n}")
        else:
            command = seq_command(n)
            if n == PAUSE_STEP:
                command = f"touch {self.gate}.waiting; while [ ! -e {self.gate}.go ]; do sleep 0.05; done; {command}"
            call = ToolCall("Bash", {"command": command, "description": f"Step {n}"}, id=f"toolu_main_{n}")
        return Reply((Thinking(f"Plan {n}.", f"sig-main-{n}"), Text(f"Step {n}."), call))


def pair_up(exchanges: list[Exchange], received: list[RecordedRequest]) -> list[tuple[Exchange, RecordedRequest]]:
    """Each request Claude Code sent with the one the upstream got for it. The main agent and the fork send
    at the same time, so arrival order is not enough: the newest message, which goes out as sent, tells."""
    unused = list(received)
    pairs = []
    for sent in exchanges:
        newest = json.loads(sent.request_body)["messages"][-1]
        match = next(r for r in unused if r.messages and r.messages[-1] == newest)
        unused.remove(match)
        pairs.append((sent, match))
    return pairs


def wait_until(condition: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_a_background_fork_keeps_its_own_branch_across_a_restart(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    gate, db, home = tmp_path / "gate", tmp_path / "sessions.db", tmp_path / "mchome"
    script = MainAndFork(gate)
    upstream.script = script
    options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", str(CONTEXT_LIMIT))
    served = [ServeProcess(home, *options, "--log", str(tmp_path / "proxy.log")).start()]
    restarted_at: list[int] = []

    def fork_done() -> bool:
        return script.fork_finished and all(r.completed for r in upstream.requests)

    with TapRelay(served[0].port) as tap:

        def restart_when_paused() -> None:
            try:
                wait_until(gate.with_suffix(".waiting").exists, "the main agent reached the pause step")
                wait_until(fork_done, "the fork finished")
                served[0].kill()
                restarted_at.append(len(upstream.requests))
                served.append(ServeProcess(home, *options, "--log", str(tmp_path / "proxy.log")).start())
                tap.target_port = served[1].port
            finally:
                gate.with_suffix(".go").touch()

        midway = threading.Thread(target=restart_when_paused, daemon=True)
        midway.start()
        try:
            run = run_claude(
                tap.base_url,
                "Run the steps.",
                workdir=tmp_path / "work",
                home=tmp_path / "home",
                allowed_tools=("Bash", "Agent"),
            )
            midway.join()
            assert served[-1].stop() == 0
        finally:
            for process in served:
                process.kill()
        exchanges = tap.exchanges()

    assert run.ok, run.stderr or run.stdout
    assert run.result is not None and run.result["result"] == "All steps are done."
    assert restarted_at, "the server was restarted while the main agent ran"
    assert len(exchanges) == len(upstream.requests) and {e.path for e in exchanges} == {"/v1/messages"}
    trail: dict[bool, list[str]] = {True: [], False: []}  # the branch each request went to, fork or main
    last: dict[bool, dict[str, Any]] = {}
    for n, (sent, received) in enumerate(pair_up(exchanges, upstream.requests)):
        client = json.loads(sent.request_body)
        assert received.status == 200 and sent.response_body == bytes(received.response), f"request {n}"
        assert request_errors(client, received.body) == [], f"request {n}"
        assert is_fork(received.body) == is_fork(client), f"request {n} went up with the other history"
        trail[is_fork(client)].append(sent.response_headers["x-microcompact-session"])
        last[is_fork(client)] = client
    session_id = named(run.result["session_id"], home / "session-salt", upstream.requests[0].headers["x-api-key"])
    everything = {session_id, f"{session_id}~2"}
    main = list(dict.fromkeys(trail[False]))  # the main agent's branches, in the order it used them
    assert len(set(trail[True])) == 1 and set(trail[True]) | set(main) == everything, trail
    # The main agent moves at most once, when the fork's request reached the shared branch first; never after.
    assert len(main) <= 2 and main[-1] not in trail[True], trail
    after_restart = [e for e in exchanges[restarted_at[0] :] if not is_fork(json.loads(e.request_body))]
    assert after_restart and {e.response_headers["x-microcompact-session"] for e in after_restart} == {main[-1]}
    assert trail[False].index(main[-1]) < len(trail[False]) - len(after_restart), "its branch from before"

    listed = run_cli(home, "sessions", "list", "--db", str(db))
    assert listed.returncode == 0 and session_id in listed.stdout, listed.stdout
    assert f"{session_id}~3" not in listed.stdout, listed.stdout
    for fork in (True, False):
        branch = trail[fork][-1]
        length = len(last[fork]["messages"]) if branch == session_id else None  # a fork's opening is its parent's
        assert stored_session_errors(db, branch, length, [], everything) == [], branch
