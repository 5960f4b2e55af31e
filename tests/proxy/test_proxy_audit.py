"""``serve --audit`` through a real proxy in front of the scripted upstream (Anthropic's cache rules on the
Messages route, OpenAI's automatic prefix caching on Chat): every request goes up byte for byte with the
headers a passthrough forwards, while the proxy says what rewriting would have sent, folded and cost; the
same script run by a rewriting proxy costs what the audit said it would. The switch turns rewriting on for
one conversation while another stays in audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from microcompact.bill.cache_usage import UsageReport
from microcompact.bill.pricing import PRESETS
from microcompact.bill.session_bill import reported_prompt_cost
from microcompact.messages import MARKER_PREFIX
from support import local_http
from support.audit_runs import Agent, run_script, step_reply
from support.proxy_server import ProxyServer
from upstream import RecordedRequest, ScriptedUpstream

STEPS = 40
WINDOW = 40_000
KEY = "audit-proxy-key"


def reported(record: RecordedRequest) -> UsageReport:
    """The usage the upstream reported for one request, as the bill reads it."""
    usage = record.usage
    assert usage is not None
    if record.api == "anthropic":
        read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        return UsageReport(usage["input_tokens"] + read + written, read, written)
    return UsageReport(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], None)


def upstream_cost(upstream: ScriptedUpstream, api: str) -> float:
    """What the upstream billed for every generation request, at the API's preset prices."""
    pricing = PRESETS["anthropic" if api == "anthropic" else "openai"]
    return sum(reported_prompt_cost(pricing, reported(r)) for r in upstream.generation_requests())


def conversation(proxy: ProxyServer, session_id: str, key: str | None = None) -> dict[str, Any]:
    headers = {"x-microcompact-key": key} if key else {}
    answer = local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": session_id}, headers=headers)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def run(tmp_path: Path, api: str, audit: bool) -> tuple[ScriptedUpstream, dict[str, Any], list[bytes], str]:
    """The script through a fresh proxy and upstream: the upstream, the conversation's page JSON, the
    client's bodies and /metrics."""
    where = tmp_path / ("audit" if audit else "rewrite")
    where.mkdir()
    with (
        ScriptedUpstream(min_cacheable=0, openai_cache=api == "chat") as upstream,
        ProxyServer(upstream.base_url, where / "s.db", context_limit=WINDOW, audit=audit) as proxy,
    ):
        done = run_script(proxy, upstream, api, STEPS)
        modes = {a.headers["x-microcompact-mode"] for a in done.answers}
        assert modes == {"audit" if audit else "compacted"}
        page = conversation(proxy, done.last["x-microcompact-session"])
        metrics = local_http.get(f"{proxy.base_url}/metrics").text
    page["last_headers"] = dict(done.last)
    return upstream, page, done.sent, metrics


@pytest.mark.slow
@pytest.mark.parametrize("api", ["anthropic", "chat"])
def test_audit_sends_the_clients_bytes_and_would_have_cost_what_rewriting_cost(tmp_path: Path, api: str) -> None:
    rewriting, rewritten, sent, _ = run(tmp_path, api, audit=False)
    audited_upstream, audited, audit_sent, metrics = run(tmp_path, api, audit=True)
    assert sent == audit_sent, "the two runs are the same script: the same client requests"

    # What went up: the client's bytes, every one; the rewriting run changed many of them (it folded).
    got = [r.raw for r in audited_upstream.generation_requests()]
    assert got == audit_sent and len(got) == STEPS + 1
    assert not any(MARKER_PREFIX.encode() in body for body in got)
    changed = sum(r.raw != s for r, s in zip(rewriting.generation_requests(), sent, strict=True))
    assert changed >= STEPS // 2 and rewritten["folds"] >= 5

    # The audit's own figures: spent is what the upstream billed for the client's requests, uncompacted too.
    direct = upstream_cost(audited_upstream, api)
    assert audited["spent"] == pytest.approx(direct, abs=1e-5)
    assert audited["uncompacted"] == pytest.approx(direct, abs=1e-5)
    assert audited["mode"] == "audit" and audited["audited_requests"] == STEPS + 1

    # What it would have done: the folds the rewriting run made, its prompt, its dollars.
    assert rewritten["spent"] == pytest.approx(upstream_cost(rewriting, api), abs=1e-5)
    assert abs(audited["folds"] - rewritten["folds"]) <= 1
    assert audited["would_have_tokens"] == pytest.approx(rewritten["prompt_tokens"], rel=0.02)
    assert audited["would_have"] == pytest.approx(rewritten["spent"], rel=0.03)
    assert audited["would_have_saved"] == pytest.approx(direct - audited["would_have"], abs=1e-5)
    assert audited["would_have_saved"] > 0.3 * direct
    fold_rows = [r for r in audited["requests_figures"] if r["folded"]]
    assert fold_rows and all(r["would_have_tokens"] < r["prompt_tokens"] for r in fold_rows)

    # The headers say the same, up to the response before the last (a response's figures follow it).
    headers = audited["last_headers"]
    assert int(headers["x-microcompact-would-have-folds"]) == audited["folds"]
    assert float(headers["x-microcompact-cost"]) == pytest.approx(float(headers["x-microcompact-cost-uncompacted"]))
    would, saved = float(headers["x-microcompact-would-have-cost"]), float(headers["x-microcompact-would-have-saved"])
    assert 0 < would < float(headers["x-microcompact-cost"])
    assert saved == pytest.approx(float(headers["x-microcompact-cost"]) - would, abs=2e-6)
    assert "x-microcompact-tokens-saved" not in headers and int(headers["x-microcompact-would-have-saved-tokens"]) > 0
    provider = "anthropic" if api == "anthropic" else "openai"
    assert f'microcompact_mode_total{{api="{provider}",mode="audit",reason=""}} {STEPS + 1}' in metrics
    assert f"microcompact_would_have_folds_total {audited['folds']}" in metrics
    assert f"microcompact_would_have_cost_dollars_total {audited['would_have']:.6f}" in metrics
    assert "microcompact_tokens_saved_total 0" in metrics


