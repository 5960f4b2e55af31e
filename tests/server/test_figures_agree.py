"""One conversation's figures agree everywhere (issue 28): the response headers, ``/metrics``, ``report`` and
the page's JSON give the same requests, folds, tokens saved, cache read, peak occupancy and dollars, for a
real ``serve`` subprocess in front of a scripted upstream that reports usage; a response read whole carries
the totals through itself, and a model with no known price says so."""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import local_http
from support.serve_process import ServeProcess, run_cli
from support.wire import wait_for
from upstream import ScriptedUpstream

STEPS = 12


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def _loop(base: str, model: str, steps: range, history: list[dict[str, Any]]) -> list[httpx.Response]:
    """A Chat Completions tool loop whose outputs (~6 KB each) fold at a 16K window (``history``: where it
    stands, extended in place)."""
    history[:] = history or [{"role": "user", "content": "Read the files one by one."}]
    answers = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for k in steps:
            answer = client.post(
                "/v1/chat/completions",
                json={"model": model, "messages": history},
                headers={"authorization": "Bearer sk-figures"},
            )
            assert answer.status_code == 200, answer.text
            answers.append(answer)
            call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": f'{{"p": "f{k}"}}'}}
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            output = f"needle{k} " + " ".join(f"line {k}-{i}" for i in range(700))
            history.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
            time.sleep(0.3)  # the previous request's follow-up (a fold computed ahead) has its moment
    return answers


def _stored(api: str, sid: str, requests: int) -> bool:
    return bool(local_http.get(api, params={"id": sid}).json().get("requests") == requests)


def _metrics_sum(texts: list[str], name: str) -> float:
    """A counter summed over the serve processes that answered (each counts what it answered)."""
    return sum(_metric(text, name) for text in texts)


