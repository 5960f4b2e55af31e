"""Two conversations of two credentials, folded by the proxy's own engine (``Compaction`` over a real store),
with the recall tools listed in every request: what the recall tools' tests read back.

Each conversation reads files whose outputs name identifiers of its own (``alpha_…``/``bravo_…``), one that
both share (``shared_marker_word``), and a secret (conversation A: an AWS secret key given with its variable
name, then mentioned bare). The note each one's markers carry (capability, handle) is read from what the
proxy would forward upstream, as the model would read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microcompact.messages import content_text
from microcompact.recall_tools.stdio import EXPAND_DESCRIPTION, RECALL_DESCRIPTION
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import proxy_config
from microcompact.server.session_key import SessionKeys

KEY_A = "sk-alice-0123456789abcdefSECRET"
KEY_B = "sk-bob-fedcba9876543210SECRET"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
NOTE = re.compile(r'conversation="([0-9a-f]{24})".*?this summary is handle "(m[0-9]+)"')
OA = OpenAIFormat()


def tools(prefix: str = "mcp__microcompact__") -> list[dict[str, Any]]:
    """The two tools as a Chat Completions request lists them (Claude Code's and Codex's names)."""
    return [
        {"type": "function", "function": {"name": f"{prefix}{name}", "description": text, "parameters": {}}}
        for name, text in (("recall", RECALL_DESCRIPTION), ("expand", EXPAND_DESCRIPTION))
    ]


@dataclass
class Folded:
    """One conversation after its folds: its stored id, and the note its last forwarded marker carried."""

    session_id: str
    conversation: str
    marker_handle: str
    forwarded: list[dict[str, Any]]


def _step(history: list[dict[str, Any]], tag: str, k: int, long_output: int = 0) -> None:
    call_id = f"{tag}{k}"
    path = f"src/{tag}/module_{k}.py"
    history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "read", "arguments": f'{{"path": "{path}"}}'}}
            ],
        }
    )
    lines = [f"def {tag}_function_{k}_{i}(): return {i}" for i in range(60)]
    extra = ""
    if tag == "alpha" and k == 1:
        extra = f"\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"
    if tag == "alpha" and k == 2:
        extra = f"\nthe deploy used {AWS_SECRET} again\n"
    if k == 0 and long_output:
        extra += "\n" + "x" * long_output
    content = f"{path}: shared_marker_word {tag}_unique_{k}\n" + "\n".join(lines) + extra
    history.append({"role": "tool", "tool_call_id": call_id, "content": content})


def fold_two_conversations(store: Any, tmp: Path, steps: int = 14, long_output: int = 0) -> tuple[Folded, Folded]:
    """Drive conversation A (credential A) and B (credential B) through the proxy's engine until each has
    folded several tool outputs; the requests list the recall tools, so the markers carry the note."""
    config_file = tmp / "cadence.yaml"
    config_file.write_text("compression:\n  micro_compact_schedule: cadence\n")
    router = SessionRouter(proxy_config(config_file, 8192), store=store)
    compaction = Compaction(router, Metrics())
    keys = SessionKeys(bytes(range(32)))
    body = {"model": "gpt-test", "tools": tools()}
    try:
        return tuple(  # type: ignore[return-value]
            _fold(compaction, keys, body, credential, tag, steps, long_output)
            for credential, tag in ((KEY_A, "alpha"), (KEY_B, "bravo"))
        )
    finally:
        router.close()


def _fold(
    compaction: Compaction,
    keys: SessionKeys,
    body: dict[str, Any],
    credential: str,
    tag: str,
    steps: int,
    long_output: int = 0,
) -> Folded:
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Refactor the {tag} package."}]
    headers = {"authorization": f"Bearer {credential}"}
    key = keys.key("openai", headers, "", [history[0]])
    for k in range(3):
        _step(history, tag, k, long_output)
    forwarded: list[dict[str, Any]] = []
    for k in range(3, steps):
        prepared = compaction.prepare(OA, body, key, history)
        forwarded = prepared.messages
        session = prepared.session
        assert session is not None and session.background is not None
        compaction.answered(prepared, None)
        session.background.wait(30)
        compaction.follow_up(key)
        _step(history, tag, k)
    prepared = compaction.prepare(OA, body, key, history)
    forwarded = prepared.messages
    assert prepared.session is not None
    notes = [NOTE.search(content_text(m)) for m in forwarded if m.get("role") == "assistant"]
    found = [n for n in notes if n is not None]
    assert found, f"no marker of conversation {tag} names the recall tools"
    return Folded(prepared.session.session_id, found[-1].group(1), found[-1].group(2), forwarded)


__all__ = ["AWS_SECRET", "KEY_A", "KEY_B", "NOTE", "Folded", "fold_two_conversations", "tools"]
