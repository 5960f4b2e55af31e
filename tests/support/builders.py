"""Builders the test files share, so a test says only what is particular to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from microcompact.config import Config, parse_config


def config(context_length: int = 20_000, **compression: Any) -> Config:
    """Micro-compaction on, a ``context_length``-token window, and ``compression`` options on top (which
    may turn ``micro_compact`` off again). A file with its own defaults binds them once:
    ``config = partial(builders.config, protect_first_n=1)``; a call's keywords still win."""
    return parse_config(
        {"compression": {"micro_compact": True, **compression}, "model": {"context_length": context_length}}
    )


def request_points(messages):
    """Where an agent would call the model: after a user message or the last of a call's tool results."""
    return [
        i + 1
        for i, m in enumerate(messages)
        if m["role"] in ("user", "tool") and (i + 1 == len(messages) or messages[i + 1]["role"] != "tool")
    ]


def short_turns(n: int, size: int = 120) -> list[dict[str, Any]]:
    """``n`` short agent turns (user, two tool iterations, answer): every pass runs at the end of a turn."""
    msgs: list[dict[str, Any]] = []
    for t in range(n):
        msgs.append({"role": "user", "content": f"request number {t}: please continue with the next step"})
        for k in range(2):
            cid = f"call_{t}_{k}"
            msgs.append(
                {
                    "role": "assistant",
                    "content": f"Step {k} of request {t}.",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "Bash", "arguments": json.dumps({"command": f"ls dir{t}_{k}"})},
                        }
                    ],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": cid, "content": f"file{t}_{k}.txt " * size})
        msgs.append({"role": "assistant", "content": f"Request {t} is done."})
    return msgs


def write_jsonl(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return path


def turns_file(folder: Path) -> Path:
    """Twelve short turns in ``folder``: at a 20K window, a replay with a score of passes in a tenth of the
    bundled demo's time, for the tests to which the transcript is incidental (what a command writes or
    refuses, not what compaction does to the demo)."""
    return write_jsonl(folder / "turns.jsonl", short_turns(12))
