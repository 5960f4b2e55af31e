"""What ``serve --audit`` says rewriting would have cost, against what rewriting did cost: one scripted agent
(``tests/support/audit_runs.py``) run through a rewriting ``serve`` and through ``serve --audit``, each with
its own scripted upstream (Anthropic's cache rules on the Messages route, OpenAI's automatic prefix caching
on Chat) and its own store, priced at the API's preset (Claude Sonnet / GPT-5 list prices).

    PYTHONPATH=src:tests python bench/bench_audit.py                  # both routes, 40 steps (about a minute)
    PYTHONPATH=src:tests python bench/bench_audit.py --routes chat --steps 80

Columns: the audit run's requests as they went (what the upstream billed), the rewriting run's bill, the
audit's would-have figure and how far it is from the rewriting run's, and the folds each counted.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import httpx

from support.audit_runs import run_script
from support.proxy_server import ProxyServer
from upstream import ScriptedUpstream

WINDOW = 40_000


def run(api: str, steps: int, audit: bool, where: Path) -> dict[str, Any]:
    with (
        ScriptedUpstream(min_cacheable=0, openai_cache=api == "chat") as upstream,
        ProxyServer(upstream.base_url, where / f"{api}-{audit}.db", context_limit=WINDOW, audit=audit) as proxy,
    ):
        done = run_script(proxy, upstream, api, steps)
        sid = done.last["x-microcompact-session"]
        page = httpx.get(f"{proxy.base_url}/ui/api/conversation", params={"id": sid}, timeout=60).json()
    return dict(page)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", default="anthropic,chat", help="anthropic, chat, or both (comma-separated)")
    parser.add_argument("--steps", type=int, default=40, help="tool steps of ~2,500 tokens each")
    options = parser.parse_args()
    header = ("route", "steps", "sent as it came", "rewriting run", "audit: would have", "difference", "folds")
    print(" | ".join(header))
    with tempfile.TemporaryDirectory(prefix="mc-bench-audit-") as where:
        for api in options.routes.split(","):
            rewritten = run(api, options.steps, False, Path(where))
            audited = run(api, options.steps, True, Path(where))
            difference = (audited["would_have"] - rewritten["spent"]) / rewritten["spent"] * 100
            print(
                f"{api} | {options.steps} | ${audited['spent']:.4f} | ${rewritten['spent']:.4f} | "
                f"${audited['would_have']:.4f} | {difference:+.2f}% | {rewritten['folds']} made, "
                f"{audited['folds']} would have"
            )


if __name__ == "__main__":
    main()
