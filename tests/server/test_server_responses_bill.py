"""The Responses API's cache figures through ``serve``: the scripted upstream reports
``input_tokens_details.cached_tokens`` (a stream in its final ``response.completed`` event), and the proxy
counts them in the bill it tells the user (headers, /metrics) and in what the fold schedule reads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from support import local_http
from support.lazy_sdk import lazy
from support.proxy_server import ProxyServer
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream

openai = lazy("openai")

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]


def _loop(client: openai.OpenAI, steps: int, stream: bool) -> list[Any]:
    """The SDK's tool loop; the raw answers, for their headers."""
    items: list[Any] = [{"role": "user", "content": "Print the numbers with the tool."}]
    raws: list[Any] = []
    for _ in range(steps + 2):
        raw = client.responses.with_raw_response.create(
            model="gpt-test", input=items, tools=TOOLS, store=False, stream=stream
        )
        raws.append(raw)
        response = raw.parse()
        if stream:
            response = next(e.response for e in response if e.type == "response.completed")
        output = [item.model_dump(exclude_none=True) for item in response.output]
        items += output
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            return raws
        for call in calls:
            start, end = json.loads(call["arguments"])["cmd"].split()[1:]
            result = "\n".join(str(n) for n in range(int(start), int(end) + 1))
            items.append({"type": "function_call_output", "call_id": call["call_id"], "output": result})
    raise AssertionError("the tool loop did not end")


@pytest.mark.parametrize(
    "stream", [False, pytest.param(True, marks=pytest.mark.slow)]
)  # the stream parsing: unit tests
def test_the_responses_cache_reads_reach_the_bill_and_the_schedule(tmp_path: Path, stream: bool) -> None:
    steps = 5
    with (
        ResponsesUpstream(ResponsesToolLoop(steps, reasoning=False)) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=200_000) as proxy,
    ):
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="sk-responses-test", max_retries=0)
        raws = _loop(client, steps, stream)
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
    assert int(raws[-1].headers["x-microcompact-cache-read"]) == sum(through)
    assert last is not None and last.cache_read_tokens == reported[-1]
