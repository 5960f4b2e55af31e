"""Bad input to the command line: one line on stderr naming what and where, exit 2, never a traceback.

Also what must not be silent: flags that would do nothing, a mistyped store path, a full disk under
--log (the session goes on, one warning) and under --out (no partial file). Most cases run in-process
through typer's CliRunner; a few run the real command in a subprocess, where a traceback would show.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import microcompact
from microcompact.cli import app, runs
from microcompact.replay.compare import POLICIES
from support.chat_server import ChatServer

DEMO = Path(str(resources.files("microcompact") / "data" / "demo_transcript.jsonl"))
SRC = str(Path(microcompact.__file__).resolve().parents[1])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "mchome"
    monkeypatch.setenv("MICROCOMPACT_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    return home


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_one_line_error(result: Any, *fragments: str) -> str:
    """Exit 2, no traceback, exactly one line on stderr starting with ``error:``, holding ``fragments``."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in result.output
    return lines[0]


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


USER = '{"role": "user", "content": "hi"}'
CALL = (
    '{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", '
    '"function": {"name": "ls", "arguments": "{}"}}]}'
)


def subprocess_run(home: Path, *args: Any, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(MICROCOMPACT_HOME=str(home), PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "microcompact.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


# --------------------------------------------------------------------------- item 11: no tracebacks


def test_function_given_as_a_string(home: Path, tmp_path: Path) -> None:
    p = write(
        tmp_path / "f.jsonl",
        USER,
        '{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": "ls"}]}',
    )
    assert_one_line_error(invoke("replay", p), f"{p}:2:", "tool_calls[0].function must be an object")


def test_hundred_thousand_nested_brackets_in_replay_and_every_import_format(home: Path, tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n", encoding="utf-8")
    assert_one_line_error(invoke("replay", deep), "nested too deeply")
    objects = tmp_path / "deep.json"
    objects.write_text('{"a": ' * 100_000, encoding="utf-8")
    for fmt in ("claude-code", "swe-agent", "adp", "openai"):
        for path in (deep, objects):
            assert_one_line_error(
                invoke("import", path, "--from", fmt, "--out", tmp_path / "o.jsonl"), "nested too deeply"
            )
            assert not (tmp_path / "o.jsonl").exists()


def test_lone_surrogate_is_caught_before_the_replay_runs(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_replay(*_: Any, **__: Any) -> None:
        raise AssertionError("the replay ran on a transcript that cannot be written")

    monkeypatch.setattr(runs, "replay", no_replay)
    p = write(tmp_path / "s.jsonl", USER, '{"role": "assistant", "content": "x \\udc80 y"}')
    out = tmp_path / "out.jsonl"
    assert_one_line_error(invoke("replay", p, "--out", out), f"{p}:2:", "surrogate")
    assert not out.exists()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_number_is_refused_with_file_and_line(home: Path, tmp_path: Path, literal: str) -> None:
    p = write(tmp_path / "n.jsonl", USER, f'{{"role": "assistant", "content": "ok", "_ts": {literal}}}')
    assert_one_line_error(invoke("replay", p), f"{p}:2: {literal} is not a JSON number")
    assert_one_line_error(invoke("import", p, "--from", "openai"), f"{p}:2: {literal} is not a JSON number")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--reclaim", "-100"], "--reclaim must be between 0"),
        (["--every-n", "0"], "--every-n must be between 1"),
        (["--assume-gap", "nan"], "--assume-gap must be a number of seconds"),
        (["--assume-gap", "inf"], "--assume-gap must be a number of seconds"),
        (["--assume-gap", "-5"], "--assume-gap must be a number of seconds"),
    ],
)
def test_compare_options_are_range_checked(home: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(invoke("replay", DEMO, "--compare", "--context-limit", 50000, *args), fragment)


def test_plot_into_a_missing_folder_fails_before_the_replay(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_compare(*_: Any, **__: Any) -> None:
        raise AssertionError("the long replay ran before the plot path was checked")

    monkeypatch.setattr(runs, "compare", no_compare)
    target = tmp_path / "no" / "such" / "folder" / "p.png"
    assert_one_line_error(
        invoke("replay", DEMO, "--compare", "--context-limit", 50000, "--plot", target), "--plot", "does not exist"
    )


def test_expand_out_of_range(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert invoke("replay", DEMO, "--context-limit", 200000, "--db", db, "--session", "s", "--json").exit_code == 0
    for value in (2**70, -1):
        assert_one_line_error(invoke("sessions", "export", "s", "--db", db, "--expand", value), "--expand must be")


# --------------------------------------------------------------------------- item 13: broken transcripts


@pytest.mark.parametrize(
    "lines, line_no, fragment",
    [
        ([USER, '{"role": "tool", "tool_call_id": "ghost", "content": "x"}'], 2, "orphan tool result"),
        ([USER, CALL, USER], 2, "has no result"),
        (
            [
                USER,
                CALL.replace(
                    "}]}", '}, {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}'
                ),
                '{"role": "tool", "tool_call_id": "a", "content": "x"}',
                '{"role": "tool", "tool_call_id": "a", "content": "y"}',
            ],
            2,
            "duplicate tool-call id 'a'",
        ),
        ([USER, '{"role": "user", "content": [{"text": "no type"}]}'], 2, "content[0] needs a string 'type'"),
    ],
)
def test_broken_transcript_is_an_error_naming_the_line(
    home: Path, tmp_path: Path, lines: list[str], line_no: int, fragment: str
) -> None:
    p = write(tmp_path / "b.jsonl", *lines)
    assert_one_line_error(invoke("replay", p), f"{p}:{line_no}:", fragment)


def test_defect_error_offers_repair_and_repair_reports_each_line(home: Path, tmp_path: Path) -> None:
    p = write(
        tmp_path / "b.jsonl",
        USER,
        CALL,
        USER,
        '{"role": "assistant", "content": "ok"}',
        '{"role": "tool", "tool_call_id": "zz", "content": "late"}',
    )
    assert "--repair" in assert_one_line_error(invoke("replay", p))
    out = tmp_path / "out.jsonl"
    result = invoke("replay", p, "--repair", "--json", "--out", out)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("repaired ")]
    assert [n.split(": ")[0] for n in notes] == [f"repaired {p}:2", f"repaired {p}:5"]
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [m["role"] for m in written] == ["user", "assistant", "tool", "user", "assistant"]
    assert written[2]["content"] == "[no result recorded: the call was interrupted]"


def test_empty_transcript_is_an_error(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "e.jsonl"
    p.write_text("", encoding="utf-8")
    assert_one_line_error(invoke("replay", p), str(p), "no messages")


# --------------------------------------------------------------------------- item 14: nothing silently ignored


@pytest.mark.parametrize(
    "flag, value",
    [("--plot", "x.png"), ("--every-n", "3"), ("--reclaim", "10"), ("--pricing", "openai"), ("--assume-gap", "5")],
)
def test_compare_only_flags_without_compare(home: Path, flag: str, value: str) -> None:
    assert_one_line_error(invoke("replay", DEMO, flag, value), f"{flag} only applies with --compare")


def run_summary(*args: Any, transcript: Path = DEMO) -> dict[str, Any]:
    result = invoke("replay", transcript, "--context-limit", 200000, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_micro_precedence_flag_over_config_over_default(home: Path, tmp_path: Path) -> None:
    off = tmp_path / "off.yaml"
    off.write_text("compression:\n  micro_compact: false\n", encoding="utf-8")
    on = tmp_path / "on.yaml"
    on.write_text("compression:\n  micro_compact: true\n", encoding="utf-8")
    silent = tmp_path / "silent.yaml"
    silent.write_text("compression:\n  threshold: 0.5\n", encoding="utf-8")
    honoured = run_summary("--config", off)  # the demo, where micro-compaction has passes to run when on
    assert honoured["micro_compact"] is False and honoured["passes"] == 0  # the config file is honoured
    small = write(tmp_path / "small.jsonl", USER, '{"role": "assistant", "content": "hello"}')  # the flags alone
    assert run_summary("--config", off, "--micro", transcript=small)["micro_compact"] is True  # the flag wins
    assert run_summary("--config", on, "--no-micro", transcript=small)["micro_compact"] is False
    assert run_summary("--config", silent, transcript=small)["micro_compact"] is True  # replay's default
    assert run_summary(transcript=small)["micro_compact"] is True
    help_text = invoke("replay", "--help").stdout
    assert "explicit" in help_text and "config" in help_text


def test_bool_for_a_number_in_the_config(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compression:\n  protect_first_n: true\n", encoding="utf-8")
    result = invoke("replay", DEMO, "--config", cfg)
    assert result.exit_code == 2 and "protect_first_n" in result.stderr and "not true/false" in result.stderr


@pytest.mark.parametrize("command", [["list"], ["show", "s"], ["search", "s", "q"], ["export", "s"]])
def test_read_only_sessions_commands_do_not_create_a_store(home: Path, tmp_path: Path, command: list[str]) -> None:
    typo = tmp_path / "sesions.db"
    assert_one_line_error(invoke("sessions", *command, "--db", typo), f"no session store at {typo}")
    assert not typo.exists()
    assert_one_line_error(invoke("sessions", *command), "no session store at", str(home / "sessions.db"))
    assert not (home / "sessions.db").exists()


def test_compare_with_openai_says_it_calls_the_model_per_policy(
    home: Path, tmp_path: Path, chat_server: ChatServer
) -> None:
    turns = []
    for t in range(4):
        turns += [{"role": "user", "content": f"request {t}"}, {"role": "assistant", "content": "word " * 400}]
    small = write(tmp_path / "small.jsonl", *map(json.dumps, turns))
    result = invoke(
        "replay",
        small,
        "--compare",
        "--context-limit",
        2048,
        "--summarizer",
        "openai",
        "--model",
        "m",
        "--base-url",
        chat_server.base_url,
        "--api-key-env",
        "MC_BAD_INPUT_KEY",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert f"{len(POLICIES)} times the model calls" in result.stderr  # one replay per policy
    assert json.loads(result.stdout)["policies"][1]["summarizer_calls"] > 0 and chat_server.requests
    quiet = invoke("replay", small, "--compare", "--context-limit", 2048, "--json")
    assert "times the model calls" not in quiet.stderr


# --------------------------------------------------------------------------- item 5: full disk


@pytest.mark.slow
def test_log_on_a_full_disk_warns_once_and_the_result_is_kept(home: Path, tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is not available")
    out = tmp_path / "out.jsonl"
    proc = subprocess_run(home, "replay", DEMO, "--context-limit", 200000, "--log", "/dev/full", "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["passes"] > 0
    assert out.read_text(encoding="utf-8").count("\n") > 10
    assert "Logging error" not in proc.stderr and "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and "cannot write the log file /dev/full" in warnings[0], proc.stderr


def test_out_write_failure_leaves_no_partial_file_and_keeps_an_old_one(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("the previous result\n", encoding="utf-8")
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        real_fsync(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    assert_one_line_error(
        invoke("replay", DEMO, "--context-limit", 200000, "--out", out),
        f"cannot write {out}",
        "No space left on device",
    )
    assert out.read_text(encoding="utf-8") == "the previous result\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Any:
    """A 64 KiB tmpfs (needs root); skipped where mounting is not allowed."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_out_on_a_really_full_filesystem(home: Path, tmp_path: Path, tiny_fs: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_text(
        "".join(
            json.dumps({"role": "user", "content": f"request {i}: " + "word " * 60})
            + "\n"
            + json.dumps({"role": "assistant", "content": "ok " * 60})
            + "\n"
            for i in range(200)
        ),
        encoding="utf-8",
    )
    out = tiny_fs / "out.jsonl"
    proc = subprocess_run(home, "replay", big, "--no-micro", "--out", out, "--log", tmp_path / "l.log")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "No space left on device" in errors[0], proc.stderr
    assert list(tiny_fs.iterdir()) == []  # no partial file, no temporary left behind


# --------------------------------------------------------------------------- real processes


# In the fast suite: what only a real process shows (deep nesting against the interpreter's recursion limit, a
# lone surrogate on a real stderr); the others' messages are checked in-process above, in a real process here.
_IN_PROCESS_TOO = pytest.mark.slow


@pytest.mark.parametrize(
    "make_args",
    [
        pytest.param(
            lambda d: [
                "replay",
                write(d / "f.jsonl", USER, '{"role": "assistant", "tool_calls": [{"id": "a", "function": "ls"}]}'),
            ],
            marks=_IN_PROCESS_TOO,
        ),
        lambda d: ["replay", write(d / "deep.jsonl", "[" * 100_000)],
        lambda d: ["replay", write(d / "s.jsonl", '{"role": "user", "content": "\\ud800"}')],
        pytest.param(
            lambda d: ["replay", DEMO, "--compare", "--context-limit", "50000", "--reclaim", "-100"],
            marks=_IN_PROCESS_TOO,
        ),
        pytest.param(
            lambda d: ["replay", DEMO, "--compare", "--context-limit", "50000", "--plot", d / "missing" / "p.png"],
            marks=_IN_PROCESS_TOO,
        ),
        pytest.param(lambda d: ["replay", DEMO, "--plot", d / "p.png"], marks=_IN_PROCESS_TOO),
        pytest.param(
            lambda d: ["sessions", "export", "s", "--db", d / "typo.db", "--expand", str(2**70)], marks=_IN_PROCESS_TOO
        ),
        lambda d: ["sessions", "list", "--db", d / "typo.db"],
        lambda d: ["import", write(d / "deep2.jsonl", "[" * 100_000), "--from", "claude-code"],
    ],
)
def test_real_process_exits_2_without_traceback(home: Path, tmp_path: Path, make_args: Any) -> None:
    start = time.monotonic()
    proc = subprocess_run(home, *make_args(tmp_path), timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("text", ["", "[]"])
def test_empty_session_is_not_imported(home: Path, tmp_path: Path, text: str) -> None:
    p = tmp_path / "e.json"
    p.write_text(text, encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert_one_line_error(invoke("import", p, "--from", "openai", "--out", out), "no messages")
    assert not out.exists()
    assert_one_line_error(invoke("replay", p), "no messages")


@pytest.mark.parametrize("flag", ["--out", "--plot"])
def test_output_into_a_missing_folder_fails_before_the_replay(
    home: Path, tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_replay(*_: Any, **__: Any) -> None:
        raise AssertionError("the replay ran before the output path was checked")

    monkeypatch.setattr(runs, "replay", no_replay)
    monkeypatch.setattr(runs, "compare", no_replay)
    compare = ["--compare"] if flag == "--plot" else []
    target = tmp_path / "missing" / "f.out"
    assert_one_line_error(
        invoke("replay", DEMO, "--context-limit", 50000, *compare, flag, target),
        f"{flag} {target}: folder",
        "does not exist",
    )
    assert_one_line_error(invoke("replay", DEMO, "--context-limit", 50000, *compare, flag, tmp_path), "is a folder")
