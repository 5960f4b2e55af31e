"""Inputs the command line used to accept without a word (issue 20, item 6): each is now one line on stderr
naming what and where (``FILE:LINE`` for a transcript, the key path for a config, the option for a flag)
and exit 2, or has a documented meaning that is checked here.

The table runs the real command through typer's runner (as ``test_bad_input.py`` does); a sample of it
runs again in a real process, where a traceback would show.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_bad_input import assert_one_line_error, home, invoke, subprocess_run, write

__all__ = ["home"]  # the fixture, used by name

U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "ok"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "a", "content": "x"}


def transcript(d: Path, *messages: dict[str, Any]) -> Path:
    return write(d / "t.jsonl", *map(json.dumps, messages))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_config(text: str) -> Callable[[Path], list[Any]]:
    def make(d: Path) -> list[Any]:
        cfg = d / "c.yaml"
        cfg.write_text(text, encoding="utf-8")
        return ["replay", transcript(d, U, A), "--config", cfg]

    return make


def replaying(*messages: dict[str, Any], extra: tuple[Any, ...] = ()) -> Callable[[Path], list[Any]]:
    return lambda d: ["replay", transcript(d, *messages), *extra]


def ok_replay(*extra: Any) -> Callable[[Path], list[Any]]:
    return lambda d: ["replay", transcript(d, U, A), *extra]


def db_in(d: Path) -> Path:
    """A store holding session ``s`` (for the read-only ``sessions`` commands)."""
    db = d / "s.db"
    if not db.exists():
        assert invoke("replay", transcript(d, U, A), "--db", db, "--session", "s").exit_code == 0
    return db


# (id, the command line from a temporary folder, fragments of the one error line; "{d}" is that folder)
REFUSED: list[tuple[str, Callable[[Path], list[Any]], tuple[str, ...]]] = [
    # --- config: wrong types and ranges (pydantic strict mode), named by key path
    (
        "cadence -5",
        with_config("compression:\n  micro_compact_every_n_turns: -5\n"),
        ("compression.micro_compact_every_n_turns", "-5", "ge 1"),
    ),
    (
        "cadence 1e23",
        with_config("compression:\n  micro_compact_every_n_turns: 99999999999999999999999\n"),
        ("compression.micro_compact_every_n_turns", "le 10000"),
    ),
    ("bool as 'on'", with_config("compression:\n  micro_compact: 'on'\n"), ("compression.micro_compact", "'on'")),
    ("bool as 1", with_config("compression:\n  enabled: 1\n"), ("compression.enabled", "boolean")),
    ("int as '3'", with_config("compression:\n  protect_first_n: '3'\n"), ("compression.protect_first_n", "'3'")),
    ("int as 3.0", with_config("compression:\n  protect_first_n: 3.0\n"), ("compression.protect_first_n", "3.0")),
    ("float as '0.5'", with_config("compression:\n  threshold: '0.5'\n"), ("compression.threshold", "'0.5'")),
    ("price .inf", with_config("pricing:\n  input: .inf\n"), ("pricing.input", "finite")),
    ("price as '1'", with_config("pricing:\n  input: '1'\n"), ("pricing.input", "'1'")),
    ("cache as 'yes'", with_config("pricing:\n  cache: 'yes'\n"), ("pricing.cache", "'yes'")),
    ("breakpoints 1.0", with_config("pricing:\n  max_breakpoints: 1.0\n"), ("pricing.max_breakpoints",)),
    ("window as '200000'", with_config("model:\n  context_length: '200000'\n"), ("model.context_length",)),
    ("timeout as '5'", with_config("auxiliary:\n  compression:\n    timeout: '5'\n"), ("compression.timeout",)),
    ("empty model", with_config("auxiliary:\n  compression:\n    model: ''\n"), ("compression.model",)),
    (
        "api_key_env ''",
        with_config("auxiliary:\n  compression:\n    api_key_env: ''\n"),
        ("compression.api_key_env", "name of an environment variable"),
    ),
    (
        "api_key_env with a space",
        with_config("auxiliary:\n  compression:\n    api_key_env: 'A B'\n"),
        ("compression.api_key_env",),
    ),
    (
        "base_url with a space",
        with_config("auxiliary:\n  compression:\n    base_url: 'http://a b/v1'\n"),
        ("compression.base_url", "spaces"),
    ),
    ("empty family", with_config("thinking:\n  families:\n    '': keep\n"), ("thinking.families", "empty")),
    # --- options
    ("--session ''", ok_replay("--session", ""), ("--session must not be empty",)),
    ("--session blank", ok_replay("--session", "  "), ("--session must not be empty",)),
    ("--session newline", ok_replay("--session", "a\nb"), ("--session 'a\\nb'", "control character")),
    ("--session tab", ok_replay("--session", "a\tb"), ("--session", "control character")),
    ("--session bidi", ok_replay("--session", "a\u202eb"), ("--session", "control character")),
    ("--session spaces", ok_replay("--session", " s"), ("--session ' s'", "spaces around it")),
    ("--session huge", ok_replay("--session", "x" * 5000), ("--session is 5000 characters", "at most 256")),
    ("--every -5", ok_replay("--every", -5), ("compression.micro_compact_every_n_turns", "ge 1")),
    ("--every huge", ok_replay("--every", 10**23), ("compression.micro_compact_every_n_turns", "le 10000")),
    ("--db ''", ok_replay("--db", ""), ("--db: the store location is empty",)),
    ("--db newline", ok_replay("--db", "a\nb.db"), ("--db:", "control character")),
    ("--db sqlite://", ok_replay("--db", "sqlite://"), ("--db:", "sqlite:///RELATIVE/FILE")),
    ("--db mysql://", ok_replay("--db", "mysql://h/db"), ("--db: 'mysql' is not a store",)),
    ("--log newline", ok_replay("--log", "a\nb.log"), ("--log 'a\\nb.log'", "control character")),
    ("--out newline", ok_replay("--out", "a\nb.jsonl"), ("--out 'a\\nb.jsonl'", "control character")),
    ("--config newline", ok_replay("--config", "a\nb.yaml"), ("--config", "control character")),
    ("transcript newline", lambda d: ["replay", "a\nb.jsonl"], ("TRANSCRIPT 'a\\nb.jsonl'",)),
    (
        "--base-url newline",
        ok_replay("--summarizer", "openai", "--model", "m", "--base-url", "http://x\n/v1"),
        ("auxiliary.compression.base_url", "control characters"),
    ),
    ("--base-url alone", ok_replay("--base-url", "http://127.0.0.1:9/v1"), ("--base-url only applies",)),
    ("--model alone", ok_replay("--model", "m"), ("--model only applies", "--summarizer openai")),
    ("--api-key-env alone", ok_replay("--api-key-env", "K"), ("--api-key-env only applies",)),
    ("--api-key-env ''", ok_replay("--summarizer", "openai", "--api-key-env", ""), ("compression.api_key_env",)),
    ("--model ''", ok_replay("--summarizer", "openai", "--model", ""), ("compression.model",)),
    ("sessions --db ''", lambda d: ["sessions", "list", "--db", ""], ("--db: the store location is empty",)),
    ("show ''", lambda d: ["sessions", "show", "", "--db", db_in(d)], ("SESSION_ID must not be empty",)),
    ("show newline", lambda d: ["sessions", "show", "s\n", "--db", db_in(d)], ("SESSION_ID", "control")),
    ("search --limit -1", lambda d: ["sessions", "search", "s", "hi", "--db", db_in(d), "--limit", -1], ("--limit",)),
    ("search --limit 0", lambda d: ["sessions", "search", "s", "hi", "--db", db_in(d), "--limit", 0], ("--limit",)),
    (
        "search --limit 1e23",
        lambda d: ["sessions", "search", "s", "hi", "--db", db_in(d), "--limit", 10**23],
        ("--limit must be between 1 and 10000",),
    ),
    ("search ''", lambda d: ["sessions", "search", "s", " ", "--db", db_in(d)], ("QUERY must not be empty",)),
    (
        "import --record -1",
        lambda d: ["import", transcript(d, U, A), "--from", "adp", "--record", -1],
        ("--record must be",),
    ),
    ("import newline", lambda d: ["import", "a\nb.json"], ("FILE 'a\\nb.json'", "control character")),
    ("report newline", lambda d: ["report", "a\nb.log"], ("LOGFILE 'a\\nb.log'", "control character")),
    # --- transcript lines with the library's keys, named by FILE:LINE
    ("_tokens", replaying(U, {**A, "_tokens": 5}), ("t.jsonl:2:", "'_tokens'", "cached token count")),
    ("_row", replaying(U, {**A, "_row": 3}), ("t.jsonl:2:", "'_row'", "row id")),
    ("_pos", replaying({**U, "_pos": 0}, A), ("t.jsonl:1:", "'_pos'")),
    ("_src", replaying(U, {**A, "_src": 0}), ("t.jsonl:2:", "'_src'", "replay's index")),
    ("_src with --db", replaying(U, {**A, "_src": 7}, extra=("--db", "{d}/x.db")), ("t.jsonl:2:", "'_src'")),
    ("_state", replaying(U, {**A, "_state": "absorbed"}), ("t.jsonl:2:", "'_state'", "--include-absorbed")),
    ("_absorbed_by", replaying(U, {**A, "_absorbed_by": 4}), ("t.jsonl:2:", "'_absorbed_by'")),
    ("_mc a string", replaying(U, {**A, "_mc": "garbage"}), ("t.jsonl:2:", "_mc must be an object", "'garbage'")),
    ("_mc a list", replaying(U, {**A, "_mc": [1]}), ("t.jsonl:2:", "_mc must be an object")),
    ("_mc bad marker", replaying(U, {**A, "_mc": {"marker": "forged"}}), ("t.jsonl:2:", "_mc.marker", "'forged'")),
    ("_ts a string", replaying(U, {**A, "_ts": "yesterday"}), ("t.jsonl:2:", "_ts must be a time", "'yesterday'")),
    ("_ts true", replaying(U, {**A, "_ts": True}), ("t.jsonl:2:", "_ts must be a time")),
    ("_ts negative", replaying(U, {**A, "_ts": -5}), ("t.jsonl:2:", "_ts must be a time", "-5")),
    ("_ts in nanoseconds", replaying(U, {**A, "_ts": 1.7e18}), ("t.jsonl:2:", "_ts must be a time")),
    ("name 5", replaying(U, {**A, "name": 5}), ("t.jsonl:2:", "name must be a non-empty string, got 5")),
    ("name ''", replaying({**U, "name": ""}, A), ("t.jsonl:1:", "name must be a non-empty string")),
    (
        "tool_call_id 5",
        replaying(U, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "5"}]}, {**RESULT, "tool_call_id": 5}),
        ("t.jsonl:3:", "tool_call_id must be a string"),
    ),
    ("refusal 5", replaying(U, {**A, "refusal": 5}), ("t.jsonl:2:", "refusal must be a string or null")),
    (
        "tool call type 5",
        replaying(U, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "type": 5}]}, RESULT),
        ("t.jsonl:2:", "tool_calls[0].type must be a string"),
    ),
    (
        "import _tokens",
        lambda d: ["import", transcript(d, U, {**A, "_tokens": 5}), "--from", "openai"],
        ("t.jsonl:2:", "'_tokens'"),
    ),
    (
        "import name 5",
        lambda d: ["import", transcript(d, U, {**A, "name": 5}), "--from", "openai"],
        ("t.jsonl:2:", "name must be a non-empty string"),
    ),
    (
        "import garbage _mc",
        lambda d: ["import", transcript(d, U, {**A, "_mc": 3}), "--from", "openai"],
        ("t.jsonl:2:", "_mc must be an object"),
    ),
]


def _args(make: Callable[[Path], list[Any]], d: Path) -> list[str]:
    return [str(a).replace("{d}", str(d)) for a in make(d)]


@pytest.mark.parametrize("make, fragments", [pytest.param(m, f, id=i) for i, m, f in REFUSED])
def test_refused_with_one_line(
    home: Path, tmp_path: Path, make: Callable[[Path], list[Any]], fragments: tuple[str, ...]
) -> None:
    args = _args(make, tmp_path)  # writes the inputs (and the store of the sessions cases)
    before = set(tmp_path.iterdir())
    assert_one_line_error(invoke(*args), *fragments)
    made = {p.name for p in set(tmp_path.iterdir()) - before}
    assert not made, f"a refused command left files behind: {made}"


def test_closed_summarizer_port_is_refused_before_the_replay(home: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = invoke("replay", transcript(tmp_path, U, A), "--summarizer", "openai", "--model", "m", "--base-url", url)
    assert assert_one_line_error(result, f"the summarizer at {url} cannot be reached", "--base-url") == (
        f"error: the summarizer at {url} cannot be reached (Connection refused); start it, fix --base-url "
        "(or auxiliary.compression.base_url), or replay with --summarizer extractive"
    )
    secret = f"http://user:pw-secret@127.0.0.1:{closed_port()}/v1"
    result = invoke(
        "replay", transcript(tmp_path, U, A), "--summarizer", "openai", "--model", "m", "--base-url", secret
    )
    assert "pw-secret" not in assert_one_line_error(result, "cannot be reached")


@pytest.mark.parametrize(
    "make, fragments",
    [
        pytest.param(m, f, id=i)
        for i, m, f in REFUSED
        if i in ("--session newline", "cadence -5", "_tokens", "_ts a string", "name 5", "--db ''")
    ],
)
@pytest.mark.slow  # test_refused_with_one_line has every case in-process; these show no real process tracebacks
def test_refused_in_a_real_process(
    home: Path, tmp_path: Path, make: Callable[[Path], list[Any]], fragments: tuple[str, ...]
) -> None:
    proc = subprocess_run(home, *_args(make, tmp_path), timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert all(f in lines[0] for f in fragments), (fragments, lines[0])


@pytest.mark.slow  # test_closed_summarizer_port_is_refused_before_the_replay says the same in-process
def test_closed_summarizer_port_in_a_real_process(home: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    proc = subprocess_run(
        home, "replay", transcript(tmp_path, U, A), "--summarizer", "openai", "--model", "m", "--base-url", url
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"error: the summarizer at {url} cannot be reached (Connection refused); start it, fix --base-url "
        "(or auxiliary.compression.base_url), or replay with --summarizer extractive"
    ]


# --------------------------------------------------------------------------- documented meanings


def replay_out(tmp_path: Path, *messages: dict[str, Any], args: tuple[Any, ...] = ()) -> tuple[Any, list[Any]]:
    out = tmp_path / "out.jsonl"
    result = invoke("replay", transcript(tmp_path, *messages), "--no-micro", "--out", out, "--json", *args)
    assert result.exit_code == 0, result.output
    return result, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_history_keys_are_dropped_with_one_note(home: Path, tmp_path: Path) -> None:
    """A proxy session's export carries _hid/_hd/_hn: a replay has no client history, so they go, said once."""
    result, written = replay_out(tmp_path, {**U, "_hid": 0, "_hd": "ab"}, {**A, "_hid": 1, "_hn": 2})
    notes = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "of 2 message(s)" in notes[0], result.stderr
    assert all(not {"_hid", "_hd", "_hn"} & set(m) for m in written)


