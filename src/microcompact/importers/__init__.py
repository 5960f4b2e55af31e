"""Importers of recorded agent sessions (being split into one module per format; see common.py)."""

from .common import (
    FORMATS,
    NO_RESULT,
    TS_KEY,
    ImportReport,
    import_report,
    import_transcript,
    repair,
    resolve_format,
    run_import,
    to_epoch,
    write_jsonl,
)

__all__ = ["FORMATS", "NO_RESULT", "TS_KEY", "ImportReport", "import_report", "import_transcript", "repair",
           "resolve_format", "run_import", "to_epoch", "write_jsonl"]
