"""``replay --compare``'s ``micro-price`` row schedules as ``serve`` does by default: the same config-derived
floors and marks, so the same decision at every request of a shared session (its config goes through
``model_dump`` and back, which once made every derived setting look set)."""

from __future__ import annotations

from pathlib import Path

import pytest

from microcompact.bill.cache_usage import CacheObservations
from microcompact.config import parse_config
from microcompact.micro.price import PricePolicy
from microcompact.replay.compare import policy_config
from microcompact.server.run import proxy_config
from support.price_loop import WINDOW, answered, price_config, step, step_session


def test_the_micro_price_row_decides_as_serve_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path))  # no config file: serve's own defaults
    served_config = proxy_config(None, WINDOW)
    compared_config = policy_config(
        parse_config({"model": {"context_length": WINDOW}}),
        "micro-price",
        every_n=5,
        reclaim_tokens=4096,
        ttl_seconds=300,
    )
    assert compared_config.fold_min_messages() == served_config.fold_min_messages() == 1
    assert compared_config.piece_budget_tokens() == served_config.piece_budget_tokens()
    now = [0.0]
    s = step_session(price_config(), now)  # the shared session, folding by its own policy
    pricing = s.config.cache_pricing()  # the session's own: Anthropic's, the extractive summarizer free
    assert pricing is not None
    # Each schedule reads its own observations, fed the session's reports (it notes its own requests there).
    caches = (CacheObservations(), CacheObservations())
    served, compared = PricePolicy(served_config, pricing, caches[0]), PricePolicy(compared_config, pricing, caches[1])
    folds = 0
    for n in range(40):
        step(s, n)
        now[0] += 10
        moment = s.micro.moment(s.ledger)
        decided = served.before_request(moment)
        assert compared.before_request(moment) == decided, f"request {n}"
        folds += bool(decided)
        s.before_request()
        for policy in (served, compared):
            policy.requested(now[0])
        answered(s)
        for cache in caches:
            cache.record(s.cache.last)
    assert folds > 0, "the session came to a fold (the comparison covered one)"
