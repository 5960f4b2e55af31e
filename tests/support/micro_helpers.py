"""The deterministic recording summarizer and the small turn builders shared by the micro, background
and router tests."""

from __future__ import annotations

import json


class Recorder:
    """A deterministic summarizer that remembers what it was asked."""

    name = "recorder"

    def __init__(self, fail_on: set[str] | None = None, echo_condense: bool = False):
        self.calls: list[list[dict]] = []
        self.fail_on = fail_on or set()
        self.echo_condense = echo_condense
        self.condense_calls = 0

    def merge(self, summary, exchange):
        self.calls.append(exchange)
        ids = [tc["id"] for m in exchange for tc in (m.get("tool_calls") or [])]
        if self.fail_on & set(ids) or "*" in self.fail_on:
            raise RuntimeError("model down")
        line = "- " + (",".join(ids) or "answer")
        return (summary + "\n" + line).strip()

    def batch(self, summary, messages, focus=None):
        return (summary + f"\n- batch of {len(messages)} messages").strip()

    def condense(self, summary, target_tokens):
        self.condense_calls += 1
        return summary if self.echo_condense else summary[: len(summary) // 4]


def call(cid):
    return {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})}}


def turn(n, iterations=2, size=200):
    msgs = [{"role": "user", "content": f"request {n}"}]
    for k in range(iterations):
        cid = f"c{n}_{k}"
        msgs.append({"role": "assistant", "content": f"step {k}", "tool_calls": [call(cid)]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": "word " * size})
    msgs.append({"role": "assistant", "content": f"done {n}"})
    return msgs
