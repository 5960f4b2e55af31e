"""What every importer's tests check on its sample: the command line import, detection, the contract, replay.

A user runs ``microcompact import FILE`` (the format detected) and then ``microcompact replay`` on what it
wrote; these helpers do exactly that in-process, then check the replayed transcript against the import
with the contract rules of ``microcompact.properties``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.contract import role_sequence_errors
from microcompact.importers import REGISTRY
from microcompact.importers.sniffing import HEAD_BYTES
from microcompact.messages import user_texts
from microcompact.properties import contract_errors
from microcompact.replay import load_transcript

DATA = Path(__file__).parents[1] / "data" / "importers"


def cli(*args: object) -> tuple[int, str, str]:
    """``microcompact ARGS`` in-process: exit code, stdout, stderr."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def sniffers_of(path: Path) -> list[str]:
    """Every registered format whose sniffer says yes to the start of ``path`` (one, for a sample)."""
    head = path.read_bytes()[:HEAD_BYTES].decode("utf-8", errors="replace")
    return [f.name for f in REGISTRY.values() if f.sniff(head)]


def import_with_cli(src: Path, out: Path, fmt: str = "auto") -> tuple[list[dict[str, Any]], list[str]]:
    """Run ``microcompact import --from FMT SRC --out OUT``; the messages written and the report lines."""
    code, stdout, stderr = cli("import", "--from", fmt, src, "--out", out)
    assert code == 0, stderr
    assert stdout == ""
    return load_transcript(out), stderr.splitlines()


def replay_with_cli(transcript: Path, tmp_path: Path, context_limit: int) -> tuple[dict[str, Any], list[Any]]:
    """Run ``microcompact replay TRANSCRIPT --context-limit N --out ... --json``: its summary and output."""
    out = tmp_path / f"{transcript.stem}.replayed.jsonl"
    code, stdout, stderr = cli(
        "replay", transcript, "--context-limit", context_limit, "--out", out, "--json", "--log", tmp_path / "agent.log"
    )
    assert code == 0, stderr
    return json.loads(stdout), load_transcript(out)


def assert_replays_keeping_the_contract(
    transcript: Path, tmp_path: Path, context_limit: int, *, passes: bool = True
) -> dict[str, Any]:
    """Replay ``transcript`` (an import's output) and check the result: every contract rule holds against the
    imported messages and every user message is still there verbatim. With ``passes``, the window is small
    enough that compaction really ran (so the check is not of an untouched copy)."""
    imported = load_transcript(transcript)
    assert role_sequence_errors(imported) == []
    summary, replayed = replay_with_cli(transcript, tmp_path, context_limit)
    assert summary["messages_in"] == len(imported)
    if passes:
        assert summary["passes"] > 0 and len(replayed) < len(imported)
    assert contract_errors(imported, replayed) == []
    assert role_sequence_errors(replayed) == []
    assert user_texts(replayed) == user_texts(imported)
    return summary
