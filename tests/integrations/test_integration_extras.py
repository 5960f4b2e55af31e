"""Each adapter names the extra to install, in one line, when its framework is missing."""

from __future__ import annotations

import importlib
import sys

import pytest

CASES = [
    ("microcompact.integrations.langchain", "langchain.agents.middleware", "langchain"),
    ("microcompact.integrations.pydantic_ai", "pydantic_ai.messages", "pydantic-ai"),
    ("microcompact.integrations.openai_agents", "agents", "openai-agents"),
]


@pytest.mark.parametrize(("adapter", "framework", "extra"), CASES)
def test_a_missing_framework_names_its_extra(
    adapter: str, framework: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # import of it now fails, as if not installed
    monkeypatch.delitem(sys.modules, adapter, raising=False)
    with pytest.raises(ImportError) as caught:
        importlib.import_module(adapter)
    message = str(caught.value)
    assert f"pip install 'microcompact[{extra}]'" in message
    assert "\n" not in message


def test_the_package_imports_without_any_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, framework, _ in CASES:
        monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, "microcompact.integrations", raising=False)
    module = importlib.import_module("microcompact.integrations")
    assert module.HistoryCompactor is not None
