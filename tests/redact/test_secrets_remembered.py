"""Secrets, once seen, stay hidden (issue 20, item 3): a value redacted with its context is hidden when a later
message repeats it bare, in micro markers, batch markers and HTTP summarizer requests, after a restart of a
stored session (a real SQLite file, the first half written by another process), and nowhere in the store or
the log in clear. Each case also runs with the memory's hiding switched off, to show the bare mention
would otherwise get through.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_secrets_end_to_end import MICRO, counter, planted_turn

from microcompact.config import parse_config
from microcompact.keys import SECRETS_META
from microcompact.messages import marker_kind
from microcompact.redact import redact_text, remembering
from microcompact.redact.secret_memory import KEY_FILE, SecretMemory
from microcompact.session import Session
from microcompact.store import SQLiteStore
from microcompact.summarizers import OpenAISummarizer
from microcompact.telemetry import setup_file_logging
from support.chat_server import ChatServer, notes
from support.secrets_table import AWS_1, AWS_3, REMENTIONS, URL_PW, escaped

SRC = str(Path(__file__).resolve().parents[2] / "src")
TESTS = str(Path(__file__).resolve().parents[1])

IDS = [row[0] for row in REMENTIONS]


def spellings(value: str) -> list[str]:
    """The value as it may appear in text: as is, JSON-escaped, with escaped slashes (also JSON-escaped)."""
    forms = {value, json.dumps(value)[1:-1], escaped(value)}
    return sorted(forms | {json.dumps(f)[1:-1] for f in forms})


def leaked(text: str, rows: list[tuple[str, str, str, str]] = REMENTIONS) -> list[str]:
    return [row[0] for row in rows if any(s in text for s in spellings(row[3]))]


def memory_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules still run; only the memory's hiding of remembered values is switched off."""
    monkeypatch.setattr(SecretMemory, "hide", lambda self, text, replacement: text)


def turns_for(rows: list[tuple[str, str, str, str]], filler: int = 12) -> list[list[dict[str, Any]]]:
    """For each row an exchange with the value in context, then (other exchanges later) one with it bare."""
    turns = [planted_turn(n, context) for n, (_, context, _, _) in enumerate(rows)]
    turns += [planted_turn(100 + n, bare) for n, (_, _, bare, _) in enumerate(rows)]
    return turns + [planted_turn(200 + k, "nothing to see") for k in range(filler)]


def run_turns(s: Session, turns: list[list[dict[str, Any]]]) -> list[str]:
    seen: list[str] = []
    for messages in turns:
        s.extend(messages)
        s.finalize_turn()
        seen += [m["content"] for m in s.transcript if marker_kind(m) == "micro"]
    return seen


def micro_markers(rows: list[tuple[str, str, str, str]]) -> str:
    s = Session(parse_config(MICRO), counter=counter())
    s.append({"role": "system", "content": "be brief"})
    seen = run_turns(s, turns_for(rows))
    assert seen, "micro passes should have run"
    return "\n".join(seen)


@pytest.mark.parametrize("row", REMENTIONS, ids=IDS)
def test_a_value_seen_with_context_is_hidden_when_repeated_bare(row: tuple[str, str, str, str]) -> None:
    assert leaked(micro_markers([row]), [row]) == []


@pytest.mark.parametrize("row", REMENTIONS, ids=IDS)
def test_without_the_memory_the_bare_mention_leaks(row: tuple[str, str, str, str], monkeypatch) -> None:
    memory_off(monkeypatch)
    assert leaked(micro_markers([row]), [row]) == [row[0]]


def test_a_user_message_teaches_the_memory() -> None:
    """User messages are never summarized: the value a user gave is learned when it is appended."""
    s = Session(parse_config(MICRO), counter=counter())
    s.append({"role": "system", "content": "be brief"})
    s.append({"role": "user", "content": f"deploy with AWS_SECRET_ACCESS_KEY={AWS_1}"})
    s.append({"role": "assistant", "content": "ok"})
    s.finalize_turn()
    markers = run_turns(s, [planted_turn(1, f"configured {AWS_1} in the vault"), *turns_for([], filler=12)])
    assert markers and leaked("\n".join(markers)) == []
    # the user's own message is kept as it was written: it is the client's, never summarized
    assert any(AWS_1 in str(m.get("content")) for m in s.transcript if m["role"] == "user")


def batch_marker(rows: list[tuple[str, str, str, str]]) -> str:
    cfg = parse_config(
        {
            "compression": {"protect_first_n": 1, "threshold": 0.5, "target_ratio": 0.05},
            "model": {"context_length": 4096},
        }
    )
    s = Session(cfg, counter=counter())
    s.append({"role": "system", "content": "be brief"})
    for n, (_, context, bare, _) in enumerate(rows):
        s.extend(planted_turn(n, context, padding=400))
        s.extend(planted_turn(100 + n, bare, padding=400))
    s.before_request()
    markers = [m["content"] for m in s.transcript if marker_kind(m) == "batch"]
    assert markers, "batch compaction should have run"
    return "\n".join(markers)


