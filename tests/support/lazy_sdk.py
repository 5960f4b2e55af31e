"""An SDK module imported at its first use, not when pytest collects the test file that names it.

Every xdist worker collects every test file, so a module-level ``import anthropic`` (or openai, google.genai,
mcp, the agent frameworks: 0.2-1.3 s of CPU each) costs every worker that import, whether or not it runs
one of the file's tests. ``anthropic = lazy("anthropic")`` binds the name to the module whose code runs at
the first attribute read (``importlib.util.LazyLoader``), so only a worker that runs such a test pays. The
module is the real one from then on, in ``sys.modules`` for every later ``import`` too. A test file that
reads an attribute at module level (a parametrize list, a class statement) loads it at collection anyway:
keep those reads inside the tests or fixtures.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """The module ``name`` (dotted), loaded when an attribute is first read; already imported: itself."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
