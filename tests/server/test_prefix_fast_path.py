"""The proxy's engine step with PrefixDigests (a continued history digested from its last one's hash) and
with every message digested anew routes, forks and compacts alike, whatever byte of the history changed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.identity import PrefixDigests, digests
from microcompact.router import SessionRouter
from microcompact.server.anthropic_format import AnthropicFormat
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.run import proxy_config
from microcompact.store import open_store
from support.strategies import examples

AN = AnthropicFormat()


class SlowPath(PrefixDigests):
    """Every history digested message by message, as before the fast path."""

    def digests_and_size(self, key: str, history: Any, identity: Any) -> tuple[list[str], int | None]:
        return digests(identity), None


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix the tests."}]
    for k in range(n):
        out.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}", "name": "Bash", "input": {"c": k}}]}
        )
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"output {k} " * 40}
        out.append({"role": "user", "content": [block]})
    return out


def _edited(history: list[dict[str, Any]], i: int, where: int, cached: bool) -> list[dict[str, Any]]:
    """``history`` with one character of message ``i`` changed (or only a cache breakpoint added)."""
    out = [dict(m) for m in history]
    m = out[i]
    if cached:  # a breakpoint is no change of what the message says: no fork either way
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        m["content"] = [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}]
        return out
    text = m["content"] if isinstance(m["content"], str) else str(m["content"])
    pos = where % len(text)
    m["content"] = text[:pos] + ("#" if text[pos] != "#" else "%") + text[pos + 1 :]
    return out


def _run(tmp: Path, slow: bool, requests: list[list[dict[str, Any]]]) -> list[Any]:
    store = open_store(tmp / f"{slow}.db")
    # inline passes on the cadence schedule: the view then depends on the requests alone, never on when a
    # worker finished or on the clock (the price schedule reads request times), so the two runs compare
    config_file = tmp / "inline.yaml"
    config_file.write_text("compression:\n  micro_compact_background: false\n  micro_compact_schedule: cadence\n")
    router = SessionRouter(proxy_config(config_file, 8192), store=store)
    compaction = Compaction(router, Metrics())
    if slow:
        compaction.prefixes = SlowPath()
    seen = []
    for history in requests:
        prepared = compaction.prepare(AN, {"model": "m"}, "k", history)
        assert prepared.session is not None
        seen.append((prepared.session.session_id, prepared.messages, prepared.degraded))
        compaction.answered(prepared, None)
        compaction.follow_up("k")
    seen.append([m for m in prepared.session.transcript])
    router.close()
    store.close()
    return seen


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 6), st.data())
def test_an_edit_anywhere_routes_as_the_slow_path(rounds: int, data: Any) -> None:
    first = _history(rounds)
    requests = [first, _history(rounds + 1)]
    for _ in range(data.draw(st.integers(1, 3))):
        last = requests[-1]
        i = data.draw(st.integers(0, len(last) - 1))
        edit = _edited(last, i, data.draw(st.integers(0, 10_000)), data.draw(st.booleans()))
        grown = data.draw(st.booleans())
        requests.append(edit + _history(rounds + 2)[len(edit) :] if grown else edit)
    with tempfile.TemporaryDirectory() as tmp:
        fast, slow = _run(Path(tmp), False, requests), _run(Path(tmp), True, requests)
    assert fast == slow
