"""An SDK module imported at its first use, not when pytest collects the test file that names it.

Every xdist worker collects every test file, so a module-level ``import anthropic`` (or openai, mcp: 0.3-1.3 s
of CPU each) costs every worker that import, whether or not it runs one of the file's tests.
``anthropic = lazy("anthropic")`` binds the name to a stand-in whose public attributes are the real module's,
imported at the first read (``anthropic.Anthropic``, ``except anthropic.APIStatusError``). Its private names
are not forwarded: collection reads those of every module global (pytest looks for ``_mock_name`` and
``__wrapped__`` when it looks for fixtures), and an SDK's own tests never need them. A test file that reads a
public attribute at module level (a parametrize list, a class statement) imports it at collection anyway:
keep those reads inside the tests or fixtures, and a class that subclasses an SDK's (a scripted chat model)
in a support module bound with ``lazy`` too (``support.langchain_coder``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazySdk(ModuleType):
    """Stands for the module of the same name; the first public attribute read imports it."""

    def __getattr__(self, attr: str) -> Any:  # only for what the stand-in itself does not have
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)


def lazy(name: str) -> ModuleType:
    """A stand-in for the module ``name`` (dotted names too), imported at its first public attribute read."""
    return LazySdk(name)
