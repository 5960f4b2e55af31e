"""The reactive agent's script (tests/upstream/reactive.py) on hand-made prompts, and once through ``serve``
with the real Claude Code.

What the cost bench's reactive rows count rests on one decision: a needed key in the prompt means go on
(quoting it), a key gone means re-run the command that printed it. These tests pin that decision, the
previous-step count, the step counting from the script's own call ids, and that the key reaches the
conversation only through what the command printed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.claude_code import run_claude, unavailable_reason
from support.serve_process import ServeProcess
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall
from upstream.reactive import (
    MAX_TRIES,
    Reach,
    ReactiveSteps,
    missing,
    needs,
    prompt_text,
    step_command,
    step_output,
    step_value,
)

RUN, LINES = "t1", 40
BASH = {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}
USER = {"role": "user", "content": "Run the numbered steps with the Bash tool until they are done."}


def request(messages: list[Any], *, api: str = "anthropic", tools: bool = True) -> RecordedRequest:
    body: dict[str, Any] = {"model": "m", "system": "You run shell steps.", "messages": messages}
    if tools:
        body["tools"] = [BASH] if api == "anthropic" else [{"type": "function", "function": {"name": "Bash"}}]
    raw = json.dumps(body).encode()
    path = "/v1/messages" if api == "anthropic" else "/v1/chat/completions"
    return RecordedRequest(number=1, method="POST", path=path, query="", headers={}, raw=raw, body=body, api=api)


def exchange(script: ReactiveSteps, call_id: str, step: int, output: str | None = None) -> list[Any]:
    """An Anthropic tool round trip of ``step`` under ``call_id``: the call, then its output (``output`` in
    place of the real one, as a fold would leave it)."""
    command = step_command(RUN, step, LINES)
    use = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
    result = {"type": "tool_result", "tool_use_id": call_id, "content": step_output(RUN, step, LINES)}
    if output is not None:
        result["content"] = output
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


def history(script: ReactiveSteps, upto: int, folded: set[int] | None = None) -> list[Any]:
    """Steps 1..upto, those in ``folded`` with their output replaced by a fold's note."""
    messages: list[Any] = [USER]
    for step in range(1, upto + 1):
        messages += exchange(script, script.call_id(step), step, "[folded]" if step in (folded or ()) else None)
    return messages


def call_of(reply: Reply) -> ToolCall:
    [call] = [b for b in reply.blocks if isinstance(b, ToolCall)]
    return call


def said(reply: Reply) -> str:
    return " ".join(b.text for b in reply.blocks if isinstance(b, Text))