def test_callers_own_underscore_keys_are_kept(home: Path, tmp_path: Path) -> None:
    """Any other ``_`` key is the caller's metadata: kept in the output, never sent (to_api drops ``_`` keys)."""
    result, written = replay_out(tmp_path, U, {**A, "_note": {"by": "me"}})
    assert written[1]["_note"] == {"by": "me"} and not result.stderr.strip()


def test_library_flags_and_markers_and_times_are_accepted(home: Path, tmp_path: Path) -> None:
    messages = (
        {**U, "_ts": 1_700_000_000},
        {**A, "_ts": 1_700_000_030.5, "_mc": {"is_error": True}},
        {"role": "user", "content": "summary so far", "_mc": {"compact_summary": True}},
        {**A, "_mc": {"marker": "micro"}},
    )
    _result, written = replay_out(tmp_path, *messages)
    assert written == list(messages)


def test_a_tool_call_id_reused_by_a_later_turn_pairs_with_its_own_turn(home: Path, tmp_path: Path) -> None:
    """Documented (README, "Input is checked where it is read"): results pair with the assistant message right
    before them, so SWE-agent recordings that number their calls per turn replay as recorded."""
    messages = (U, CALL, RESULT, {**U, "content": "again"}, CALL, {**RESULT, "content": "y"}, A)
    _result, written = replay_out(tmp_path, *messages)
    assert written == list(messages)
    twice_in_one = {**CALL, "tool_calls": CALL["tool_calls"] * 2}
    assert_one_line_error(
        invoke("replay", transcript(tmp_path, U, twice_in_one, RESULT, RESULT)), "t.jsonl:2:", "duplicate tool-call id"
    )


