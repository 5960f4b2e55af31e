"""bench/working_set_folds.py folds a hand-made transcript down to its low-water mark (it imports what the
fold's tail budget is made of: an import that no longer resolves fails here, not only when it is run)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from support.agent_steps import bash, reply, user

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("working_set_folds", ROOT / "bench" / "working_set_folds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_long_session_is_folded_back_to_its_low_water_mark_and_the_newest_output_stays() -> None:
    bench = _bench()
    msgs = [user("go")]
    for k in range(40):  # ~1,500 tokens an output: 60K in all, well past low water + FOLD_EVERY
        msgs += bash(f"cat part_{k}", " ".join(f"part_{k}_item_{i}" for i in range(300)), text=f"step {k}")
    msgs.append(reply("done: part_39_item_7 was the last one"))
    need, found, sizes = bench.run(msgs, by_use=False)
    limit = bench.BASE_LOW_WATER + bench.FOLD_EVERY
    assert max(sizes) < limit + 4_000, "folds keep the transcript near low water + FOLD_EVERY"
    assert any(b < a for a, b in itertools.pairwise(sizes)), "at least one fold ran"
    assert (need, found) == (1, 1), "the newest output, which the last reply quotes, is still verbatim"