def test_the_values_are_in_what_the_command_prints_and_nowhere_in_the_command() -> None:
    for step in (1, 27, 149):
        command = step_command(RUN, step, LINES)
        printed = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout
        assert printed == step_output(RUN, step, LINES)
        lines = printed.splitlines()
        assert lines[LINES // 4] == f"id of step {step}: {step_value(RUN, step, 'id')}"
        assert lines[LINES // 2 + 1] == f"key of step {step}: {step_value(RUN, step)}"
        assert len(lines) == LINES + 2
        assert step_value(RUN, step) not in command and step_value(RUN, step, "id") not in command
    values = {step_value(RUN, s, name) for s in range(1, 200) for name in ("key", "id")}
    assert len(values) == 2 * 199


def test_needs_the_previous_key_and_some_ids_from_further_back() -> None:
    assert needs(0) == []
    assert [needs(k) for k in (1, 7, 8)] == [[(1, "key")], [(7, "key")], [(8, "key")]]  # 8: nothing 8 back yet
    assert needs(12) == [(12, "key"), (4, "id")]  # every 4th step: 8 back
    assert needs(27) == [(27, "key"), (2, "id")]  # 27 % 6 == 3: 25 back
    assert needs(48) == [(48, "key"), (40, "id")]
    assert needs(9, (Reach(3, 3),)) == [(9, "key"), (6, "id")]
    assert sum(len(needs(k)) - 1 for k in range(1, 49)) == 14  # the 48-step task: 14 reaches back


def test_value_present_proceeds_quoting_it() -> None:
    script = ReactiveSteps(RUN, 10, LINES)
    reply = script(request(history(script, 3)))
    assert call_of(reply).id == script.call_id(4)
    assert call_of(reply).input["command"] == step_command(RUN, 4, LINES)
    assert step_value(RUN, 3) in said(reply) and step_value(RUN, 3, "id") not in said(reply)
    assert (script.done, script.stats.turns, script.stats.refetches) == (3, 1, 0)


def test_previous_output_gone_reruns_its_command_and_counts_it() -> None:
    script = ReactiveSteps(RUN, 10, LINES)
    messages = history(script, 3, folded={3})
    reply = script(request(messages))
    assert call_of(reply).input["command"] == step_command(RUN, 3, LINES)
    assert call_of(reply).id == script.call_id(3, again=1)
    assert (script.stats.refetches, script.stats.previous, script.stats.refetched) == (1, 1, [(3, 3)])
    # The re-run's output arrives: the key is read from it, and the agent goes on to step 4.
    messages = [*messages, *exchange(script, call_of(reply).id or "", 3)]
    reply = script(request(messages))
    assert call_of(reply).id == script.call_id(4) and step_value(RUN, 3) in said(reply)
    assert (script.done, script.stats.turns, script.stats.refetches, script.stats.previous) == (3, 2, 1, 1)


def test_a_far_id_gone_is_a_refetch_but_not_of_the_previous_step() -> None:
    script = ReactiveSteps(RUN, 20, LINES)
    messages = history(script, 12, folded=set(range(1, 12)))
    reply = script(request(messages))
    assert call_of(reply).input["command"] == step_command(RUN, 4, LINES)
    assert (script.stats.refetches, script.stats.previous, script.stats.refetched) == (1, 0, [(12, 4)])
    messages = [*messages, *exchange(script, call_of(reply).id or "", 4)]
    reply = script(request(messages))
    assert call_of(reply).id == script.call_id(13)
    assert step_value(RUN, 12) in said(reply) and step_value(RUN, 4, "id") in said(reply)


def test_a_value_counts_wherever_the_prompt_shows_it() -> None:
    """A summary (or the agent's own earlier words) that kept the value is as good as the output."""
    script = ReactiveSteps(RUN, 20, LINES)
    messages = history(script, 12, folded=set(range(1, 12)))
    messages[0] = {"role": "user", "content": f"Summary: step 4 printed id {step_value(RUN, 4, 'id')}."}
    reply = script(request(messages))
    assert call_of(reply).id == script.call_id(13) and script.stats.refetches == 0


def test_counts_its_steps_from_its_own_call_ids_when_the_history_is_shortened() -> None:
    script = ReactiveSteps(RUN, 30, LINES)
    messages = [USER, *exchange(script, script.call_id(21), 21)]  # only step 21 left: a compacted history
    reply = script(request(messages))
    assert call_of(reply).id == script.call_id(22) and script.done == 21
    # After the client's own compaction no result is left: the script does not go back to step 1, it
    # re-fetches the step it was on.
    reply = script(request([{"role": "user", "content": "This session is being continued. Go on."}]))
    assert call_of(reply).id == script.call_id(21, again=1) and script.stats.previous == 1


def test_openai_tool_messages() -> None:
    script = ReactiveSteps(RUN, 5, LINES)
    call = {"id": script.call_id(2), "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    messages: list[Any] = [USER, {"role": "assistant", "content": None, "tool_calls": [call]}]
    messages.append({"role": "tool", "tool_call_id": script.call_id(2), "content": step_output(RUN, 2, LINES)})
    assert call_of(script(request(messages, api="openai"))).id == script.call_id(3)
    messages[-1] = {**messages[-1], "content": "[folded]"}
    assert call_of(script(request(messages, api="openai"))).id == script.call_id(2, again=1)


def test_gives_up_on_a_key_after_max_tries_and_finishes() -> None:
    script = ReactiveSteps(RUN, 3, LINES)
    messages = history(script, 3, folded={3})
    for attempt in range(1, MAX_TRIES + 1):
        assert call_of(script(request(messages))).id == script.call_id(3, again=attempt)
    final = script(request(messages))
    assert not [b for b in final.blocks if isinstance(b, ToolCall)]
    assert "key of step 3 is unknown" in said(final) and "all 3 steps are done" in said(final)
    assert (script.stats.refetches, script.stats.given_up, script.stats.turns) == (MAX_TRIES, 1, MAX_TRIES + 1)


def test_summary_and_side_requests_are_not_turns() -> None:
    script = ReactiveSteps(RUN, 5, LINES)
    ask = {"role": "user", "content": "CRITICAL: Respond with TEXT ONLY. Create a detailed summary of the conversation"}
    assert "steps 1-0 done" in said(script(request([USER, ask])))
    assert said(script(request([USER], tools=False))) == "Side request answered."
    assert (script.stats.turns, script.stats.compactions) == (0, 1)


@given(step=st.integers(1, 200), visible=st.sets(st.integers(1, 200)))
def test_refetches_exactly_the_first_needed_key_not_shown(step: int, visible: set[int]) -> None:
    script = ReactiveSteps(RUN, 300, 4)
    folded = set(range(1, step + 1)) - visible
    body = request(history(script, step, folded)).body
    gone = [(j, name) for j, name in needs(step) if j not in visible]
    assert missing(prompt_text(body), RUN, step) == gone
    reply = script(request(history(script, step, folded)))
    expected = step_command(RUN, gone[0][0], 4) if gone else step_command(RUN, step + 1, 4)
    assert call_of(reply).input["command"] == expected
    assert script.stats.previous == (1 if gone and gone[0] == (step, "key") else 0)


_missing_cli = unavailable_reason()


@pytest.mark.slow
@pytest.mark.skipif(_missing_cli is not None, reason=_missing_cli or "")
def test_claude_code_through_serve_finishes_a_reactive_task(tmp_path: Path) -> None:
    """Eight 24 KB steps, every other one also needing the id from 3 steps back, through ``serve`` at its
    defaults with the real Claude Code running the commands: every value reaches the upstream through Bash
    output, the run finishes, and every turn is a step, a re-fetch or the final answer."""
    steps = 8
    script = ReactiveSteps("e2e", steps, 3000, reaches=(Reach(3, 2),))
    with ScriptedUpstream(script, keep=None) as upstream:
        where = ["--db", str(tmp_path / "s.db"), "--log", str(tmp_path / "proxy.log")]
        served = ServeProcess(tmp_path, *where, "--anthropic-upstream", upstream.base_url).start()
        try:
            run = run_claude(
                served.base_url,
                "Run the numbered steps with the Bash tool until they are done.",
                workdir=tmp_path / "work",
                home=tmp_path / "claude",
                max_turns=3 * steps + 5,
                timeout=600,
            )
        finally:
            served.stop(timeout=60)
    assert run.ok, run.stderr[-2000:]
    stats = script.stats
    assert script.done == steps and stats.given_up == 0
    assert stats.turns == steps + 1 + stats.refetches
    outputs: dict[str, list[str]] = {}  # every form each call's result reached the upstream in
    for sent in upstream.generation_requests():
        for message in sent.messages:
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    outputs.setdefault(block["tool_use_id"], []).append(json.dumps(block.get("content")))
    ours = {call: forms for call, forms in outputs.items() if call.startswith("toolu_e2e_")}
    assert {int(call.split("_")[2]) for call in ours} == set(range(1, steps + 1))
    assert len(ours) == steps + stats.refetches
    for call, forms in ours.items():
        step = int(call.split("_")[2])
        for name in ("id", "key"):
            line = f"{name} of step {step}: {step_value('e2e', step, name)}"
            assert any(line in form for form in forms), call
