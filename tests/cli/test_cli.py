"""The ``microcompact replay`` command, in-process through typer's CliRunner (plus subprocess smoke tests).

Every test points ``$MICROCOMPACT_HOME`` at its own temporary folder, so nothing touches ~/.microcompact.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from microcompact.cli import SPARK, app
from microcompact.contract import role_sequence_errors, user_message_errors
from microcompact.messages import META_KEY, marker_body, marker_count, marker_kind, user_texts
from microcompact.replay import load_transcript
from microcompact.summarizers import MERGE_PROMPT
from microcompact.telemetry import MICRO_FIELDS, parse_line
from support.builders import short_turns, turns_file, write_jsonl
from support.chat_server import ChatServer, notes

DEMO = Path(str(resources.files("microcompact") / "data" / "demo_transcript.jsonl"))
VENV_BIN = Path(sys.executable).parent
# Words of the demo transcript that no telemetry or log line has any business containing.
DEMO_WORDS = ("GenServer", "spotter-a0y", "bootstrap")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "mchome"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))  # belt and braces: ~ is never the real one
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    return home


def run(*args: Any) -> Any:
    return CliRunner().invoke(app, ["replay", *map(str, args)])


def run_json(*args: Any) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def flat(text: str) -> str:
    """``text`` without any whitespace: immune to how the console wrapped it."""
    return re.sub(r"\s+", "", text)


def without_timing(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "summarizer_ms_total"}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def telemetry_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(encoding="utf-8").splitlines() if "compaction telemetry: {" in line]


# --------------------------------------------------------------------------- the bundled demo


def test_demo_json_summary_is_sane_and_out_file_keeps_users_and_marker_metadata(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "final.jsonl"
    s = run_json(DEMO, "--context-limit", 200000, "--out", out)
    for key in (
        "turns",
        "passes",
        "outcomes",
        "occupancy",
        "peak_tokens",
        "final_tokens",
        "uncompacted_tokens",
        "tokens_saved_total",
        "largest_pass_tokens",
        "summarizer_ms_total",
        "batch_compactions",
        "messages_in",
        "messages_out",
        "model_requests",
        "threshold_tokens",
        "context_limit",
    ):
        assert key in s, key
    original = load_transcript(DEMO)
    assert s["messages_in"] == len(original)
    assert s["context_limit"] == 200000 and s["threshold_tokens"] == 100000
    assert s["turns"] == sum(1 for m in original if m["role"] == "user")
    assert s["model_requests"] == sum(1 for m in original if m["role"] == "assistant")
    assert s["passes"] > 0 and s["outcomes"].get("absorbed", 0) > 0
    assert s["micro_compact"] is True and s["summarizer"] == "extractive"
    occ = s["occupancy"]
    assert set(occ) == {"min", "median", "max", "final"}
    assert 0 <= occ["min"] <= occ["median"] <= occ["max"] < 100
    assert 0 < occ["final"] < 100
    assert 0 < s["final_tokens"] < s["uncompacted_tokens"]
    assert s["final_tokens"] <= s["peak_tokens"] < s["uncompacted_tokens"]
    assert s["tokens_saved_total"] > 0
    assert 0 < s["largest_pass_tokens"] < s["uncompacted_tokens"]
    assert s["summarizer_ms_total"] >= 0
    assert s["batch_compactions"] == 0

    final = read_jsonl(out)
    assert len(final) == s["messages_out"] < len(original)
    assert user_texts(final) == user_texts(original)  # intact: same texts, same order, none joined
    assert user_message_errors(original, final) == []
    assert role_sequence_errors(final) == []
    markers = [m for m in final if marker_kind(m) is not None]
    assert len(markers) == 1 and markers[0][META_KEY]["marker"] == "micro"
    assert marker_body(markers[0])
    assert all("_tokens" not in m for m in final)  # the token cache is not exported


def test_demo_human_output_has_table_and_sparklines(home: Path) -> None:
    result = run(DEMO, "--context-limit", 200000)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "replay of demo_transcript.jsonl" in text
    for row in (
        "context limit / threshold",
        "messages in -> out",
        "turns / model requests",
        "passes",
        "tokens: uncompacted -> final",
        "peak prompt tokens",
        "occupancy % of threshold",
        "largest single summarization",
        "summarizer time",
    ):
        assert row in text, row
    assert "200,000 / 100,000 tokens" in text
    assert "occupancy per model request (full height = " in text
    lines = [line for line in text.splitlines() if line.strip().startswith(("without compaction", "with micro"))]
    assert len(lines) == 2, text
    for line in lines:
        bars = re.search(f"[{SPARK}]+", line)
        assert bars and len(bars.group()) >= 10, line
        assert re.search(r"peak \d+%$", line.rstrip()), line
    assert lines[0].strip().startswith("without compaction") and lines[1].strip().startswith("with micro")


def test_unknown_context_limit_reports_null_occupancy(home: Path, tmp_path: Path) -> None:
    s = run_json(turns(tmp_path))
    assert s["context_limit"] is None and s["threshold_tokens"] is None
    assert s["occupancy"] == {"min": None, "median": None, "max": None, "final": None}
    assert s["passes"] > 0 and s["final_tokens"] < s["uncompacted_tokens"]
    result = run(turns(tmp_path))
    assert result.exit_code == 0, result.output
    assert "unknown" in result.stdout and "occupancy per model request" not in result.stdout


# --------------------------------------------------------------------------- bad input


def test_malformed_jsonl_line_names_file_and_line(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "ok"}\n{"role": "user", "content": \n',
        encoding="utf-8",
    )
    result = run(path)
    assert result.exit_code == 2
    assert f"{path}:3:" in flat(result.stderr)
    assert "invalidJSON" in flat(result.stderr)
    assert "Traceback" not in result.output


def test_invalid_message_names_file_line_and_problem(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "robot.jsonl"
    path.write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "ok"}\n'
        '{"role": "robot", "content": "beep"}\n',
        encoding="utf-8",
    )
    result = run(path)
    assert result.exit_code == 2
    assert f"{path}:3:" in flat(result.stderr)
    assert "unknownrole'robot'" in flat(result.stderr)


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"role": "tool", "content": "x"}', "atoolmessageneedsatool_call_id"),
        ('["not", "an", "object"]', "expectedaJSONobject"),
        ('{"role": "user", "content": 42}', "contentmustbeastring"),
        ('{"role": "user", "content": "x", "tool_calls": []}', "onlyassistantmessagesmaycarrytool_calls"),
    ],
)
def test_other_invalid_messages_are_reported_with_their_line(
    home: Path, tmp_path: Path, line: str, problem: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n\n' + line + "\n", encoding="utf-8")
    result = run(path)
    assert result.exit_code == 2
    assert f"{path}:3:" in flat(result.stderr)
    assert problem in flat(result.stderr)


def test_json_array_file_is_accepted_and_empty_lines_are_skipped(home: Path, tmp_path: Path) -> None:
    msgs = short_turns(6)
    as_array = tmp_path / "array.json"
    as_array.write_text(json.dumps(msgs, indent=1), encoding="utf-8")
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text("\n" + "\n\n   \n".join(json.dumps(m) for m in msgs) + "\n\n", encoding="utf-8")
    plain = write_jsonl(tmp_path / "plain.jsonl", msgs)
    results, outs = [], []
    for p in (as_array, spaced, plain):
        outs.append(tmp_path / f"{p.name}.out")
        results.append(without_timing(run_json(p, "--context-limit", 20000, "--session", "same", "--out", outs[-1])))
    assert all(r["messages_in"] == len(msgs) and r["turns"] == 6 for r in results)
    assert results[0]["passes"] > 0
    assert results[0] == results[1] == results[2]
    assert outs[0].read_bytes() == outs[1].read_bytes() == outs[2].read_bytes()


def test_invalid_element_of_a_json_array_names_the_element(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]))
    result = run(path)
    assert result.exit_code == 2
    assert "element1" in flat(result.stderr) and "unknownrole'robot'" in flat(result.stderr)


def test_missing_file_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    result = run(path)
    assert result.exit_code == 2
    assert "cannotreadtranscript" in flat(result.stderr) and str(path) in flat(result.stderr)
    assert "Nosuchfile" in flat(result.stderr)
    assert "Traceback" not in result.output


def test_bad_config_value_names_the_key_path(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("compression:\n  threshold: 2\n  micro_compactt: true\n", encoding="utf-8")
    result = run(DEMO, "--config", cfg)
    assert result.exit_code == 2
    err = flat(result.stderr)
    assert str(cfg) in err
    assert "compression.threshold:" in err and "(allowed:le1.0)" in err
    assert "compression.micro_compactt:unknownkey" in err


def test_config_yaml_syntax_error_names_file_line_and_column(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("compression:\n  threshold: [0.5\n", encoding="utf-8")
    result = run(DEMO, "--config", cfg)
    assert result.exit_code == 2
    assert re.search(re.escape(f"invalidYAMLin{cfg}:") + r"\d+:\d+:", flat(result.stderr)), result.stderr


def test_config_from_home_is_used_and_its_errors_are_reported(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("model:\n  context_length: 12\n", encoding="utf-8")
    result = run(DEMO)
    assert result.exit_code == 2
    assert "model.context_length:" in flat(result.stderr) and str(home / "config.yaml") in flat(result.stderr)


def test_context_limit_out_of_range_names_the_key(home: Path) -> None:
    result = run(DEMO, "--context-limit", 100)
    assert result.exit_code == 2
    assert "model.context_length:" in flat(result.stderr) and "ge1024" in flat(result.stderr)


def test_unknown_summarizer_is_an_error(home: Path) -> None:
    result = run(DEMO, "--summarizer", "bogus")
    assert result.exit_code == 2
    assert "--summarizermustbeextractiveoropenai" in flat(result.stderr) and "bogus" in result.stderr


def test_openai_summarizer_without_model_is_an_error(home: Path) -> None:
    result = run(DEMO, "--summarizer", "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.exit_code == 2
    assert "auxiliary.compression.model:required" in flat(result.stderr)


# --------------------------------------------------------------------------- logs and telemetry


def test_default_log_has_sorted_content_free_telemetry(home: Path) -> None:
    run_json(DEMO, "--context-limit", 200000)
    log = home / "logs" / "agent.log"
    assert log.is_file()
    lines = telemetry_lines(log)
    micro = [line for line in lines if "micro compaction telemetry: {" in line]
    assert micro, "no micro telemetry line in the default log"
    for line in micro:
        kind, record = parse_line(line)
        assert kind == "micro"
        assert list(record) == sorted(record), "keys must be sorted"
        assert set(MICRO_FIELDS) <= set(record)
        assert re.fullmatch(r"demo_transcript-[0-9a-f]{12}", record["session_id"])  # stem + content digest
        for value in record.values():
            assert value is None or isinstance(value, (int, float, bool)) or len(str(value)) <= 40, value
    text = log.read_text(encoding="utf-8")
    for word in DEMO_WORDS:
        assert word in DEMO.read_text(encoding="utf-8")
        assert word not in text, f"transcript text {word!r} leaked into the log"


def turns(tmp_path: Path) -> Path:
    return turns_file(tmp_path)


def test_log_option_writes_there_instead(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "elsewhere" / "replay.log"
    run_json(turns(tmp_path), "--context-limit", 20000, "--log", log)
    assert telemetry_lines(log)
    assert not (home / "logs" / "agent.log").exists()


def test_nothing_is_written_under_the_real_home(home: Path, tmp_path: Path) -> None:
    run_json(turns(tmp_path), "--context-limit", 20000)
    assert not (tmp_path / "userhome").exists()
    assert (home / "logs" / "agent.log").exists()


# --------------------------------------------------------------------------- options


def test_no_micro_runs_no_micro_pass(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    s = run_json(DEMO, "--context-limit", 200000, "--no-micro", "--out", out)
    assert s["micro_compact"] is False
    assert s["passes"] == 0 and s["outcomes"] == {} and s["tokens_saved_total"] == 0
    assert s["micro_passes_per_batch"] is None
    assert marker_count(read_jsonl(out), "micro") == 0
    assert all("micro compaction telemetry" not in line for line in telemetry_lines(home / "logs" / "agent.log"))


def test_every_3_runs_fewer_passes_than_every_1(home: Path, tmp_path: Path) -> None:
    # Short turns, so passes run at turn ends, which is what the cadence governs. (On the demo every pass
    # is a before-request piece of a long turn, which the cadence deliberately does not slow down.)
    # The 8,000-token piece budget explicitly: at a 20K window the default now scales down to 1,250 (issue 8.7),
    # and before-request pieces that small would absorb these short turns whatever the cadence.
    path = write_jsonl(tmp_path / "turns.jsonl", short_turns(30))
    cfg = tmp_path / "pieces.yaml"
    cfg.write_text("compression:\n  micro_compact_max_exchange_tokens: 8000\n")
    every1 = run_json(path, "--context-limit", 20000, "--every", 1, "--config", cfg)
    every3 = run_json(path, "--context-limit", 20000, "--every", 3, "--config", cfg)
    assert every1["passes"] > 0 and every3["passes"] > 0
    assert every3["passes"] < every1["passes"]
    assert every3["turns"] == every1["turns"] == 30


def test_session_option_names_the_session_in_telemetry(home: Path, tmp_path: Path) -> None:
    s = run_json(turns(tmp_path), "--context-limit", 20000, "--session", "my-session-7")
    assert s["session_id"] == "my-session-7"
    records = [parse_line(line)[1] for line in telemetry_lines(home / "logs" / "agent.log")]
    assert records and all(r["session_id"] == "my-session-7" for r in records)


@pytest.mark.slow
def test_replays_are_deterministic_byte_for_byte(home: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    sa = run_json(DEMO, "--context-limit", 200000, "--out", a)
    sb = run_json(DEMO, "--context-limit", 200000, "--out", b)
    assert a.read_bytes() == b.read_bytes()
    assert without_timing(sa) == without_timing(sb)


# --------------------------------------------------------------------------- the OpenAI summarizer over HTTP


def test_openai_summarizer_end_to_end(
    home: Path, tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MC_CLI_TEST_KEY", raising=False)

    def responder(request: dict[str, Any]) -> str:
        return notes(f"SERVER-SUMMARY-{len(chat_server.requests)}: kept the tail worker design.")

    chat_server.responder = responder
    out = tmp_path / "out.jsonl"
    s = run_json(
        DEMO,
        "--context-limit",
        200000,
        "--summarizer",
        "openai",
        "--model",
        "test-model",
        "--base-url",
        chat_server.base_url,
        "--api-key-env",
        "MC_CLI_TEST_KEY",
        "--out",
        out,
    )
    assert s["summarizer"] == "test-model"
    assert s["passes"] > 0 and s["outcomes"].get("absorbed", 0) > 0
    assert chat_server.requests, "the server received no request"
    assert all(r["model"] == "test-model" for r in chat_server.requests)
    assert any(r["messages"][0]["content"] == MERGE_PROMPT for r in chat_server.requests)
    final = read_jsonl(out)
    (marker,) = [m for m in final if marker_kind(m) == "micro"]
    body = marker_body(marker)
    # the server's notes, then the file ledger and commands the library keeps beside them
    assert body.startswith(notes(f"SERVER-SUMMARY-{len(chat_server.requests)}: kept the tail worker design."))
    assert "### Files" in body[len(notes("")) :]
    assert user_message_errors(load_transcript(DEMO), final) == []
    records = [parse_line(line)[1] for line in telemetry_lines(home / "logs" / "agent.log")]
    assert any(r.get("aux_model") == "test-model" for r in records)


def test_openai_summarizer_down_leaves_transcript_whole(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with ChatServer() as server:
        server.add_faults(*[500] * 2000)  # reachable, and every request fails
        result = run(
            turns(tmp_path),
            "--context-limit",
            20000,
            "--summarizer",
            "openai",
            "--model",
            "m",
            "--base-url",
            server.base_url,
            "--api-key-env",
            "MC_CLI_TEST_KEY",
            "--out",
            out,
            "--json",
        )
    # The replay finishes and says so, but a model that never summarized is a non-zero exit.
    assert result.exit_code == 1, result.output
    s = json.loads(result.stdout)
    assert s["passes"] == 0 and s["outcomes"].get("absorbed", 0) == 0
    assert set(s["outcomes"]) <= {"summarize_failed", "exchange_skipped"} and s["outcomes"]
    assert marker_count(read_jsonl(out), "micro") == 0
    assert len(read_jsonl(out)) == s["messages_in"]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: the summarizer failed")]
    assert len(warnings) == 1 and "never produced a summary" in warnings[0], result.stderr


# --------------------------------------------------------------------------- the installed command


def _cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env["MICROCOMPACT_HOME"] = str(home)
    return env


def test_installed_command_smoke(home: Path) -> None:
    exe = VENV_BIN / "microcompact"
    if not exe.exists():
        pytest.skip(f"{exe} not installed")
    proc = subprocess.run(
        [str(exe), "replay", str(DEMO), "--context-limit", "200000", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_cli_env(home),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["passes"] > 0 and s["occupancy"]["max"] < 100
    assert (home / "logs" / "agent.log").is_file()


def test_error_location_stays_on_one_line_when_stderr_is_a_pipe(home: Path, tmp_path: Path) -> None:
    exe = VENV_BIN / "microcompact"
    if not exe.exists():
        pytest.skip(f"{exe} not installed")
    deep = tmp_path / "a-rather-long-folder-name-for-recorded-sessions" / "project-with-a-long-name"
    deep.mkdir(parents=True)
    path = deep / "session-2026-11-30.jsonl"
    path.write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "ok"}\n'
        '{"role": "robot", "content": "beep"}\n',
        encoding="utf-8",
    )
    env = {**_cli_env(home), "COLUMNS": "80"}
    proc = subprocess.run(
        [str(exe), "replay", str(path)], capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 2
    assert any(f"{path}:3: unknown role 'robot'" in line for line in proc.stderr.splitlines()), proc.stderr


@pytest.mark.parametrize("role", ["[/]", "[bold]robot"])
def test_error_message_shows_input_with_brackets_verbatim(home: Path, tmp_path: Path, role: str) -> None:
    path = tmp_path / "markup.jsonl"
    write_jsonl(path, [{"role": "user", "content": "hi"}, {"role": role, "content": "x"}])
    result = run(path)
    assert result.exit_code == 2, result.output
    assert f"unknownrole{role!r}" in flat(result.stderr)


def test_human_output_names_a_file_with_brackets_verbatim(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "[draft]run.jsonl"
    path.write_bytes(turns(tmp_path).read_bytes())
    result = run(path, "--context-limit", 20000)
    assert result.exit_code == 0, result.output
    assert "replay of [draft]run.jsonl" in result.stdout


def test_json_array_with_null_fields_replays_like_jsonl(home: Path, tmp_path: Path) -> None:
    msgs = short_turns(6)
    for m in msgs:  # how the normalized transcripts spell absent fields
        m.setdefault("tool_calls", None)
        m.setdefault("tool_call_id", None)
    as_array = tmp_path / "nulls.json"
    as_array.write_text(json.dumps(msgs), encoding="utf-8")
    as_lines = write_jsonl(tmp_path / "nulls.jsonl", msgs)
    outs = [tmp_path / "array.out", tmp_path / "lines.out"]
    for path, out in zip((as_array, as_lines), outs, strict=True):
        run_json(path, "--context-limit", 20000, "--session", "same", "--out", out)
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_out_into_a_missing_folder_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "no-such-folder" / "out.jsonl"
    result = run(DEMO, "--context-limit", 200000, "--out", out)
    assert result.exit_code == 2, repr(result.exception)
    assert str(out) in flat(result.stderr)


def test_unusable_log_path_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    log = blocker / "logs" / "replay.log"
    result = run(DEMO, "--context-limit", 200000, "--log", log)
    assert result.exit_code == 2, repr(result.exception)
    assert str(blocker) in flat(result.stderr)


def test_sessions_commands_name_an_unknown_session(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runner = CliRunner()
    ok = runner.invoke(
        app, ["replay", str(turns(tmp_path)), "--context-limit", "20000", "--db", str(db), "--session", "d"]
    )
    assert ok.exit_code == 0
    for args in (["export", "nope"], ["search", "nope", "x"], ["show", "nope"]):
        res = runner.invoke(app, ["sessions", *args, "--db", str(db)])
        assert res.exit_code == 2 and "no session 'nope'" in res.output
    res = runner.invoke(app, ["sessions", "export", "d", "--expand", "1", "--db", str(db)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_sessions_commands_take_an_unambiguous_prefix(home: Path, tmp_path: Path) -> None:
    """Issue 28: session ids are long digests; any unambiguous prefix of one names it, an ambiguous one is a
    one-line error listing the candidates."""
    db = tmp_path / "s.db"
    path = turns(tmp_path)  # the ids matter here, not the transcript
    runner = CliRunner()
    for name in ("claude-a1b2c3d4e5", "claude-a1ffff0000", "openai-77aa"):
        args = ["replay", str(path), "--context-limit", "200000", "--db", str(db), "--session", name]
        assert runner.invoke(app, args).exit_code == 0
    shown = runner.invoke(app, ["sessions", "show", "claude-a1b", "--db", str(db)])
    assert shown.exit_code == 0 and "sessionclaude-a1b2c3d4e5:" in flat(shown.output)
    found = runner.invoke(app, ["sessions", "search", "openai-7", "the", "--include-active", "--db", str(db)])
    assert found.exit_code == 0
    exported = runner.invoke(app, ["sessions", "export", "claude-a1f", "--db", str(db)])
    assert exported.exit_code == 0 and exported.output.count("\n") > 10
    ambiguous = runner.invoke(app, ["sessions", "show", "claude-a1", "--db", str(db)])
    assert ambiguous.exit_code == 2
    message = flat(ambiguous.output)
    assert "starts2sessions" in message and "claude-a1b2c3d4e5" in message and "claude-a1ffff0000" in message


# --------------------------------------------------------------------------- honest reports (issue 8, item 15)


def prune_heavy(tmp_path: Path) -> Path:
    """Turns with large tool outputs: at a 24K window batch prunes and compacts, micro passes in between."""
    return write_jsonl(tmp_path / "heavy.jsonl", short_turns(20, size=1200))


def estimate_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "estimate.yaml"
    cfg.write_text("compression:\n  tokenizer: estimate\n", encoding="utf-8")
    return cfg


def test_no_micro_table_counts_what_prunes_and_batches_freed(home: Path, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "prunes.jsonl", short_turns(20, size=300))  # batch prunes, never compacts
    s = run_json(path, "--context-limit", 20000, "--no-micro")
    assert s["batch_prunes"] >= 5 and s["tokens_freed_by_prunes"] > 0 and s["passes"] == 0
    assert s["tokens_saved"] == s["uncompacted_tokens"] - s["final_tokens"] > 0
    # Without micro, batch events are all that rewrote the transcript: their tallies add up.
    assert s["tokens_freed_by_prunes"] + s["tokens_freed_by_batch"] == s["tokens_saved"]
    result = run(path, "--context-limit", 20000, "--no-micro")
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert (
        f"batch│{s['batch_compactions']}compactions(freed{s['tokens_freed_by_batch']:,}tokens),"
        f"{s['batch_prunes']}prunes(freed{s['tokens_freed_by_prunes']:,}tokens)" in text
    )
    assert f"(saved{s['tokens_saved']:,}inall)" in text and "(saved0" not in text
    assert "batchonly" in text and "engineoff" not in text


def test_micro_passes_per_batch_are_counted_across_prunes(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "heavy.log"
    cfg = tmp_path / "pieces.yaml"  # whole 8K pieces (not scaled to the window), as the scenario needs
    cfg.write_text("compression:\n  tokenizer: estimate\n  micro_compact_max_exchange_tokens: 8000\n", encoding="utf-8")
    s = run_json(prune_heavy(tmp_path), "--context-limit", 24000, "--config", cfg, "--log", log)
    # What each batch compaction should say, from the log in order: micro passes since the previous
    # compaction; a prune in between is not a compaction.
    expected, passes, at_last, prune_between = [], 0, 0, False
    for line in telemetry_lines(log):
        kind, record = parse_line(line)
        if kind == "micro":
            passes = record["passes_total"]
        elif record["outcome"] == "pruned":
            prune_between = prune_between or passes > at_last
        elif record["outcome"] in ("compacted", "user_floor_exceeded", "fallback"):
            expected.append(passes - at_last)
            at_last = passes
    assert prune_between, "the scenario must have micro passes, then a prune, before a compaction"
    assert s["micro_passes_per_batch"] == expected
    assert max(expected) > 1


@pytest.mark.slow
def test_compare_table_fits_100_columns_with_full_names_in_json(home: Path, tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from microcompact.bill.pricing import PRESETS
    from microcompact.cli import compare_table
    from microcompact.config import parse_config
    from microcompact.replay.compare import POLICIES, compare

    path = write_jsonl(tmp_path / "a-transcript-with-a-long-file-name-2026-11-30.jsonl", short_turns(14, size=400))
    result = compare(load_transcript(path), parse_config({"model": {"context_length": 16000}}), PRESETS["anthropic"])
    assert max(row["cached_read_tokens"] for row in result["policies"]) > 100_000  # wide numbers
    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(compare_table(path, result))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 100 and "…" not in text
    assert all(row["policy"] in POLICIES for row in result["policies"])
    for short in ("batch-only", "every-turn", "every-N", "reclaim", "cache-aware"):
        assert short in text
    s = json.loads(run(path, "--compare", "--context-limit", 16000, "--json").stdout)
    assert [row["policy"] for row in s["policies"]] == list(POLICIES)
    assert {"largest_summarization_tokens", "cached_read_tokens", "cache_write_tokens"} <= set(s["policies"][0])


def reversed_keys(value: Any) -> Any:
    """``value`` with every object's keys in reverse order (nested too)."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


