"""bench/working_set_recall.py's counting, on a hand-made transcript whose answer is known."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from support.agent_steps import filler, read, reply, user

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("working_set_recall", ROOT / "bench" / "working_set_recall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_mentioned_read_covers_what_the_next_reply_uses_and_a_forgotten_one_does_not() -> None:
    bench = _bench()
    msgs = [user("go"), *read("src/a_mod.py", "def alpha_one"), *read("src/b_mod.py", "def beta_two")]
    msgs += [reply("alpha_one matters"), *filler(2), reply("alpha_one again"), reply("and beta_two")]
    tally = bench.replay(msgs, recent=8)
    # Three uses of what tools showed: alpha_one first (not in use yet: nobody had mentioned it), alpha_one
    # again (in use), beta_two (never mentioned before: would be folded).
    assert (tally.need, tally.covered) == (3, 1)
    assert tally.call_ms and tally.ws_tokens
