"""Only an engine reads its own state: the rest of the package goes through its public methods.

Checked on the source (``ast``): no module outside ``batch/`` and ``micro/`` touches an engine attribute
whose name starts with ``_``, and the tools that report or carry engine state (``carry``, ``replay``,
``compare``, ``report``, ``background``) use ``memory()`` / ``restore()`` / ``stats()`` rather than the
engines' collaborators and rolling state.
"""

from __future__ import annotations

import ast
from pathlib import Path

import microcompact

PACKAGE = Path(microcompact.__file__).parent
ENGINE_NAMES = {"micro", "batch", "engine"}  # how the rest of the package names an engine object
INTERNALS = {"state", "policy", "calls", "summarize", "merging", "defrag", "refusal", "context"}
THROUGH_VIEWS = {"carry.py", "replay.py", "compare.py", "report.py", "background.py"}


def _engine_attribute_reads(path: Path) -> list[tuple[int, str]]:
    """(line, attribute) for every ``<engine>.<attribute>`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else None
        if name in ENGINE_NAMES:
            found.append((node.lineno, node.attr))
    return sorted(found)


def _outside_engines() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in ("batch", "micro")]


def test_no_module_outside_the_engines_reads_their_private_attributes() -> None:
    bad = [
        f"{p.relative_to(PACKAGE)}:{line}: .{attr}"
        for p in _outside_engines()
        for line, attr in _engine_attribute_reads(p)
        if attr.startswith("_") and not attr.startswith("__")
    ]
    assert bad == []


def test_carry_replay_and_reports_read_engine_state_through_memory_and_stats() -> None:
    bad = [
        f"{p.relative_to(PACKAGE)}:{line}: .{attr}"
        for p in _outside_engines()
        if p.name in THROUGH_VIEWS and len(p.relative_to(PACKAGE).parts) == 1
        for line, attr in _engine_attribute_reads(p)
        if attr in INTERNALS
    ]
    assert bad == []


def test_the_check_sees_an_engine_read_when_there_is_one(tmp_path: Path) -> None:
    """The checker itself: it must find the reads it is there to forbid."""
    probe = tmp_path / "probe.py"
    probe.write_text("x = session.micro.state.cursor\ny = batch._risk\nz = self.micro.stats()\n")
    assert _engine_attribute_reads(probe) == [(1, "state"), (2, "_risk"), (3, "stats")]