@pytest.fixture(params=["sqlite", "postgres"])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh store for --db: a SQLite file, or a new PostgreSQL database (jsonb reorders keys)."""
    if request.param == "sqlite":
        yield tmp_path / "s.db"
        return
    from urllib.parse import urlsplit, urlunsplit

    from support.stores import FreshPgDatabase

    admin = request.getfixturevalue("pg_dsn")
    if not admin.startswith(("postgresql://", "postgres://")):
        pytest.skip("needs a URL-style PostgreSQL DSN")
    fresh = FreshPgDatabase(admin)
    try:
        yield urlunsplit(urlsplit(admin)._replace(path="/" + fresh.name))
    finally:
        fresh.drop()


def test_resumed_out_is_byte_identical_when_input_keys_are_in_another_order(
    home: Path, tmp_path: Path, db_target: Any
) -> None:
    msgs = [reversed_keys(m) for m in short_turns(16)]
    cut = 8 * 6  # after 8 whole turns
    full, half = write_jsonl(tmp_path / "t.jsonl", msgs), write_jsonl(tmp_path / "t-half.jsonl", msgs[:cut])
    straight, resumed, db = tmp_path / "straight.jsonl", tmp_path / "resumed.jsonl", db_target
    run_json(full, "--context-limit", 20000, "--session", "k", "--out", straight)
    first = run_json(half, "--context-limit", 20000, "--session", "k", "--db", db)
    assert first["passes"] > 0  # the stored prefix holds rewritten messages as well as untouched ones
    result = run(full, "--context-limit", 20000, "--session", "k", "--db", db, "--out", resumed, "--json")
    assert result.exit_code == 0, result.output
    assert "resuming" in result.stderr
    assert resumed.read_bytes() == straight.read_bytes()
    first_line = straight.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith('{"content": ')  # written as read: the input's key order
