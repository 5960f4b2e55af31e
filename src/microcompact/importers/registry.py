"""The format registry and the import entry points that use it (by name, or detected for ``--from auto``).

Format modules do not import this; the package ``__init__`` registers them, so a format is one module plus
one line there.
"""

from __future__ import annotations

from pathlib import Path

from ..messages import Message, TranscriptError
from .common import Importer, ImportFormat, ImportReport, folder_files
from .sniffing import read_head

# The ``--from`` value that asks for detection instead of naming a format.
AUTO = "auto"

# Every importable format by name, in detection order (the first whose sniff says yes is picked).
REGISTRY: dict[str, ImportFormat] = {}

# Format name -> importer, kept in step with REGISTRY by register(). Only the command line's ``--from`` help
# still reads it (cli.py, being split by another change); it goes once that reads REGISTRY.
FORMATS: dict[str, Importer] = {}


def register(fmt: ImportFormat) -> ImportFormat:
    """Add a format to the registry (``--from NAME`` and detection); a name can be registered once."""
    if fmt.name in REGISTRY:
        raise ValueError(f"import format {fmt.name!r} is already registered")
    REGISTRY[fmt.name] = fmt
    FORMATS[fmt.name] = fmt.importer
    return fmt


def resolve_format(fmt: str) -> str:
    """The canonical format name (``claude_code`` and ``Claude-Code`` name ``claude-code``)."""
    name = str(fmt).strip().lower().replace("_", "-")
    if name not in REGISTRY:
        raise TranscriptError(f"unknown format {fmt!r}; known formats: {', '.join(REGISTRY)}")
    return name


def _folder_formats() -> list[str]:
    return [f.name for f in REGISTRY.values() if f.folders]


def _check_path(p: Path, name: str | None = None) -> None:
    """Refuse a missing path, or a folder where the format (or every format, unnamed) wants a file."""
    if not p.exists():
        raise TranscriptError(f"cannot read {p}: no such file")
    if p.is_dir():
        if name is None or name not in _folder_formats():
            readers = " or ".join(_folder_formats()) or "no"
            raise TranscriptError(f"{p}: a folder; only the {readers} format reads a folder (of event files)")
    elif not p.is_file():
        raise TranscriptError(f"{p}: not a file")


def detect_format(path: str | Path) -> str:
    """The name of the first registered format whose ``sniff`` recognizes the start of ``path``.

    A folder reads as the JSON array of its files, so its head is ``[`` and the start of its first file;
    only formats that read folders are asked.
    """
    p = Path(path)
    if p.is_dir():
        head = "[" + read_head(folder_files(p)[0])
        candidates = [REGISTRY[name] for name in _folder_formats()]
    else:
        _check_path(p)
        head, candidates = read_head(p), list(REGISTRY.values())
    for fmt in candidates:
        if fmt.sniff(head):
            return fmt.name
    names = ", ".join(f.name for f in candidates)
    raise TranscriptError(f"{p}: cannot tell its format from its start; give --from with one of: {names}")


def import_report(path: str | Path, fmt: str, record: int | None = None) -> ImportReport:
    """Convert ``path`` from ``fmt`` (or ``auto``: detected); the messages plus what was skipped and repaired."""
    name = detect_format(path) if is_auto(fmt) else resolve_format(fmt)
    p = Path(path)
    if record is not None and name != "adp":
        raise TranscriptError(f"--record applies to the adp format only, not {name}")
    _check_path(p, name)
    return REGISTRY[name].importer(p, record=record)


def import_transcript(path: str | Path, fmt: str, record: int | None = None) -> list[Message]:
    """The chat-completions messages of the session in ``path`` (format ``fmt``, see ``REGISTRY``)."""
    return import_report(path, fmt, record).messages


def is_auto(fmt: str) -> bool:
    """True when ``fmt`` asks for detection rather than naming a format."""
    return str(fmt).strip().lower() == AUTO
