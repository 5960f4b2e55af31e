"""The package's layering: every module imports only from its own layer or the layers below it.

The map (also in docs/design.md): the ground holds message helpers and the event vocabulary; the engines
produce events; the store consumes them without importing the engines; the session ties engines and store
together; the tools (replay, compare, report, importers) and the command line sit on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import microcompact

PACKAGE = Path(microcompact.__file__).parent

# Lowest first. A module (or a subpackage, named by its folder) may import from its own layer and below.
LAYERS: list[set[str]] = [
    {"messages", "identity", "jsoninput", "redact", "telemetry", "config", "render", "windows"},
    {"events", "tokens"},
    {"window", "properties"},
    {"summarizers"},
    {"micro", "batch"},
    {"background", "store", "carry"},
    {"session", "aio"},
    {"replay", "cost", "report", "importers", "router"},
    {"integrations", "server"},
    {"compare"},
    {"cli", "__init__", "__main__"},  # cli/: every module of the command-line package sits on top
]


def _unit(path: Path) -> str:
    """The layer unit of a module file: its top-level module or subpackage name."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _layer_of(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"module {unit!r} is not in the layer map of tests/test_layers.py (and docs/design.md)")


def _internal_imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Top-level units of the package that ``path`` imports (relative or absolute), wherever the import is."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    depth_of_file = len(path.relative_to(package).parts) - 1  # 0 for a module at the package root
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = node.module or ""
                if mod == "microcompact" or mod.startswith("microcompact."):
                    parts = mod.split(".")[1:]
                    found.update([parts[0]] if parts else [a.name for a in node.names])
                continue
            up = node.level - 1  # how many folders above the file's own folder
            if up > depth_of_file:
                continue
            if up < depth_of_file:
                continue  # stays inside the file's own subpackage
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("microcompact."):
                    found.add(a.name.split(".")[1])
    return found


def test_every_module_is_in_the_layer_map() -> None:
    units = {_unit(p) for p in PACKAGE.rglob("*.py")}
    for unit in units:
        _layer_of(unit)


def test_no_module_imports_from_a_higher_layer() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        mine = _layer_of(unit)
        for target in _internal_imports(path) - {unit}:
            if not (PACKAGE / target).is_dir() and not (PACKAGE / f"{target}.py").exists():
                continue  # a name imported from the package root, not a module
            if _layer_of(target) > mine:
                violations.append(f"{path.relative_to(PACKAGE)} imports {target} (layer {_layer_of(target)} > {mine})")
    assert violations == []


def test_the_engines_do_not_import_each_other() -> None:
    """Micro and batch share the event vocabulary and the window, not each other's code."""
    for path in sorted((PACKAGE / "micro").rglob("*.py")):
        assert "batch" not in _internal_imports(path), path
    for path in sorted((PACKAGE / "batch").rglob("*.py")):
        assert "micro" not in _internal_imports(path), path


def test_the_store_never_imports_the_engines() -> None:
    engines = {"micro", "batch", "background", "session", "summarizers"}
    for path in sorted((PACKAGE / "store").rglob("*.py")):
        assert not (_internal_imports(path) & engines), path


def test_the_checker_resolves_relative_and_absolute_imports(tmp_path: Path) -> None:
    """The checker itself, on a made-up package: root-level, subpackage-internal, upward and absolute imports."""
    pkg = tmp_path / "microcompact"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("from .b import x\nfrom . import c\n", encoding="utf-8")
    (pkg / "sub" / "d.py").write_text(
        "from .e import y\nfrom ..f import z\nimport microcompact.g\n\ndef late():\n    from ..h import w\n",
        encoding="utf-8",
    )
    assert _internal_imports(pkg / "a.py", pkg) == {"b", "c"}
    assert _internal_imports(pkg / "sub" / "d.py", pkg) == {"f", "g", "h"}  # .e stays inside sub/
