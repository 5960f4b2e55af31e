"""aider itself (the pinned PyPI ``aider-chat``) through ``microcompact serve``: ten ``--message`` turns of
one chat are one stored conversation, and every request goes out as aider sent it.

aider sends its file-context pair ("I am not sharing any files..." / "Ok.") after the history and its
edit-format reminder as the last system message, and restores the history from Markdown with whitespace
added: before the fixed-block rule, every turn forked a new session. Skipped when aider is not installed
(tests/e2e/install-aider.sh, part of ``make e2e-install``). Each turn takes about 4 s (aider imports
litellm): about 45 s in all, so the test is slow.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from support.aider import run_aider, unavailable_reason
from support.chat_server import ChatServer
from support.serve_process import ServeProcess

_missing = unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing is not None, reason=_missing or "")]

TURNS = 10
FILE_CONTEXT = "I am not sharing any files that you can edit yet."


def test_ten_aider_turns_are_one_stored_conversation(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = tmp_path / "sessions.db"
    with ChatServer(responder=lambda body: f"Noted ({len(body['messages'])} messages).") as upstream:
        serve = ServeProcess(home, "--openai-upstream", upstream.base_url, "--db", str(db)).start()
        try:
            for turn in range(TURNS):
                out = run_aider(f"{serve.base_url}/v1", f"turn {turn}: remember {turn * 7}", tmp_path / "work", home)
                assert "Noted" in out
        finally:
            assert serve.stop() == 0
        requests = list(upstream.requests)
    assert len(requests) == TURNS
    for turn, body in enumerate(requests):
        messages = body["messages"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        assert users[-1].startswith(f"turn {turn}:"), "the current message last among the user messages"
        assert users[-2] == FILE_CONTEXT, "the file-context pair where aider put it: before the current message"
        assert messages[-1]["role"] == "system", "the reminder last"
        assert len(users) == turn + 2, "the whole chat so far, restored by aider"
    with sqlite3.connect(db) as connection:
        sessions = connection.execute("SELECT id, meta FROM sessions").fetchall()
    assert len(sessions) == 1, f"one stored conversation, not one per turn: {[s[0] for s in sessions]}"
    assert '"branches":1' in sessions[0][1].replace(" ", "")
    assert any("listening on" in line for line in serve.stderr)
