"""docs/design.md's map of the package names every module, so a newcomer finds each file's job there.

A top-level module is named in the map's module column (``keys.py``). A module of a subpackage is named
in its package's row (``micro/``: ``engine``, ``fold_job``, ...) or in a section that row links to (the
store's own table under "The store", the conversation page's modules under theirs). A package's
``__init__`` and ``__main__`` are the package itself, imported or run with ``-m``: its row names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import microcompact

PACKAGE = Path(microcompact.__file__).parent
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
ROOT_FILES = {"__init__.py", "__main__.py"}


def _sections(text: str) -> dict[str, str]:
    """Each ``##``/``###`` section's text by its GitHub anchor (lowercase, punctuation dropped, spaces to -)."""
    out: dict[str, str] = {}
    for part in re.split(r"(?m)^(?=#{2,3} )", text):
        heading, _, _body = part.partition("\n")
        if heading.startswith("#"):
            title = heading.lstrip("#").strip().lower()
            anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            out[anchor] = part
    return out


def _map_rows(text: str) -> list[str]:
    """The rows of the table under "Map of the package"."""
    body = _sections(text)["map-of-the-package"]
    return [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| layer")]


def _named(name: str, text: str) -> bool:
    """``name`` (``core``, ``ui/record``) in backticks in ``text``, with or without ``.py`` or a leading path."""
    return re.search(rf"`(?:[\w./]*/)?{re.escape(name)}(?:\.py)?`", text) is not None


def _undocumented(package: Path, design: str) -> list[str]:
    """Every module of ``package`` that the map of ``design`` (the text of docs/design.md) does not name."""
    rows = _map_rows(design)
    sections = _sections(design)
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) == 1:
            if rel.name not in ROOT_FILES and not any(_named(rel.stem, r.split("|")[2]) for r in rows):
                missing.append(rel.as_posix())
            continue
        row = next((r for r in rows if f"`{rel.parts[0]}/`" in r.split("|")[2]), None)
        if row is None:
            missing.append(f"{rel.as_posix()} (no row for {rel.parts[0]}/)")
            continue
        if rel.name in ROOT_FILES:
            continue  # the package itself (imported, or run with -m): named by its row
        linked = [sections.get(anchor, "") for anchor in re.findall(r"\]\(#([\w-]+)\)", row)]
        inner = "/".join(rel.with_suffix("").parts[1:])
        if not any(_named(name, text) for name in {inner, rel.stem} for text in [row, *linked]):
            missing.append(rel.as_posix())
    return missing


def test_the_design_map_names_every_module() -> None:
    assert _undocumented(PACKAGE, DESIGN.read_text(encoding="utf-8")) == []


def test_the_map_check_finds_a_module_left_out(tmp_path: Path) -> None:
    pkg = tmp_path / "microcompact"
    (pkg / "store").mkdir(parents=True)
    (pkg / "micro").mkdir()
    for name in ("__init__.py", "keys.py", "stale.py", "store/__init__.py", "store/core.py", "store/lease.py"):
        (pkg / name).write_text("", encoding="utf-8")
    (pkg / "micro" / "engine.py").write_text("", encoding="utf-8")
    design = "\n".join(
        [
            "# design",
            "## Map of the package",
            "| layer | module | what it owns |",
            "|---|---|---|",
            "| ground | `keys.py` | keys |",
            "| persistence | `store/` | see [The store](#the-store) |",
            "## The store",
            "| `core.py` | the SQL |",
            "## Other",
            "`lease.py` and `micro/engine.py` are named here, outside the map and what it links to.",
        ]
    )
    assert _undocumented(pkg, design) == [
        "micro/engine.py (no row for micro/)",
        "stale.py",
        "store/lease.py",
    ]