def test_cadence_zero_means_every_turn(home: Path, tmp_path: Path) -> None:
    result = invoke("replay", transcript(tmp_path, U, A), "--every", 0, "--json")
    assert result.exit_code == 0, result.output


def test_a_key_value_dsn_is_postgresql_and_a_dead_one_is_one_line(home: Path, tmp_path: Path) -> None:
    """libpq's ``host=... dbname=...`` form names a PostgreSQL store, as psql reads it (it used to become a
    SQLite file of that name); nothing listening on its port is one line naming the server, exit 2."""
    dsn = "user=postgres host=127.0.0.1 port=1 connect_timeout=5"
    assert_one_line_error(
        invoke(*_args(ok_replay("--db", dsn), tmp_path)),
        "postgresql://postgres@127.0.0.1:1/: cannot connect to PostgreSQL",
    )
    assert not list(tmp_path.glob("user=*")), "no SQLite file named after the DSN"


def test_a_window_smaller_than_what_is_never_cut_is_said_not_silent(home: Path, tmp_path: Path) -> None:
    """A --context-limit below the user messages' own size: the replay runs (nothing of theirs is cut) and
    says on stderr that the prompt went over the window, instead of ending as a silent success."""
    big = {"role": "user", "content": "please read this carefully " * 400}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(big) + "\n" + json.dumps({"role": "assistant", "content": "ok"}) + "\n")
    result = invoke("replay", path, "--context-limit", 1024)
    assert result.exit_code == 0, result.output
    assert "over the 1,024-token window" in result.stderr and "larger --context-limit" in result.stderr
    fits = invoke("replay", path, "--context-limit", 200_000)
    assert fits.exit_code == 0 and "window" not in fits.stderr
