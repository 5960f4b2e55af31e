"""Only an engine reads its own state: the rest of the package goes through its public methods.

Checked on the source (``ast``): no module but the engines' own (``batch/``, ``micro/engine.py``) touches an
engine attribute whose name starts with ``_``; the tools that report or carry engine state (``carry``,
``replay``, ``compare``, ``report``, ``background``) use ``memory()`` / ``restore()`` / ``stats()`` rather
than the engines' collaborators and rolling state; and :class:`MicroCompactor`'s interface is a declared
set of names, all that modules outside ``micro/`` use of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import microcompact
from microcompact.micro import MicroCompactor

PACKAGE = Path(microcompact.__file__).parent
ENGINE_NAMES = {"micro", "batch", "engine"}  # how the rest of the package names an engine object
INTERNALS = {"state", "policy", "calls", "summarize", "merging", "defrag", "refusal", "context"}
THROUGH_VIEWS = {"carry.py", "replay/__init__.py", "replay/compare.py", "session/background.py"}
# MicroCompactor's public methods and properties: the session's hooks, the worker's halves of a pass and of
# a fold, carrying and reporting. A new one is a decision, taken here.
MICRO_METHODS = {
    "active",
    "stats",
    "memory",
    "restore",
    "use_policy",
    "moment",
    "finalize_turn",
    "turn_due",
    "before_request",
    "background_request_mode",
    "idle_mode",
    "catch_up",
    "run_pass",
    "plan_ahead",
    "land",
    "fold_job",
    "applies",
    "adopt_fold",
    "sync",
    "recover",
    "select_span",
}
# Attributes outside ``micro/`` may read: the rolling state (turns, skips) and the clock a session stamps by.
MICRO_ATTRIBUTES = {"state", "wall_clock"}


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
    """Every module but the engines' own: ``micro/``'s other modules go through the interface too."""
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[0] != "batch" and p.relative_to(PACKAGE).as_posix() != "micro/engine.py"
    ]


def _micro_reads(path: Path) -> list[tuple[int, str]]:
    """(line, attribute) for every ``<x>.micro.<attribute>`` in ``path`` (how the package holds the engine)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "micro":
            found.append((node.lineno, node.attr))
    return sorted(found)


def test_no_module_outside_the_engines_reads_their_private_attributes() -> None:
    bad = [
        f"{p.relative_to(PACKAGE)}:{line}: .{attr}"
        for p in _outside_engines()
        for line, attr in _engine_attribute_reads(p)
        if attr.startswith("_") and not attr.startswith("__")
    ]
    assert bad == []


def test_carry_replay_and_reports_read_engine_state_through_memory_and_stats() -> None:
    assert all((PACKAGE / name).is_file() for name in THROUGH_VIEWS), "a module of THROUGH_VIEWS moved"
    bad = [
        f"{p.relative_to(PACKAGE)}:{line}: .{attr}"
        for p in _outside_engines()
        if p.relative_to(PACKAGE).as_posix() in THROUGH_VIEWS
        for line, attr in _engine_attribute_reads(p)
        if attr in INTERNALS
    ]
    assert bad == []


def test_the_check_sees_an_engine_read_when_there_is_one(tmp_path: Path) -> None:
    """The checker itself: it must find the reads it is there to forbid."""
    probe = tmp_path / "probe.py"
    probe.write_text("x = session.micro.state.cursor\ny = batch._risk\nz = self.micro.stats()\n")
    assert _engine_attribute_reads(probe) == [(1, "state"), (2, "_risk"), (3, "stats")]


def test_micro_compactor_has_the_declared_interface() -> None:
    public = {name for name in vars(MicroCompactor) if not name.startswith("_")}
    assert public == MICRO_METHODS, "a public method added or removed: declare it in MICRO_METHODS (or keep it private)"


def test_modules_outside_micro_use_only_the_micro_interface() -> None:
    allowed = MICRO_METHODS | MICRO_ATTRIBUTES
    bad = [
        f"{p.relative_to(PACKAGE)}:{line}: .micro.{attr}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[0] != "micro"
        for line, attr in _micro_reads(p)
        if attr not in allowed
    ]
    assert bad == []


def test_the_interface_check_sees_a_read_outside_it(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("x = self.micro.merging\ny = session.micro.stats()\nz = micro.cursor\n")
    assert _micro_reads(probe) == [(1, "merging"), (2, "stats")]