def test_an_audited_request_goes_up_with_the_headers_a_passthrough_forwards(tmp_path: Path) -> None:
    client_headers = {
        "content-type": "application/json",
        "x-api-key": "sk-ant-test",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "prompt-caching-2024-07-31",
        "user-agent": "audit-test/1.0",
        "x-microcompact-key": KEY,
    }
    with (
        ScriptedUpstream(min_cacheable=0) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=WINDOW, audit=True, api_key=KEY) as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=60) as client,
    ):
        agent = Agent("anthropic", "h", client_headers)
        upstream.enqueue(step_reply(0))
        answer = agent.step(client, 0)
        assert answer.headers["x-microcompact-mode"] == "audit"
        count = client.post("/v1/messages/count_tokens", content=agent.run.sent[0], headers=client_headers)
        passed = client.post("/v1/messages/batches", content=agent.run.sent[0], headers=client_headers)
        assert count.status_code == 200 and passed.headers["x-microcompact-mode"] == "passthrough; reason=endpoint"
    audited, counted, passthrough = upstream.requests
    assert audited.raw == counted.raw == passthrough.raw == agent.run.sent[0]
    for record in (audited, counted):
        assert record.headers == passthrough.headers, set(record.headers.items()) ^ set(passthrough.headers.items())
    assert "x-microcompact-key" not in audited.headers and audited.headers["x-api-key"] == "sk-ant-test"


def test_the_switch_turns_rewriting_on_for_one_conversation_and_the_other_stays_in_audit(tmp_path: Path) -> None:
    proxy_key = {"x-microcompact-key": KEY}
    with (
        ScriptedUpstream(min_cacheable=0) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=WINDOW, audit=True, api_key=KEY) as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=60) as client,
    ):
        one, other = Agent("anthropic", "one", proxy_key), Agent("chat", "other", proxy_key)

        def steps(numbers: range) -> None:
            for n in numbers:
                for agent in (one, other):
                    upstream.enqueue(step_reply(n))
                    agent.step(client, n)
                    proxy.settle()

        steps(range(9))  # both would have folded by now; neither did
        assert upstream.requests and all(r.raw in (one.run.sent + other.run.sent) for r in upstream.requests)
        sid = one.run.last["x-microcompact-session"]
        assert int(one.run.last["x-microcompact-would-have-folds"]) >= 1

        switch = "/ui/api/rewrite"
        on = {"id": sid, "rewrite": True}
        assert client.post(switch, json=on).status_code == 401  # the proxy's key, as for the page
        form = client.post(switch, content=b"id=x&rewrite=true", headers=proxy_key)
        assert form.status_code == 415  # a cross-site form cannot switch anything
        assert client.post(switch, json={"id": sid}, headers=proxy_key).status_code == 400
        assert client.post(switch, json={"id": "nobody", "rewrite": True}, headers=proxy_key).status_code == 404
        answer = client.post(switch, json=on, headers=proxy_key)
        assert answer.status_code == 200 and answer.json() == on

        before = len(upstream.requests)
        steps(range(9, 11))
        one_up, other_up = upstream.requests[before::2], upstream.requests[before + 1 :: 2]
        assert [a.headers["x-microcompact-mode"] for a in one.run.answers[-2:]] == ["compacted"] * 2
        assert [a.headers["x-microcompact-mode"] for a in other.run.answers[-2:]] == ["audit"] * 2
        for record, sent in zip(one_up, one.run.sent[-2:], strict=True):
            assert record.raw != sent and MARKER_PREFIX.encode() in record.raw
        assert [r.raw for r in other_up] == other.run.sent[-2:]
        detail = conversation(proxy, sid, KEY)
        assert detail["rewrite_switched"] and detail["mode"] == "rewriting" and detail["audited_requests"] == 9
        page = client.get(f"/ui/{sid}", headers=proxy_key).text
        assert 'data-rewrite="off"' in page and "would have saved" in page
        other_page = client.get(f"/ui/{other.run.last['x-microcompact-session']}", headers=proxy_key).text
        assert "Turn rewriting on" in other_page and "would fold" in other_page

        assert client.post(switch, json={**on, "rewrite": False}, headers=proxy_key).status_code == 200
        before = len(upstream.requests)
        steps(range(11, 12))
        assert upstream.requests[before].raw == one.run.sent[-1]  # back to audit: the client's bytes
        assert one.run.last["x-microcompact-mode"] == "audit"


