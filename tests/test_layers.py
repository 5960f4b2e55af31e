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
    {
        "keys",
        "messages",
        "identity",
        "jsoninput",
        "outfile",
        "redact",
        "telemetry",
        "config",
        "render",
        "identifiers",
        "textmemo",
        "bill",
        "windows",
        "wire",
    },
    {"events", "tokens"},
    {"window", "properties", "contract"},
    {"summarizers"},
    {"engine_context", "micro", "batch"},
    {"store", "carry"},
    {"session", "recall_tools"},
    {"report", "importers", "router", "recall"},
    {"integrations", "server", "launch"},
    {"replay"},
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


def test_the_conversation_page_imports_nothing_of_the_proxy() -> None:
    """``server/ui/`` (the page at /ui) reads the store; the proxy calls it (its recorder, its routes),
    never the other way round: no module of it imports a sibling module of ``server/``."""
    for path in sorted((PACKAGE / "server" / "ui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        upward = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 2]
        assert upward == [], f"{path.relative_to(PACKAGE)} imports server modules {upward}"


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


# ----------------------------------------------------------------------------------------- import circles


def _module_name(path: Path, package: Path) -> str:
    """The dotted name of a module file (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports(path: Path, modules: set[str], package: Path) -> set[str]:
    """The package's modules that ``path`` imports anywhere: at load time, under ``if TYPE_CHECKING:`` and
    inside functions (a deferred import still ties the two modules together, it only hides the circle
    from the interpreter). A name imported from a package counts as its submodule when there is one, else
    as the package."""
    name = _module_name(path, package)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join([*here[: len(here) - node.level + 1], node.module or ""]) if node.level else node.module
            base = (base or "").rstrip(".")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return (found & modules) - {name}


def _import_circles(package: Path) -> list[list[str]]:
    """Every set of modules that import each other round (strongly connected components of the import graph,
    Tarjan's algorithm, iterative), each sorted."""
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph = {name: sorted(_module_imports(p, set(paths), package)) for name, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(graph[node]):
                work.append((node, i + 1))
                nxt = graph[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return circles


def test_no_import_circle_anywhere_in_the_package() -> None:
    assert _import_circles(PACKAGE) == []


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    """The check itself, on a made-up package: a circle through a ``TYPE_CHECKING`` import is found, and
    one through an import deferred into a function, and a package ``__init__`` re-exporting is no circle."""
    pkg = tmp_path / "microcompact"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n", encoding="utf-8")
    (pkg / "a.py").write_text("from .b import y\n", encoding="utf-8")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n", encoding="utf-8"
    )
    (pkg / "c.py").write_text("def f():\n    from .d import z\n", encoding="utf-8")
    (pkg / "d.py").write_text("from .c import f\n", encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text("from .e import w\n", encoding="utf-8")
    (pkg / "sub" / "e.py").write_text("from ..a import x\n", encoding="utf-8")
    assert _import_circles(pkg) == [["microcompact.a", "microcompact.b"], ["microcompact.c", "microcompact.d"]]


MAX_SOURCE_LINES = 450
# Files allowed past MAX_SOURCE_LINES for now, each with its own cap, never above the hard 600: none today.
LONG_FILE_ALLOWANCE: dict[str, int] = {}
HARD_CAP = 600


def _long_files(package: Path, limit: int = MAX_SOURCE_LINES, allowed: dict[str, int] | None = None) -> list[str]:
    """Every source file under ``package`` longer than ``limit`` lines (or than its allowance), with its length."""
    allowed = allowed or {}
    out = []
    for path in sorted(package.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        name = path.relative_to(package).as_posix()
        if n > min(allowed.get(name, limit), HARD_CAP):
            out.append(f"{name}: {n} lines")
    return out


def test_no_source_file_is_over_450_lines() -> None:
    """A file past 450 lines mixes jobs; split it along them (as redact.py's rules and session.py's full
    history, engines and store moments were)."""
    assert _long_files(PACKAGE, allowed=LONG_FILE_ALLOWANCE) == []


def test_the_allowance_names_only_files_still_over_the_limit() -> None:
    """An allowance outlives its reason once the file is split: then it must go."""
    lengths = {name: len((PACKAGE / name).read_text(encoding="utf-8").splitlines()) for name in LONG_FILE_ALLOWANCE}
    assert {name for name, n in lengths.items() if n <= MAX_SOURCE_LINES} == set()


def test_the_length_check_finds_a_long_file(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_SOURCE_LINES)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_SOURCE_LINES + 1))
    (tmp_path / "sub" / "allowed.py").write_text("x = 1\n" * (MAX_SOURCE_LINES + 50))
    (tmp_path / "sub" / "too_long.py").write_text("x = 1\n" * (HARD_CAP + 1))
    allowed = {"sub/allowed.py": HARD_CAP, "sub/too_long.py": 1000}
    assert _long_files(tmp_path, allowed=allowed) == [
        f"sub/long.py: {MAX_SOURCE_LINES + 1} lines",
        f"sub/too_long.py: {HARD_CAP + 1} lines",
    ]
