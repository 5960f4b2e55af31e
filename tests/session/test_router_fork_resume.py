"""A branch forked from its parent's compacted prefix must be found again after a restart, as the first
branch is: Claude Code's background fork sends its history under the main agent's session id, so the
proxy holds such branches in every long session with sub-agents (``test_proxy_claude_code_fork``)."""

from __future__ import annotations

import json
from pathlib import Path

from test_sync_history import small_config

from microcompact.messages import is_marker
from microcompact.replay import load_transcript
from microcompact.router import SessionRouter
from microcompact.store import open_store
from support.builders import request_points
from support.paths import NORMALIZED


def test_a_fork_from_a_compacted_prefix_resumes_after_a_restart(tmp_path: Path) -> None:
    history = load_transcript(NORMALIZED / "cc_ae4a77f8.jsonl")[:200]
    history = history[: request_points(history)[-1]]
    edited = [*history[:-1], {**history[-1], "content": "edited: " + json.dumps(history[-1].get("content"))}]
    more = [*edited, {"role": "assistant", "content": "Done with the edited request."}]
    more.append({"role": "user", "content": "And now?"})
    with open_store(tmp_path / "s.db") as store:
        router = SessionRouter(small_config(), store=store)
        for end in request_points(history):
            router.route("key", history[:end]).session.compacted(history[:end])
        fork = router.route("key", edited)
        assert fork.session.session_id == "key~2" and any(is_marker(m) for m in fork.session.transcript)
        fork.session.compacted(edited)
        router.close()
    with open_store(tmp_path / "s.db") as store:
        router = SessionRouter(small_config(), store=store)
        resumed = router.route("key", more)
        try:
            assert resumed.forked_from is None and resumed.session.session_id == "key~2"
            assert resumed.sync.matched == len(edited) and resumed.sync.appended == 2
        finally:
            router.close()
