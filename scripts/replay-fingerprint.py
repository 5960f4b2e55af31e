#!/usr/bin/env python3
"""Replay every shared transcript at fixed settings and keep what a behaviour-preserving change must not
alter: the ``--out`` transcript, the ``--json`` summary and the telemetry lines, with timings removed.

    python3 scripts/replay-fingerprint.py OUT_DIR            # with the microcompact on PATH or in .venv
    diff -r BEFORE_DIR AFTER_DIR && echo identical

Used to check that a restructuring changes nothing a user can see (the replay is deterministic: extractive
summarizer, recorded timestamps, no network).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def transcripts_dir() -> Path:
    """``shared/transcripts/normalized`` beside the checkout, or beside a folder above it (a worktree)."""
    for base in ROOT.parents:
        found = base / "shared" / "transcripts" / "normalized"
        if found.is_dir():
            return found
    raise SystemExit("replay-fingerprint: no shared/transcripts/normalized beside this checkout")


RUNS = [(limit, []) for limit in (32000, 64000, 200000)] + [(32000, ["--no-micro"])]
TIMING = re.compile(r"(_ms|_seconds|elapsed)(_total)?$")
LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def untimed(value: object) -> object:
    """``value`` without the keys that measure time (they differ from run to run)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def log_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = LOG_PREFIX.sub("", line)
        head, sep, payload = line.partition(" telemetry: {")
        payload = "{" + payload if sep else payload
        if sep and payload.startswith("{"):
            line = head + sep + json.dumps(untimed(json.loads(payload)), sort_keys=True)
        out.append(line)
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    out_dir = Path(sys.argv[1])
    exe = shutil.which("microcompact") or str(ROOT / ".venv" / "bin" / "microcompact")
    out_dir.mkdir(parents=True, exist_ok=True)
    for transcript in sorted(transcripts_dir().glob("*.jsonl")):
        for limit, extra in RUNS:
            name = f"{transcript.stem}-{limit}{''.join(extra)}"
            run_dir = out_dir / name
            run_dir.mkdir(exist_ok=True)
            log = run_dir / "agent.log"
            log.unlink(missing_ok=True)
            cmd = [exe, "replay", str(transcript), "--context-limit", str(limit), "--json"]
            cmd += ["--out", str(run_dir / "out.jsonl"), "--log", str(log), *extra]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            summary = untimed(json.loads(done.stdout)) if done.returncode == 0 else {"exit": done.returncode}
            (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
            (run_dir / "stderr.txt").write_text(done.stderr)
            lines = log_lines(log.read_text()) if log.exists() else []
            (run_dir / "telemetry.txt").write_text("\n".join(lines) + "\n")
            log.unlink(missing_ok=True)
            print(f"{name}: exit {done.returncode}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
