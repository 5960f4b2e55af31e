"""Replaying a shared Claude Code transcript through the scripted upstream with the real SDKs.

The proxy's replay test and bench stand on this: the upstream must serve each recorded assistant message
(tool call ids included) for the history that preceded it, in either wire format.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.lazy_sdk import lazy
from support.paths import NORMALIZED
from upstream import Reply, ScriptedUpstream, Text, ToolCall
from upstream.replay import TranscriptReplay, anthropic_history, load_transcript, reply_from_message, tail_key

anthropic = lazy("anthropic")
openai = lazy("openai")

SESSION = NORMALIZED / "cc_subagent_a2898e3.jsonl"

pytestmark = pytest.mark.skipif(not SESSION.is_file(), reason=f"shared transcript {SESSION} is missing")


def expected_blocks(reply: Reply) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for block in reply.blocks:
        if isinstance(block, Text):
            out.append(("text", block.text))
        elif isinstance(block, ToolCall):
            out.append(("tool_use", block.id, block.name, block.input))
    return out


def test_replay_over_anthropic_serves_every_recorded_assistant_message(upstream: ScriptedUpstream) -> None:
    transcript = load_transcript(SESSION)
    replay = TranscriptReplay(transcript)
    upstream.script = replay
    client = anthropic.Anthropic(base_url=upstream.base_url, api_key="sk-ant-test", max_retries=0)
    turns = [i for i, m in enumerate(transcript) if m["role"] == "assistant"]
    for index in turns:
        system, messages = anthropic_history(transcript[:index])
        with client.messages.stream(model="claude-test", max_tokens=1024, system=system, messages=messages) as stream:
            got = stream.get_final_message()
        blocks = [("text", b.text) if b.type == "text" else (b.type, b.id, b.name, b.input) for b in got.content]  # type: ignore[union-attr]
        assert blocks == expected_blocks(reply_from_message(transcript[index])), f"assistant message {index}"
    assert (replay.served, replay.missed) == (len(turns), 0)
    sizes = [upstream.prompt_tokens(r.body) for r in upstream.generation_requests()]
    assert sizes == sorted(sizes)


def test_replay_over_openai_and_a_foreign_request_gets_the_fallback(upstream: ScriptedUpstream) -> None:
    transcript = load_transcript(SESSION)
    replay = TranscriptReplay(transcript)
    upstream.script = replay
    client = openai.OpenAI(base_url=upstream.openai_base_url, api_key="sk-test", max_retries=0)
    index = max(i for i, m in enumerate(transcript) if m["role"] == "assistant" and m.get("tool_calls"))
    completion = client.chat.completions.create(model="gpt-test", messages=transcript[:index])  # type: ignore[arg-type]
    expected = reply_from_message(transcript[index])
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name) for c in calls] == [  # type: ignore[union-attr]
        (b.id, b.name) for b in expected.blocks if isinstance(b, ToolCall)
    ]
    summary = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "Summarize."}])
    assert summary.choices[0].message.content == replay.fallback.blocks[0].text  # type: ignore[union-attr]
    assert (replay.served, replay.missed) == (1, 1)


def test_tail_key_reads_the_same_in_both_formats() -> None:
    transcript = load_transcript(SESSION)
    for index, message in enumerate(transcript):
        if message["role"] == "assistant":
            _, messages = anthropic_history(transcript[:index])
            assert tail_key(messages) == tail_key(transcript[:index])
