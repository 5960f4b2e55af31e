"""The cost bench's Gemini rows: a generateContent tool loop (raw HTTP, as google-genai sends it) against
the scripted Gemini upstream with implicit caching (tests/support/gemini_server.py), direct and through
``serve``, tallied from the usage the upstream reported and priced at a Gemini model's list prices
(microcompact.bill.model_prices). ``bench_proxy_cost.py --rows gemini`` runs them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from cost_upstream import Tally, digest
from microcompact.bill.model_prices import GEMINI_PRICES
from support.gemini_server import GeminiUpstream, numbered_steps
from support.serve_process import ServeProcess

KEY = "gemini-test-key"
GEMINI_WINDOW = 1_000_000
GEMINI_MODELS = ("gemini-2.5-pro", "gemini-2.5-flash")
TOOL = {"name": "run_step", "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}}}


def gemini_loop(base: str, model: str, steps: int) -> tuple[bool, dict[str, str]]:
    """``steps`` calls of the tool, each answered with ~24 KB of output, then the final text: whether it
    finished, and the X-Microcompact-* headers of the last answer (empty direct)."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run the numbered steps with the tool."}]}]
    body: dict[str, Any] = {
        "systemInstruction": {"parts": [{"text": "You run shell steps. " + "Rules. " * 400}]},
        "tools": [{"functionDeclarations": [TOOL]}],
    }
    headers: dict[str, str] = {}
    with httpx.Client(timeout=300) as client:
        for n in range(steps + 2):
            answer = client.post(
                f"{base}/v1beta/models/{model}:generateContent",
                json={**body, "contents": contents},
                headers={"x-goog-api-key": KEY},
            )
            answer.raise_for_status()
            headers = {k: v for k, v in answer.headers.items() if k.startswith("x-microcompact-")}
            content = answer.json()["candidates"][0]["content"]
            contents.append(content)
            calls = [p["functionCall"] for p in content["parts"] if "functionCall" in p]
            if not calls:
                return "steps are done" in " ".join(p.get("text", "") for p in content["parts"]), headers
            output = "\n".join(str(i) for i in range(n * 1_000_000 + 1, n * 1_000_000 + 3001))
            response = {"functionResponse": {"name": calls[0]["name"], "response": {"output": output}}}
            contents.append({"role": "user", "parts": [response]})
    return False, headers


def tally_of(upstream: GeminiUpstream) -> Tally:
    """What the upstream reported for the loop's requests (prompt, implicit-cache reads, output)."""
    tally = Tally()
    for exchange in upstream.generations():
        usage = (exchange.response or {}).get("usageMetadata") if isinstance(exchange.response, dict) else None
        if not usage:
            continue
        prompt, read = int(usage.get("promptTokenCount", 0)), int(usage.get("cachedContentTokenCount", 0))
        tally.requests += 1
        tally.prompt += prompt
        tally.read += read
        tally.uncached += prompt - read
        tally.output += int(usage.get("candidatesTokenCount", 0))
        tally.peak = max(tally.peak, prompt)
        contents = exchange.body.get("contents") or []
        current = [digest(c) for c in contents]
        if tally._previous and current[: len(tally._previous)] != tally._previous:
            tally.folds += 1
        tally._previous = current
        tally.steps_seen.append(sum(1 for c in contents for p in c.get("parts", []) if "functionResponse" in p))
    return tally


def gemini_cost(tally: Tally, model: str) -> float:
    """Dollars at ``model``'s list prices: implicit-cache reads at the read price, the rest plain input."""
    price = GEMINI_PRICES[model]
    return (tally.read * price.read + (tally.prompt - tally.read) * price.input + tally.output * price.output) / 1e6


def gemini_run(work: Path, route: str, model: str, steps: int) -> tuple[Tally, float, bool, dict[str, str]]:
    """One run of the loop by ``route`` (direct or serve, the proxy at its defaults): the tally, seconds,
    whether it finished, and the last answer's X-Microcompact-* headers."""
    home = work / f"gemini-{route}-{model}"
    home.mkdir(parents=True)
    upstream = GeminiUpstream(script=numbered_steps(steps, "run_step"), window=GEMINI_WINDOW, api_key=KEY)
    started = time.monotonic()
    with upstream:
        served = None
        base = upstream.base_url
        if route != "direct":
            where = ["--db", str(home / "s.db"), "--log", str(home / "proxy.log")]
            served = ServeProcess(
                home, *where, "--gemini-upstream", upstream.base_url, "--context-limit", str(GEMINI_WINDOW)
            ).start()
            base = served.base_url
        try:
            ok, headers = gemini_loop(base, model, steps)
        finally:
            if served is not None:
                served.stop(timeout=120)
    return tally_of(upstream), time.monotonic() - started, ok, headers


__all__ = ["GEMINI_MODELS", "GEMINI_WINDOW", "gemini_cost", "gemini_run"]
