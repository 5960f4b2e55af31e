"""Builders the test files share, so a test says only what is particular to it."""

from __future__ import annotations

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
