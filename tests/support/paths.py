"""Where the team's shared material is: ``shared/`` beside the repository (as CI lays it out), else /work/shared."""

import re
from pathlib import Path

_BESIDE = Path(__file__).resolve().parents[3] / "shared"
SHARED = _BESIDE if _BESIDE.is_dir() else Path("/work/shared")
TRANSCRIPTS = SHARED / "transcripts"
NORMALIZED = TRANSCRIPTS / "normalized"
MANIFEST = TRANSCRIPTS / "MANIFEST.md"

# A session's row in the MANIFEST table: "| name | raw file | ... | 358 (4/157/197/0) | ...".
_ROW = re.compile(r"^\|\s*(?P<name>[a-z0-9_]+)\s*\|.*\|\s*(?P<messages>\d+) \(\d+/\d+/\d+/\d+\)\s*\|")


def manifest_sessions() -> dict[str, int]:
    """Every normalized session the shared MANIFEST.md lists, with its message count: what the corpus must hold
    (so a partial copy of shared/ fails loudly instead of testing fewer sessions)."""
    rows = (_ROW.match(line) for line in MANIFEST.read_text(encoding="utf-8").splitlines())
    return {m["name"]: int(m["messages"]) for m in rows if m}
