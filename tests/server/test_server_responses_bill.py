"""The Responses API's cache figures through ``serve``: the scripted upstream reports
``input_tokens_details.cached_tokens`` (a stream in its final ``response.completed`` event), and the proxy
counts them in the bill it tells the user (headers, /metrics) and in what the fold schedule reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from support.responses_loop import tool_loop
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream

openai = lazy("openai")


# make test: the JSON answer; the stream's parsing has unit tests (tests/bill/test_cache_usage.py)
@pytest.mark.parametrize("stream", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_responses_cache_reads_reach_the_bill_and_the_schedule(tmp_path: Path, stream: bool) -> None:
    steps = 5
    with (
        ResponsesUpstream(ResponsesToolLoop(steps, reasoning=False)) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=200_000) as proxy,
    ):
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-responses-test", max_retries=0)
        loop = tool_loop(client, steps, "Print the numbers with the tool.", stream=stream)
        proxy.settle()
        metrics = local_http.get(f"{proxy.base_url}/metrics").text
        [session] = proxy.router.sessions()
        last = session.cache.last
    reported = [r.usage["input_tokens_details"]["cached_tokens"] for r in upstream.responses_requests() if r.usage]
    assert len(reported) == steps + 1 and sum(reported) > 0, reported
    found = re.search(r"^microcompact_cache_read_tokens_total (\d+)$", metrics, re.MULTILINE)
    assert found is not None and int(found.group(1)) == sum(reported)
    # A JSON answer's headers carry the totals with its own usage; a stream's, through the request before it
    # (its usage comes after the headers).
    through = reported[:-1] if stream else reported
    assert int(loop.headers[-1]["x-microcompact-cache-read"]) == sum(through)
    assert last is not None and last.cache_read_tokens == reported[-1]
