"""Full garbage collections between requests (``server/gc_pace.py``): while a real proxy serves, CPython
never starts one on its own (it would land in whichever request allocates then); the proxy runs it after a
request's follow-up, never while another request is being prepared unless long overdue, and puts the
collector back as it was when it stops."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from microcompact.server.gc_pace import DEFAULT_FULL_AFTER, OVERDUE, CollectionPacing
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from upstream import ScriptedUpstream, text

anthropic = lazy("anthropic")


@pytest.fixture
def collector_as_found() -> Iterator[tuple[tuple[int, int, int], int]]:
    before = gc.get_threshold(), gc.get_freeze_count()
    yield before
    assert (gc.get_threshold(), gc.get_freeze_count()) == before  # every test leaves it as it found it


def young_collections(n: int) -> None:
    """Allocate until generation 1 was collected ``n`` more times (what makes a full collection due)."""
    start = gc.get_count()[2]
    keep: list[list[int]] = []
    while gc.get_count()[2] - start < n:
        keep.extend([i] for i in range(5_000))
        if len(keep) > 200_000:
            keep.clear()


def test_a_full_collection_waits_for_the_request_being_prepared(
    collector_as_found: tuple[tuple[int, int, int], int],
) -> None:
    pacing = CollectionPacing()
    assert not pacing.between_requests()  # not started: CPython's own schedule
    pacing.start()
    try:
        assert gc.get_threshold()[:2] == collector_as_found[0][:2]  # the young generations as before
        assert gc.get_freeze_count() > 0  # what existed at start is never walked again
        young_collections(DEFAULT_FULL_AFTER + 1)
        assert pacing.collections == 0  # CPython did not run it on its own
        with pacing.preparing():
            assert not pacing.between_requests()  # a request is on its way in: not now
        assert pacing.between_requests() and pacing.collections == 1
        assert gc.get_count()[2] == 0
        assert not pacing.between_requests()  # not due again yet
        with pacing.preparing():
            young_collections(DEFAULT_FULL_AFTER * OVERDUE)
            assert pacing.between_requests()  # never idle: it runs anyway once long overdue
    finally:
        pacing.stop()


def test_two_apps_share_the_settings_and_the_last_puts_them_back(
    collector_as_found: tuple[tuple[int, int, int], int],
) -> None:
    first, second = CollectionPacing(), CollectionPacing()
    first.start()
    second.start()
    first.stop()
    assert gc.get_threshold()[2] > collector_as_found[0][2]  # the second still serves
    second.stop()
    second.stop()  # twice is harmless


def test_a_serving_proxy_collects_after_its_requests(
    upstream: ScriptedUpstream, tmp_path: Path, collector_as_found: tuple[tuple[int, int, int], int]
) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=8192) as proxy:
        pacing = proxy.proxy.collector
        assert gc.get_threshold()[2] > collector_as_found[0][2]
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "Say something."}]
        for turn in range(3):
            young_collections(DEFAULT_FULL_AFTER)
            upstream.enqueue(text(f"answer {turn}"))
            reply = client.messages.create(model="claude-test", max_tokens=64, messages=messages)  # type: ignore[arg-type]
            proxy.settle()
            assert pacing.collections == turn + 1, "the follow-up ran the due full collection"
            messages += [
                {"role": "assistant", "content": reply.content[0].text},  # type: ignore[union-attr]
                {"role": "user", "content": f"And then {turn}?"},
            ]
