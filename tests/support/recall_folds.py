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
from microcompact.recall_tools.note import EXPAND_DESCRIPTION, RECALL_DESCRIPTION
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


class FoldingProxy:
    """The proxy's engine over ``store`` (cadence schedule, 8K window: a fold at every request), driven as a
    client drives it: one request per tool step, its follow-up after the answer."""

    def __init__(self, store: Any, tmp: Path) -> None:
        config_file = tmp / "cadence.yaml"
        config_file.write_text("compression:\n  micro_compact_schedule: cadence\n")
        self.router = SessionRouter(proxy_config(config_file, 8192), store=store)
        self.compaction = Compaction(self.router, Metrics())
        self.keys = SessionKeys(bytes(range(32)))

    def key(self, credential: str, history: list[dict[str, Any]]) -> str:
        return self.keys.key("openai", {"authorization": f"Bearer {credential}"}, "", [history[0]])

    def request(self, body: dict[str, Any], key: str, history: list[dict[str, Any]]) -> tuple[str, list[Any]]:
        """One request and its follow-up: (the session id, the messages forwarded upstream)."""
        prepared = self.compaction.prepare(OA, body, key, history)
        session = prepared.session
        assert session is not None
        self.compaction.answered(prepared, None)
        if session.background is not None:  # serve's passes run inline with the extractive summarizer
            session.background.wait(30)
        self.compaction.follow_up(key)
        return session.session_id, prepared.messages

    def close(self) -> None:
        self.router.close()


def new_history(tag: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Refactor the {tag} package."}]


def step(history: list[dict[str, Any]], tag: str, k: int, long_output: int = 0) -> None:
    _step(history, tag, k, long_output)


def notes_in(forwarded: list[Any]) -> list[re.Match[str]]:
    """The recall notes of the forwarded markers, in order."""
    found = [NOTE.search(content_text(m)) for m in forwarded if m.get("role") == "assistant"]
    return [n for n in found if n is not None]


def fold_two_conversations(store: Any, tmp: Path, steps: int = 14, long_output: int = 0) -> tuple[Folded, Folded]:
    """Drive conversation A (credential A) and B (credential B) through the proxy's engine until each has
    folded several tool outputs; the requests list the recall tools, so the markers carry the note."""
    proxy = FoldingProxy(store, tmp)
    body = {"model": "gpt-test", "tools": tools()}
    out = []
    try:
        for credential, tag in ((KEY_A, "alpha"), (KEY_B, "bravo")):
            history = new_history(tag)
            key = proxy.key(credential, history)
            for k in range(steps):
                step(history, tag, k, long_output if k < 3 else 0)
                if k >= 2:
                    session_id, forwarded = proxy.request(body, key, history)
            found = notes_in(forwarded)
            assert found, f"no marker of conversation {tag} names the recall tools"
            out.append(Folded(session_id, found[-1].group(1), found[-1].group(2), forwarded))
    finally:
        proxy.close()
    return out[0], out[1]


__all__ = [
    "AWS_SECRET",
    "KEY_A",
    "KEY_B",
    "NOTE",
    "Folded",
    "FoldingProxy",
    "fold_two_conversations",
    "new_history",
    "notes_in",
    "step",
    "tools",
]