@pytest.mark.parametrize("rows", [REMENTIONS[:4], REMENTIONS[4:]], ids=["rows0-3", "rows4-7"])
def test_batch_marker_hides_remembered_values(rows: list[tuple[str, str, str, str]]) -> None:
    assert leaked(batch_marker(rows), rows) == []


def test_batch_marker_would_show_them_without_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    memory_off(monkeypatch)
    found = leaked(batch_marker(REMENTIONS[:4]), REMENTIONS[:4]) + leaked(batch_marker(REMENTIONS[4:]), REMENTIONS[4:])
    assert len(found) >= len(REMENTIONS) // 2


def http_requests(server: ChatServer) -> str:
    summarizer = OpenAISummarizer(
        "test-model", base_url=server.base_url, api_key_env="MICROCOMPACT_NO_KEY", timeout=5.0
    )
    s = Session(parse_config(MICRO), summarizer, counter=counter())
    s.append({"role": "system", "content": "be brief"})
    run_turns(s, turns_for(REMENTIONS))
    assert server.requests, "the summarizer should have been called"
    return json.dumps(server.requests, ensure_ascii=False)


def test_http_summarizer_requests_hide_remembered_values(chat_server: ChatServer, monkeypatch) -> None:
    monkeypatch.delenv("MICROCOMPACT_NO_KEY", raising=False)
    assert leaked(http_requests(chat_server)) == []


def test_http_summarizer_requests_would_carry_them_without_the_memory(chat_server: ChatServer, monkeypatch) -> None:
    monkeypatch.delenv("MICROCOMPACT_NO_KEY", raising=False)
    memory_off(monkeypatch)
    assert leaked(http_requests(chat_server)) == IDS


def test_a_model_that_echoes_a_remembered_value_bare_gets_it_hidden(chat_server: ChatServer, monkeypatch) -> None:
    """What comes back is redacted with the memory too: the accepted summary (the marker) and the log."""
    monkeypatch.delenv("MICROCOMPACT_NO_KEY", raising=False)
    chat_server.responder = lambda request: notes(f"Configured the service with key {AWS_1} and {URL_PW}.")
    summarizer = OpenAISummarizer(
        "test-model", base_url=chat_server.base_url, api_key_env="MICROCOMPACT_NO_KEY", timeout=5.0
    )
    s = Session(parse_config(MICRO), summarizer, counter=counter())
    s.append({"role": "system", "content": "be brief"})
    markers = run_turns(s, turns_for(REMENTIONS[:2]))
    assert markers and leaked("\n".join(markers)) == []
    assert any("Configured the service with key [REDACTED] and [REDACTED]" in m for m in markers)


# --------------------------------------------------------------------------- across a restart (SQLite file)


def first_half(db: Path | str, context: str) -> None:
    """A stored session that learns ``context``'s secret and absorbs the exchange, then closes."""
    with SQLiteStore(db) as store:
        s = Session(parse_config(MICRO), counter=counter(), store=store, session_id="stored")
        s.append({"role": "system", "content": "be brief"})
        for n, text in enumerate([context] + ["nothing to see"] * 12):
            s.extend(planted_turn(n, text))
            s.finalize_turn()
        active = [m for m in s.transcript if m["role"] != "user"]
        assert not any(context in str(m) for m in active), "the planted exchange should have been absorbed"
        s.close()


FIRST_HALF = "import sys\nfrom test_secrets_remembered import first_half\nfirst_half(sys.argv[1], sys.argv[2])\n"


def first_half_in_another_process(db: Path, home: Path, context: str) -> None:
    """The first half in a process of its own: nothing of it is in this process's memory afterwards."""
    env = {**os.environ, "MICROCOMPACT_HOME": str(home), "PYTHONPATH": os.pathsep.join([SRC, TESTS, TESTS + "/redact"])}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_HALF, str(db), context], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def first_half_here(db: Path, home: Path, context: str) -> None:
    """The first half in this process (``home`` is already $MICROCOMPACT_HOME): the session is closed and
    dropped, so the second half reads only what the store and the home hold."""
    assert os.environ["MICROCOMPACT_HOME"] == str(home)
    first_half(db, context)


# The restart: in this process in the fast suite, a real second process in the slow one.
FIRST_HALVES = [
    pytest.param(first_half_here, id="same-process"),
    pytest.param(first_half_in_another_process, id="other-process", marks=pytest.mark.slow),
]


def second_half(db: Path, bare: str) -> str:
    with SQLiteStore(db) as store:
        s = Session.open(store, "stored", parse_config(MICRO), counter=counter())
        markers = run_turns(s, [planted_turn(50, bare)] + [planted_turn(60 + k, "nothing to see") for k in range(12)])
        s.close()
    assert markers
    return "\n".join(markers)


