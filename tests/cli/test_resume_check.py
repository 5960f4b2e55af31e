"""Resuming a stored replay only with the transcript it was made from (issue 8, item 3): the stored prefix is
checked message by message (a digest of each message's API form), a mismatch is refused naming the first
message that differs, and the default session id differs for different transcripts with the same name.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.config import parse_config
from microcompact.identity import digest
from microcompact.replay import (
    ResumeMismatch,
    default_session_id,
    load_transcript,
    replay,
    resume_start,
    transcript_digest,
)
from microcompact.session import Session
from microcompact.store import SQLiteStore, open_store
from microcompact.store.codec import stored_form
from microcompact.tokens import EstimateCounter, TokenCounter


def agent_transcript(seed: int, turns: int = 8) -> list[dict]:
    """A seeded coding-agent transcript: requests, tool calls with outputs, answers."""
    rng = random.Random(seed)
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"task {seed}.{t}: " + "please fix it " * rng.randint(5, 40)})
        for k in range(rng.randint(1, 3)):
            cid = f"call_{seed}_{t}_{k}"
            msgs.append(
                {
                    "role": "assistant",
                    "content": f"looking {k}",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "Bash", "arguments": json.dumps({"cmd": f"ls {k}"})},
                        }
                    ],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": cid, "content": "file.py\n" * rng.randint(20, 400)})
        msgs.append({"role": "assistant", "content": f"done {t}"})
    return msgs


def write_jsonl(path: Path, messages: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run(*args) -> CliRunner:
    return CliRunner().invoke(app, ["replay", *map(str, args)])


def stored_rows(db: Path) -> list[dict]:
    with open_store(str(db), read_only=True) as st:
        return [m for s in st.list_sessions() for m in st.export(s["id"], include_absorbed=True)]


def test_resuming_with_another_transcript_is_refused_naming_the_first_difference(home, tmp_path):
    a = agent_transcript(1)
    b = [*a[:10], {**a[10], "content": a[10]["content"] + " (edited)"}, *a[11:]]  # differs at message 10
    db = tmp_path / "s.db"
    first = run(write_jsonl(tmp_path / "a.jsonl", a), "--context-limit", 20000, "--db", db, "--session", "S")
    assert first.exit_code == 0, first.output
    before = stored_rows(db)
    res = run(write_jsonl(tmp_path / "b.jsonl", b), "--context-limit", 20000, "--db", db, "--session", "S")
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "message 10" in lines[0] and "b.jsonl" in lines[0], res.output
    assert "resuming session" not in res.output
    assert stored_rows(db) == before  # nothing written
    # A shorter or a completely different transcript: refused too.
    shorter = a[: next(i for i in range(5, len(a)) if a[i]["role"] == "user")]  # a valid prefix: whole turns
    for other in (shorter, agent_transcript(2)):
        res = run(write_jsonl(tmp_path / "c.jsonl", other), "--context-limit", 20000, "--db", db, "--session", "S")
        assert res.exit_code == 2 and "another transcript" in res.output, res.output
    # The same transcript resumes as before (here: nothing left to do), whatever its key order.
    reordered = [dict(reversed(list(m.items()))) for m in a]
    res = run(write_jsonl(tmp_path / "a2.jsonl", reordered), "--context-limit", 20000, "--db", db, "--session", "S")
    assert res.exit_code == 0 and f"from message {len(a)} of {len(a)}" in res.output, res.output
    assert stored_rows(db) == before


def test_an_interrupted_replay_resumes_only_from_its_own_prefix(tmp_path):
    """Library level: after an interruption the stored prefix is checked; the same transcript resumes at the
    right place, an edited one is refused before anything is written."""
    msgs = agent_transcript(3)
    cfg = parse_config({"compression": {"micro_compact": True}, "model": {"context_length": 20_000}})
    with SQLiteStore(tmp_path / "s.db") as st:
        s = Session.open(st, "S", cfg, counter=TokenCounter(EstimateCounter()))
        replay(msgs[:30], s)
        s.close()
        s = Session.open(st, "S", cfg, counter=TokenCounter(EstimateCounter()))
        assert resume_start(s, msgs) == 30
        edited = [dict(m) for m in msgs]
        edited[4]["content"] = "something else"
        with pytest.raises(ResumeMismatch, match=r"message 4 \(counting from 0, role \w+\) differs from message 4"):
            resume_start(s, edited)
        rows = len(st.export("S", include_absorbed=True))
        replay(msgs, s, start=resume_start(s, msgs))
        s.close()
        assert len(st.export("S", include_absorbed=True)) > rows
        assert sorted(m["_src"] for m in st.export("S", include_absorbed=True) if "_src" in m) == list(range(len(msgs)))
        # A session no replay wrote is not taken for a replay's.
        agent = Session.open(st, "agent", cfg, counter=TokenCounter(EstimateCounter()))
        agent.extend(msgs[:3])
        agent.flush()
        with pytest.raises(ResumeMismatch, match="no replay wrote"):
            resume_start(agent, msgs)
        agent.close()


def test_message_digest_is_the_api_form(tmp_path):
    """The resume check compares the digest of each stored row with that of the source message as the store
    would hand it back (moved from replay.message_digest, now identity.digest over stored_form)."""
    m = {"role": "user", "content": "hi \ud800 there", "_ts": 1.5}
    assert digest(stored_form(m)) == digest({"content": "hi ? there", "role": "user"})  # as stored
    assert digest(stored_form(m)) != digest({"role": "user", "content": "hi  there"})
    path = write_jsonl(tmp_path / "t.jsonl", [{"role": "user", "content": "x"}])
    assert load_transcript(path)[0]["content"] == "x"


def test_same_file_name_different_content_gets_its_own_session(home, tmp_path):
    db = tmp_path / "s.db"
    a = write_jsonl(tmp_path / "one" / "session.jsonl", agent_transcript(4))
    b = write_jsonl(tmp_path / "two" / "session.jsonl", agent_transcript(5))
    assert default_session_id(a, load_transcript(a)) != default_session_id(b, load_transcript(b))
    assert default_session_id(a, load_transcript(a)).startswith("session-")
    for path in (a, b):
        res = run(path, "--context-limit", 20000, "--db", db, "--json")
        assert res.exit_code == 0 and "resuming session" not in res.output, res.output
    with open_store(str(db)) as st:
        ids = [s["id"] for s in st.list_sessions()]
        assert len(ids) == 2
        for sid, path in zip(ids, (a, b), strict=True):  # each holds its own transcript, once
            srcs = [m["_src"] for m in st.export(sid, include_absorbed=True) if "_src" in m]
            assert sorted(srcs) == list(range(len(load_transcript(path))))
    # Replaying a file again finds its own session.
    res = run(a, "--context-limit", 20000, "--db", db)
    assert res.exit_code == 0 and "resuming session session-" in res.output, res.output


def test_session_names_keep_their_bytes():
    """Default session ids name sessions already in users' stores, so transcript_digest's bytes are pinned:
    these values were computed by the implementation before the digest moved (replay.message_digest), on
    input where its encoding and identity.digest's differ (1e-05, an integer past 64 bits, a lone
    surrogate, non-ASCII, control and line-separator characters, nested key order)."""
    msgs = [
        {"role": "system", "content": "be brief", "_ts": 1.5},
        {"role": "user", "content": "hi \ud800 thére ✓", "_src": 0},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "Bash", "arguments": '{"x": 1e-05}'}}],
            "x": 1e-05,
            "big": 2**70,
        },
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": [{"type": "text", "text": "ok\u2028\x1f"}],
            "z": {"b": 1, "a": [1.0, -0.0]},
        },
    ]
    assert transcript_digest(msgs) == "b99dd7a827257748056d31b8f84044bb128dce163f55a29cddaf0242518a175c"
    assert default_session_id("/x/run.jsonl", msgs) == "run-b99dd7a82725"


@pytest.mark.slow
def test_a_finished_replay_with_cut_messages_resumes_at_its_end(tmp_path: Path, monkeypatch) -> None:
    """Batch pruning writes a cut copy of a long recorded message beside the original, under the same
    ``_src``: running the command again resumed into "holds recorded message 291 twice" (found by the
    PostgreSQL restart test); the copy is the library's, not a second recording."""
    from importlib import resources

    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    demo = Path(str(resources.files("microcompact") / "data" / "demo_transcript.jsonl"))
    db = tmp_path / "s.db"
    args = ["replay", str(demo), "--context-limit", "20000", "--db", str(db), "--session", "x", "--json"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    with SQLiteStore(db) as st:
        cut = [m for m in st.export("x", include_absorbed=True) if (m.get("_mc") or {}).get("cut")]
    assert cut and all(isinstance(m.get("_src"), int) for m in cut)  # the case: copies under the same _src
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    n = len(load_transcript(demo))
    assert f"resuming session x from message {n} of {n}" in again.stderr
    twice = CliRunner().invoke(
        app, ["replay", str(demo), "--context-limit", "20000", "--db", str(db), "--session", "y"]
    )
    assert twice.exit_code == 0, twice.output
    with SQLiteStore(db) as st:  # a real second copy of a recorded message is still refused
        row = next(m for m in st.export("y") if m.get("_src") == 0)
        st.append("y", [{k: v for k, v in row.items() if k not in ("_row", "_pos", "_tokens")}])
    dup = CliRunner().invoke(app, ["replay", str(demo), "--context-limit", "20000", "--db", str(db), "--session", "y"])
    assert dup.exit_code == 2 and "holds recorded message 0 twice" in dup.stderr, dup.output