def test_a_responses_tool_loop_goes_up_as_it_came_and_would_have_folded(tmp_path: Path) -> None:
    from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream

    steps = 8
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}]
    items: list[dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    with (
        ResponsesUpstream(ResponsesToolLoop(steps)) as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=32_768, audit=True) as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=60) as client,
    ):
        for _ in range(steps + 1):
            body = {"model": "gpt-5", "input": items, "tools": tools, "store": False}
            answer = client.post("/v1/responses", json=body)
            assert answer.status_code == 200 and answer.headers["x-microcompact-mode"] == "audit"
            output = answer.json()["output"]
            items += output
            for call in (o for o in output if o["type"] == "function_call"):
                start, end = json.loads(call["arguments"])["cmd"].split()[1:]
                result = "\n".join(str(n) for n in range(int(start), int(end) + 1))
                items.append({"type": "function_call_output", "call_id": call["call_id"], "output": result})
            proxy.settle()
        sent = [body for path, body in proxy.received if path == "/v1/responses"]
        assert [r.raw for r in upstream.responses_requests()] == sent and len(sent) == steps + 1
        assert int(answer.headers["x-microcompact-would-have-folds"]) >= 1
        assert float(answer.headers["x-microcompact-would-have-saved"]) > 0


def test_a_gemini_tool_loop_and_its_counts_go_up_as_they_came(tmp_path: Path) -> None:
    from support.gemini_server import GeminiUpstream, numbered_steps

    key = {"x-goog-api-key": "gemini-test-key"}
    steps = 8
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run the steps."}]}]
    tools = [{"functionDeclarations": [{"name": "run_step", "parameters": {"type": "object"}}]}]
    model = "/v1beta/models/gemini-2.5-pro"
    with (
        GeminiUpstream(script=numbered_steps(steps, lines=400)) as upstream,
        ProxyServer(
            "http://127.0.0.1:9", tmp_path / "s.db", context_limit=16_384, audit=True, gemini_upstream=upstream.base_url
        ) as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=60, headers=key) as client,
    ):
        for _ in range(steps + 1):
            answer = client.post(f"{model}:generateContent", json={"contents": contents, "tools": tools})
            assert answer.status_code == 200 and answer.headers["x-microcompact-mode"] == "audit", answer.text
            reply = answer.json()["candidates"][0]["content"]
            contents.append(reply)
            calls = [p["functionCall"] for p in reply["parts"] if "functionCall" in p]
            output = "\n".join(f"line {n} " + "y" * 40 for n in range(400))
            contents += [
                {"role": "user", "parts": [{"functionResponse": {"name": c["name"], "response": {"output": output}}}]}
                for c in calls
            ]
            proxy.settle()
        count = client.post(f"{model}:countTokens", json={"contents": contents})
        assert count.status_code == 200
        sent = [json.loads(body) for path, body in proxy.received if path.startswith(model)]
        assert [e.body for e in upstream.exchanges] == sent and len(sent) == steps + 2
        assert int(answer.headers["x-microcompact-would-have-folds"]) >= 1
