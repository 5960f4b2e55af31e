"""Where the team's shared material is: ``shared/`` beside the repository (as CI lays it out), else /work/shared."""

from pathlib import Path

_BESIDE = Path(__file__).resolve().parents[2] / "shared"
SHARED = _BESIDE if _BESIDE.is_dir() else Path("/work/shared")
TRANSCRIPTS = SHARED / "transcripts"
NORMALIZED = TRANSCRIPTS / "normalized"