@pytest.mark.slow
@pytest.mark.parametrize("restart", [False, True], ids=["one-process", "restarted"])
def test_every_surface_gives_the_same_figures(tmp_path: Path, restart: bool) -> None:
    """Restarted halfway: the new process's headers count the requests the first one answered (read from
    the store), ``report`` reads both processes' lines, and the two processes' ``/metrics`` add up."""
    home = tmp_path / "home"
    log = home / "proxy.log"
    history: list[dict[str, Any]] = []
    answers: list[httpx.Response] = []
    metrics_texts: list[str] = []
    halves = [range(STEPS // 2), range(STEPS // 2, STEPS)] if restart else [range(STEPS)]
    with ScriptedUpstream(openai_cache=True, min_cacheable=0) as upstream:
        for steps in halves:
            served = ServeProcess(
                home, "--db", str(home / "s.db"), "--log", str(log), "--openai-upstream", upstream.openai_base_url,
                "--context-limit", "16000",
            ).start()  # fmt: skip
            try:
                answers += _loop(served.base_url, "gpt-4o-2024-08-06", steps, history)
                last = answers[-1].headers
                sid = last["x-microcompact-session"]
                api = f"{served.base_url}/ui/api/conversation"
                assert wait_for(functools.partial(_stored, api, sid, steps.stop), timeout=30)
                page = local_http.get(api, params={"id": sid}).json()
                metrics_texts.append(local_http.get(f"{served.base_url}/metrics").text)
            finally:
                served.stop()
    shown = run_cli(home, "report", "--json", str(log))
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)["cost"]
    (cost,) = report

    assert last["x-microcompact-totals-through"] == "this-request"  # not streamed: read whole first
    assert last["x-microcompact-pricing"] == "gpt-4o"
    folds = int(last["x-microcompact-folds"])
    assert folds >= 1, "the loop never folded"
    saved = int(last["x-microcompact-tokens-saved"])
    assert saved > 0
    peak = max(float(a.headers["x-microcompact-occupancy"]) for a in answers)
    spent, uncompacted = float(last["x-microcompact-cost"]), float(last["x-microcompact-cost-uncompacted"])

    metrics = functools.partial(_metrics_sum, metrics_texts)
    assert [_metric(t, "microcompact_answered_requests_total") for t in metrics_texts] == [len(h) for h in halves]
    assert int(last["x-microcompact-requests"]) == STEPS == cost["requests"] == page["requests"]
    assert folds == cost["folds"] == page["folds"] == metrics("microcompact_folds_total")
    assert saved == cost["tokens_saved"] == page["tokens_saved"] == metrics("microcompact_tokens_saved_total")
    read = int(last["x-microcompact-cache-read"])
    assert read == cost["cache_read_tokens"] == page["cache_read_tokens"]
    assert read == metrics("microcompact_cache_read_tokens_total")
    assert peak == cost["occupancy_peak"] == page["occupancy_peak"]
    assert float(answers[-1].headers["x-microcompact-occupancy"]) == cost["occupancy_pct"] == page["occupancy_pct"]
    assert spent == pytest.approx(cost["spent"], abs=1e-6) and spent == pytest.approx(page["spent"], abs=1e-6)
    assert spent == pytest.approx(metrics('microcompact_cost_dollars_total{kind="spent"}'), abs=1e-6)
    assert uncompacted == pytest.approx(cost["uncompacted"], abs=1e-6)
    assert uncompacted == pytest.approx(page["uncompacted"], abs=1e-6) and spent < uncompacted
    assert cost["pricing"] == page["pricing"] == "gpt-4o"


def test_a_model_without_a_price_says_so(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = home / "proxy.log"
    served = ServeProcess(
        home, "--db", str(home / "s.db"), "--log", str(log), "--openai-upstream", upstream.openai_base_url
    ).start()
    try:
        body = {"model": "gpt-unheard-of", "messages": [{"role": "user", "content": "hello"}]}
        first = local_http.post(f"{served.base_url}/v1/chat/completions", json=body)
        second = local_http.post(f"{served.base_url}/v1/chat/completions", json=body)
        assert wait_for(lambda: sum("unpriced: gpt-unheard-of" in line for line in served.stderr) >= 2, timeout=30)
        metrics = local_http.get(f"{served.base_url}/metrics").text
        sid = second.headers["x-microcompact-session"]
        api = f"{served.base_url}/ui/api/conversation"
        assert wait_for(lambda: local_http.get(api, params={"id": sid}).json().get("requests") == 2, timeout=30)
        page = local_http.get(api, params={"id": sid}).json()
        html = local_http.get(f"{served.base_url}/ui/{sid}").text
    finally:
        served.kill()
    for answer in (first, second):
        assert answer.headers["x-microcompact-pricing"] == "unpriced: gpt-unheard-of"
        assert "x-microcompact-cost" not in answer.headers
    assert second.headers["x-microcompact-requests"] == "2"  # through itself: it was read whole
    assert _metric(metrics, "microcompact_unpriced_requests_total") == 2
    assert page["spent"] is None and page["unpriced"] == "gpt-unheard-of"
    assert "unpriced: gpt-unheard-of" in html
    from rich.console import Console

    from microcompact.report.cost import read_costs, render_costs

    (cost,) = read_costs([log])
    console = Console(record=True, width=400)
    render_costs([cost], console)
    assert "unpriced: gpt-unheard-of" in console.export_text() and cost.priced == 0


def test_a_stream_says_its_totals_run_through_the_previous_request(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    home = tmp_path / "home"
    served = ServeProcess(home, "--db", str(home / "s.db"), "--openai-upstream", upstream.openai_base_url).start()
    try:
        body = {"model": "gpt-5", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        body["stream_options"] = {"include_usage": True}
        heads = []
        for _ in range(2):
            with local_http.stream("POST", f"{served.base_url}/v1/chat/completions", json=body) as answer:
                heads.append(answer.headers)
                answer.read()
        assert wait_for(lambda: sum(" folds " in line for line in served.stderr) >= 2, timeout=30)
    finally:
        served.kill()
    assert [h["x-microcompact-totals-through"] for h in heads] == ["previous-request"] * 2
    assert [h["x-microcompact-requests"] for h in heads] == ["0", "1"]
    assert "x-microcompact-cost" not in heads[0] and float(heads[1]["x-microcompact-cost"]) > 0
