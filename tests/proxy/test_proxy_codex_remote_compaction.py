"""Codex's remote compaction through a real ``microcompact serve`` (issue 28, item 4).

Codex 0.169 compacts remotely only when its provider is named exactly "OpenAI": it sends ``POST /v1/responses``
with a ``compaction_trigger`` item appended and needs exactly one ``compaction`` output item back
(``remote compaction v2 expected exactly one compaction output item``). Here the provider is named so, its
base URL is ``serve``, and a low ``model_auto_compact_token_limit`` makes Codex compact during a tool loop.
``serve`` passes each such request through untouched; the scripted upstream answers as OpenAI does, with one
``compaction`` item naming the step it absorbed; Codex goes on from there with that item in its input and
finishes the loop, every step run once. Skipped when Codex is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import codex_cli, local_http
from support.serve_process import ServeProcess
from upstream.responses_server import ResponsesToolLoop, ResponsesUpstream, compaction_requested

_missing = codex_cli.unavailable_reason()
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

STEPS = 6
KEY = "sk-codex-remote-compaction"


def config(base_url: str) -> str:
    return (
        'model = "gpt-5.5"\nmodel_provider = "viaserve"\nmodel_auto_compact_token_limit = 20000\n'
        f'[model_providers.viaserve]\nname = "OpenAI"\nbase_url = "{base_url}"\nwire_api = "responses"\n'
        'env_key = "CODEX_REMOTE_KEY"\n'
    )


def test_remote_compaction_through_serve_goes_on_where_it_was(tmp_path: Path) -> None:
    with ResponsesUpstream(ResponsesToolLoop(STEPS)) as upstream:
        serve = ServeProcess(tmp_path / "mchome", "--openai-upstream", upstream.openai_base_url).start()
        try:
            codex_home = tmp_path / "codex-home"
            codex_home.mkdir()
            (codex_home / "config.toml").write_text(config(f"{serve.base_url}/v1"))
            (tmp_path / "work").mkdir()
            env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(codex_home)}
            env["CODEX_REMOTE_KEY"] = KEY
            command = [str(codex_cli.find_codex()), "exec", "--skip-git-repo-check"]
            command += ["--dangerously-bypass-approvals-and-sandbox", "Run the numbered steps with exec_command."]
            done = subprocess.run(
                command, cwd=tmp_path / "work", env=env, capture_output=True, text=True, timeout=300, check=False
            )
            metrics = local_http.get(f"{serve.base_url}/metrics", timeout=10).text
        finally:
            serve.stop()
        assert done.returncode == 0, done.stderr[-2000:]
        assert "All steps are done." in done.stdout
        sent = upstream.responses_requests()
        compactions = [r for r in sent if compaction_requested(r.body)]
        assert compactions, "Codex compacted remotely during the loop"
        for request in compactions:
            assert request.body["input"][-1] == {"type": "compaction_trigger"}
            completed = request.response_text.split("event: response.completed\ndata: ")[1]
            assert [i["type"] for i in json.loads(completed)["response"]["output"]] == ["compaction"]
        assert f'reason="provider_compaction"}} {len(compactions)}' in metrics, "each passed through untouched"
        after = sent[sent.index(compactions[0]) + 1]
        assert any(i.get("type") == "compaction" for i in after.body["input"]), "the next request carries the item"
        calls = [i["call_id"] for r in sent for i in r.body["input"] if i.get("type") == "function_call"]
        assert sorted(set(calls)) == [f"call_step_{n}" for n in range(STEPS)], "every step run, once each"
