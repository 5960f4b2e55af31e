"""Collecting the tests imports no SDK or agent framework: every xdist worker collects every test file, and
each of these costs each worker up to a second of CPU at a module-level import, whether or not the worker
runs a test that uses it. A test file binds them with ``support.lazy_sdk.lazy`` (CONTRIBUTING.md)."""

from __future__ import annotations

SDKS = "anthropic openai mcp google.genai langchain langchain_core langgraph pydantic_ai agents".split()


def test_collection_imports_no_sdk(modules_after_collection: frozenset[str]) -> None:
    imported = [name for name in SDKS if name in modules_after_collection]
    assert not imported, f"collecting the tests imported {', '.join(imported)}: bind it with support.lazy_sdk.lazy"
