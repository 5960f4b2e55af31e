"""``microcompact.keys`` is the one home of every ``_x`` message key: no other module of the package spells one
as a string literal (an AST walk, so comments and docstrings do not count)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import microcompact
from microcompact import keys

PACKAGE = Path(microcompact.__file__).parent
KEY_LITERAL = re.compile(r"^_[a-z][a-z_]*$")

# Strings that look like a key but are not one, each where it is spelled: an attribute name read with
# getattr, a private method of pydantic-ai's, the two substrings that guard redact's Stripe pattern, the
# suffixes of the Responses API's item types (``function_call``, ``function_call_output``).
NOT_KEYS = {
    ("replay/compare.py", "_occupancy_series"),
    ("integrations/pydantic_ai.py", "_merge_consecutive_messages"),
    ("redact/shapes.py", "_live_"),
    ("redact/shapes.py", "_test_"),
    ("server/responses_format.py", "_call"),
    ("server/responses_format.py", "_call_output"),
    ("summarizers/upstream_notes.py", "_output"),
    ("summarizers/upstream_wire.py", "_call"),
}


def _files() -> list[Path]:
    """Every module of the package but keys.py itself, so a new module is checked without being listed."""
    return [path for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "keys.py"]


def _not_keys(tree: ast.AST) -> set[int]:
    """ids of the constant nodes that cannot be a key: docstrings (a string statement opening a module, class
    or def) and the literal pieces of an f-string (``f"{kind}_dropped"``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.update(id(v) for v in node.values)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def key_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal in ``source`` that looks like a message key (``_x``)."""
    tree = ast.parse(source)
    skip = _not_keys(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and KEY_LITERAL.match(node.value)
    ]


def test_no_module_spells_a_key() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in _files()
        for line, text in key_literals(path.read_text(encoding="utf-8"))
        if (path.relative_to(PACKAGE).as_posix(), text) not in NOT_KEYS
    ]
    assert found == []


def test_every_message_key_of_keys_py_looks_like_a_key() -> None:
    """The walk finds a key by its shape, so each key keys.py defines must have that shape."""
    values = [v for name, v in vars(keys).items() if name.endswith("_KEY") and isinstance(v, str)]
    assert values and all(KEY_LITERAL.match(v) for v in values)


def test_the_walk_finds_a_key_in_code_and_not_in_a_docstring() -> None:
    source = (
        '"""Uses ``_mc``: "_mc"."""\n\n'
        'def f(m, k):\n    """Reads "_row"."""\n    return m.get("_row"), "_", f"{k}_as_"\n'
    )
    assert key_literals(source) == [(5, "_row")]


def test_each_key_is_named_once_in_keys() -> None:
    values = {
        name: getattr(keys, name) for name in dir(keys) if name.isupper() and isinstance(getattr(keys, name), str)
    }
    message_keys = [v for v in values.values() if v.startswith("_")]
    assert len(message_keys) == len(set(message_keys))
    assert all(KEY_LITERAL.match(v) for v in message_keys)
    meta_keys = [v for n, v in values.items() if n.endswith("_META")]
    assert len(meta_keys) == len(set(meta_keys))
    tree = ast.parse(Path(keys.__file__).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.module != "__future__"]


def test_the_bookkeeping_lists_agree() -> None:
    """The store-assigned keys are the bookkeeping list without ``_src``, which replay sets on purpose."""
    assert set(keys.STORE_KEYS) | {keys.SRC_KEY} == set(keys.BOOKKEEPING_KEYS)
    assert keys.SRC_KEY not in keys.STORE_KEYS
    assert not set(keys.BOOKKEEPING_KEYS) & set(keys.IDENTITY_KEYS)
    assert set(keys.STORE_KEYS) <= keys.RESERVED_KEYS
