"""A due fold through the background worker with the local extractive summarizer: the request at which the
rule says fold waits for the worker (``PricePolicy.due_wait``), so on a loop that sends the next request at
once the fold lands where it was decided, not requests later and lagging. A schedule that does not time
folds never waits, and neither does a model summarizer (its fold is seconds of network, not this process's CPU).
"""

from __future__ import annotations

from typing import Any

from microcompact.config import parse_config
from microcompact.micro import CadencePolicy
from microcompact.micro.price import LOCAL_FOLD_WAIT_SECONDS, PricePolicy
from microcompact.session import Session
from support.price_loop import step
from support.price_loop import step_session as session


def config(**compression: Any) -> Any:
    return parse_config(
        {
            "compression": {"micro_compact": True, "micro_compact_background": True, **compression},
            "model": {"context_length": 200_000},
            "pricing": {"preset": "anthropic"},
        }
    )


def back_to_back(s: Session, now: list[float], requests: int) -> None:
    """Requests with no wait for the worker between them (the test never calls ``background.wait``)."""
    for n in range(requests):
        now[0] += 10.0
        s.before_request()
        t = s.tokens
        last = s.cache.last
        read = min(t, last.cached_after) if last is not None else 0
        s.record_usage(t, cache_read_tokens=read, cache_write_tokens=t - read)
        step(s, n)


def test_a_due_fold_is_waited_for_with_the_extractive_summarizer():
    now = [0.0]
    s = session(config(), now)
    back_to_back(s, now, 40)
    assert s.background is not None and isinstance(s.micro.policy, PricePolicy)
    assert s.micro.policy.folds >= 1
    assert s.background.landed_waiting >= 1
    assert s.micro.policy.due_wait(s.micro.moment(s.ledger)) == LOCAL_FOLD_WAIT_SECONDS
    s.close()


def test_a_schedule_that_does_not_time_folds_never_waits():
    now = [0.0]
    s = session(config(micro_compact_schedule="cadence"), now)
    assert isinstance(s.micro.policy, CadencePolicy)
    assert s.micro.policy.due_wait(s.micro.moment(s.ledger)) == 0.0
    s.close()