@pytest.mark.parametrize("first_half_of", FIRST_HALVES)
@pytest.mark.parametrize("row", [REMENTIONS[0], REMENTIONS[1], REMENTIONS[6]], ids=[IDS[0], IDS[1], IDS[6]])
def test_the_memory_survives_a_restart_of_a_stored_session(row, tmp_path: Path, monkeypatch, first_half_of) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    db = tmp_path / "sessions.db"
    first_half_of(db, home, row[1])
    assert (home / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert leaked(second_half(db, row[2]), [row]) == []


@pytest.mark.parametrize("first_half_of", FIRST_HALVES)
def test_after_a_restart_without_the_memory_the_bare_mention_leaks(tmp_path: Path, monkeypatch, first_half_of) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    db = tmp_path / "sessions.db"
    row = REMENTIONS[0]
    first_half_of(db, home, row[1])
    memory_off(monkeypatch)
    assert leaked(second_half(db, row[2]), [row]) == [row[0]]


@pytest.mark.parametrize("first_half_of", FIRST_HALVES)
def test_another_install_key_cannot_match_but_keeps_the_digests(tmp_path: Path, monkeypatch, first_half_of) -> None:
    """A store shared by two installs: the other key's digests are kept, never matched, never lost."""
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    db = tmp_path / "sessions.db"
    first_half_of(db, tmp_path / "home", REMENTIONS[0][1])
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "other-home"))
    second_half(db, f"and {URL_PW} via postgres://u:{URL_PW}@h/db")  # learns a value under its own key
    with SQLiteStore(db) as store:
        stored = store.session_meta("stored")[SECRETS_META]
    assert len(stored["digests"]) == 2 and all(len(d) >= 1 for d in stored["digests"].values())


def test_the_store_and_the_log_hold_no_remembered_value_in_clear(tmp_path: Path, monkeypatch) -> None:
    """The transcript spells the value only with escaped slashes; the memory would hold it with plain
    ones. The SQLite file's bytes (and its WAL) and the log must not contain that spelling, nor its hex or
    base64; the stored memory holds digests."""
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    log_path = tmp_path / "agent.log"
    handler = setup_file_logging(log_path, level=logging.DEBUG)
    try:
        db = tmp_path / "sessions.db"
        with SQLiteStore(db) as store:
            s = Session(parse_config(MICRO), counter=counter(), store=store, session_id="kept")
            s.append({"role": "system", "content": "be brief"})
            context = f'{{"env": "AWS_SECRET_ACCESS_KEY={escaped(AWS_3)}"}}'
            bare = f'{{"cached": "{escaped(AWS_3)}"}}'
            turns = [planted_turn(0, context), planted_turn(1, bare)] + [planted_turn(2 + k, "x") for k in range(12)]
            markers = run_turns(s, turns)
            s.close()
            stored = store.session_meta("kept")[SECRETS_META]
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    assert markers and leaked("\n".join(markers), [REMENTIONS[6]]) == []
    assert stored["digests"] and stored["shapes"] == [["/", len(AWS_3)]]
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("sessions.db*"))
    assert escaped(AWS_3).encode() in raw  # the transcript itself, as the client sent it
    forms = [AWS_3, AWS_3.encode().hex(), base64.b64encode(AWS_3.encode()).decode()]
    assert [f for f in forms if f.encode() in raw] == []
    logged = log_path.read_bytes()
    assert [f for f in [*forms, escaped(AWS_3)] if f.encode() in logged] == []


def test_a_read_only_store_still_hides_and_does_not_complain_per_flush(tmp_path: Path, monkeypatch, caplog) -> None:
    """A read-only store cannot take the memory's new values (nor compact): nothing is logged per flush, and
    what was stored and what is learned is still hidden."""
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    db = tmp_path / "sessions.db"
    with SQLiteStore(db) as store:
        s = Session(parse_config(MICRO), counter=counter(), store=store, session_id="ro")
        s.append({"role": "system", "content": "be brief"})
        s.extend(planted_turn(0, REMENTIONS[0][1]))
        s.close()
    caplog.set_level(logging.INFO, logger="microcompact")
    with SQLiteStore(db, read_only=True) as store:
        s = Session.open(store, "ro", parse_config(MICRO), counter=counter())
        for n in range(3):
            s.extend(planted_turn(10 + n, REMENTIONS[1][1]))
            s.finalize_turn()
        with remembering(s.secrets):
            hidden = redact_text(f"{REMENTIONS[0][2]}; {REMENTIONS[1][2]}")
        s.close()
    assert leaked(hidden, REMENTIONS[:2]) == []
    assert "could not save the secret memory" not in caplog.text


@pytest.mark.parametrize("row", REMENTIONS[:3], ids=IDS[:3])
def test_a_long_bare_mention_read_before_the_value_was_learned_is_still_hidden(row: tuple[str, str, str, str]) -> None:
    """The rules' answer for a long text is remembered process-wide (microcompact.textmemo), and a bare
    value passes the rules: a long output read (and so remembered) before the session learned the value
    must still have it hidden once learned, since the memory hides on every call, after the rules."""
    _, context, bare, value = row
    long_bare = f"{bare}\n" + "ordinary build log line\n" * 20
    assert value in redact_text(long_bare)  # the rules alone pass it, and this reading is now remembered
    s = Session(parse_config(MICRO), counter=counter())
    s.append({"role": "system", "content": "be brief"})
    turns = [planted_turn(0, context), planted_turn(1, long_bare), *turns_for([], filler=12)]
    markers = run_turns(s, turns)
    assert markers and leaked("\n".join(markers), [row]) == []
