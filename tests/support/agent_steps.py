"""Hand-made coding-agent transcripts for the working-set tests: a user message, tool calls with results,
replies that mention identifiers, in the OpenAI chat shape the engines work on."""

from __future__ import annotations

import itertools
import json
from typing import Any

Message = dict[str, Any]
_ids = itertools.count()


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def reply(text: str) -> Message:
    return {"role": "assistant", "content": text}


def step(name: str, arguments: dict[str, Any], output: str, text: str = "") -> list[Message]:
    """One iteration: an assistant call and its result."""
    call_id = f"call_{next(_ids)}"
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return [
        {"role": "assistant", "content": text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def read(path: str, output: str, text: str = "") -> list[Message]:
    return step("Read", {"file_path": path}, output, text)


def edit(path: str, old: str, new: str, text: str = "") -> list[Message]:
    return step("Edit", {"file_path": path, "old_string": old, "new_string": new}, "edited", text)


def bash(command: str, output: str, text: str = "") -> list[Message]:
    return step("Bash", {"command": command}, output, text)


def filler(n: int, tag: str = "x") -> list[Message]:
    """``n`` iterations that share no identifier with anything else (plain words only)."""
    out: list[Message] = []
    for k in range(n):
        out += bash(f"echo step {tag} {k}", f"plain output {tag} {k}", text=f"looking at step {k}")
    return out


__all__ = ["bash", "edit", "filler", "read", "reply", "step", "user"]
