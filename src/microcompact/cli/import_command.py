"""``microcompact import``: a recorded agent session converted into replay's JSONL (the work is
:mod:`microcompact.importers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..importers import FORMATS, run_import
from .base import check_path_text, err, fail
from .output import check_writable_target


def import_cmd(
    file: Annotated[Path, typer.Argument(help="A recorded session (its format detected, or named by --from).")],
    fmt: Annotated[
        str,
        typer.Option("--from", help="auto (detect from the file's start, the default) | " + " | ".join(FORMATS)),
    ] = "auto",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Output JSONL, a file (default and '-': stdout).")
    ] = None,
    record: Annotated[
        int | None, typer.Option("--record", help="adp files: which record (0-based; default the largest).")
    ] = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="openai files: repair recording defects (orphan tool "
            "results, "
            "calls with no result, duplicate call ids), each reported "
            "with its line, instead of refusing the file.",
        ),
    ] = False,
) -> None:
    """Convert a recorded agent session into the JSONL that replay reads."""
    check_path_text("FILE", file)
    check_path_text("--out", out_file)
    if record is not None and not 0 <= record < 2**31:
        fail(f"--record must be a record's index (0 or more), got {record}")
    if out_file is not None and str(out_file) != "-" and (out_file.parent.is_dir() or out_file.is_symlink()):
        # a file and nothing else, as for every --out (a missing folder is created, as import always has)
        check_writable_target("--out", out_file)
    code = run_import(fmt, file, out_file, err, record=record, repair=repair)
    if code:
        raise typer.Exit(code)
