"""Gemini CLI itself (``gemini -p``, the pinned npm package in tests/e2e/gemini-cli) through a real
``microcompact serve`` in front of the scripted Gemini upstream (``support.gemini_server``), checked from both
ends of the wire (issue 19).

Gemini CLI talks to a byte-recording TCP relay (``support.http_tap``), which talks to ``serve`` run as a
subprocess with a SQLite ``--db`` and a 64K window. The upstream makes the CLI run 24 real shell commands of
about 2.7K tokens of output each (uncompacted, the last request would be about 75K tokens, which the
upstream refuses as over its window). Micro-compaction folds old steps into a marker: every prompt stays
under the window, the CLI's first user content (its session context and the prompt) arrives verbatim in
every request, calls and responses stay paired, the signatures the upstream issued come back (it refuses a
current-turn call without one), and the CLI reads the upstream's bytes unchanged. ``serve`` is killed
(SIGKILL) while the CLI runs step 12 and started again on the same store: the loop goes on in the one
stored conversation. Skipped when the CLI is not installed (``tests/e2e/install-gemini-cli.sh``).

Why 64K: Gemini CLI sends about 10K tokens of system instruction and tool declarations with every request.
At 32K the batch threshold (16K) leaves it about 6K of history, and a micro pass may absorb at most an
eighth of the threshold (2K tokens), less than one step's output: only batch pruning could act (old outputs
stubbed one per request, each stub then absorbed). At 64K a pass takes whole steps and batch compaction has
room it does not need.

How Gemini CLI runs offline here: ``GOOGLE_GEMINI_BASE_URL`` points it at the relay, ``GEMINI_API_KEY`` and
``security.auth.selectedType: gemini-api-key`` in its settings pick key auth (without them it exits 41,
"Invalid auth method selected"), ``GEMINI_CLI_TRUST_WORKSPACE=true`` lets it run headless (else exit 55),
``--yolo`` approves its shell calls, and ``-m`` names a model, which skips its model router (a JSON-mode
classifier request to a flash-lite model before every turn).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import gemini_server
from support.gemini_server import GeminiUpstream, markers, pairing_errors
from support.http_tap import Exchange as Sent
from support.http_tap import TapRelay
from support.numbered_steps import wait_for_pause
from support.serve_process import ServeProcess
from support.stored_session import stored_session_errors

GEMINI_BIN = Path(__file__).parent / "gemini-cli" / "node_modules" / ".bin" / "gemini"
_missing = None if GEMINI_BIN.exists() and shutil.which("node") else "run tests/e2e/install-gemini-cli.sh"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing is not None, reason=_missing or "")]

STEPS = 24  # below Gemini CLI's 30 turns before its loop detection asks a model
PAUSE = 12  # the step during which serve is killed and started again
LINES = 400  # about 2.7K tokens of shell output a step
WINDOW = 65_536
KEY = "gemini-cli-e2e-key"
MODEL = "gemini-e2e-pro"
PROMPT = "Run the numbered steps with run_shell_command until they are done."
DONE = f"All {STEPS} steps are done."
WHOLE_STEP = 2_000  # tokens: less than one step's output, far more than a pruned step's one-line stub


def step_command(step: int, gate: Path) -> str:
    command = f"seq -f 'step {step} line %g: checked' 1 {LINES}"
    if step == PAUSE:  # wait for the test to kill serve and start it again
        command = f"touch {gate}.waiting; while [ ! -e {gate}.go ]; do sleep 0.05; done; {command}"
    return command


def cli_script(gate: Path) -> Any:
    """The model: a shell call per step, then the final text; requests without tools (side requests) get
    plain text and do not count as a step."""
    steps = [0]

    def script(_: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [{"text": "ok"}]
        steps[0] += 1
        if steps[0] > STEPS:
            return [{"text": DONE}]
        args = {"command": step_command(steps[0], gate), "description": f"Step {steps[0]}."}
        return [{"text": f"Step {steps[0]}."}, {"functionCall": {"name": "run_shell_command", "args": args}}]

    return script


def run_gemini(base_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    command = [str(GEMINI_BIN), "-m", MODEL, "-p", PROMPT, "--yolo"]
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)


@dataclass
class Scenario:
    run: subprocess.CompletedProcess[str]
    requests: list[tuple[Sent, gemini_server.Exchange]]  # what the CLI sent and read, with what went upstream
    restarted_at: int  # index of the first request the restarted server forwarded
    signatures: set[str]
    db: Path
    log: str  # both servers' log files


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    tmp = tmp_path_factory.mktemp("gemini_cli")
    db, gate = tmp / "sessions.db", tmp / "gate"
    served: list[ServeProcess] = []
    restarted_at: list[int] = []
    with GeminiUpstream(script=cli_script(gate), window=WINDOW, api_key=KEY) as upstream, TapRelay() as tap:

        def restart() -> None:
            if served:
                served[-1].kill()
                restarted_at.append(len(upstream.generations()))
            options = ("--db", str(db), "--gemini-upstream", upstream.base_url, "--context-limit", str(WINDOW))
            log = ("--log", str(tmp / f"proxy-{len(served)}.log"))
            served.append(ServeProcess(tmp / "mchome", *options, *log).start())
            tap.target_port = served[-1].port

        def restart_when_paused() -> None:
            try:
                wait_for_pause(gate)
                restart()
            finally:
                gate.with_suffix(".go").touch()  # never leave the CLI waiting

        restart()
        midway = threading.Thread(target=restart_when_paused, daemon=True)
        midway.start()
        try:
            run = run_gemini(tap.base_url, tmp)
            midway.join(timeout=60)
            assert served[-1].stop() == 0, "".join(served[-1].stderr)
        finally:
            for process in served:
                process.kill()
        exchanges = [e for e in tap.exchanges() if e.method == "POST" and "Content" in e.path.rsplit(":", 1)[-1]]
        received = upstream.generations()
        signatures = set(upstream.signatures)
    assert run.returncode == 0, run.stderr[-3000:]
    answered = [e for e in exchanges if e.status]  # a request that met the killed server never went up
    assert len(answered) == len(received), "the proxy added or dropped requests"
    assert len(restarted_at) == 1, "serve was killed and started again mid-loop"
    log = "".join(p.read_text() for p in sorted(tmp.glob("proxy-*.log")))
    yield Scenario(run, list(zip(answered, received, strict=True)), restarted_at[0], signatures, db, log)


def _client_contents(sent: Sent) -> list[dict[str, Any]]:
    return list(json.loads(sent.request_body)["contents"])


def _micro_passes(log: str) -> list[dict[str, Any]]:
    """The micro-compaction telemetry records in the servers' logs."""
    tag = "micro compaction telemetry: "
    return [json.loads(line.split(tag, 1)[1]) for line in log.splitlines() if tag in line]


def _outputs(contents: list[dict[str, Any]]) -> list[str]:
    return [
        p["functionResponse"]["response"]["output"] for c in contents for p in c["parts"] if "functionResponse" in p
    ]


def _without_markers(content: dict[str, Any]) -> dict[str, Any]:
    """``content`` without the marker parts the proxy merged into it (a marker next to a model content)."""
    marker_parts = set(markers({"contents": [content]}))
    return {**content, "parts": [p for p in content["parts"] if p.get("text") not in marker_parts]}


def test_gemini_cli_finished_the_loop(scenario: Scenario) -> None:
    assert DONE in scenario.run.stdout
    tools = [received for _, received in scenario.requests if received.body.get("tools")]
    assert len(tools) == STEPS + 1, "one request a step and one for the final answer"


def test_every_request_went_up_to_gemini_with_its_key(scenario: Scenario) -> None:
    for n, (sent, received) in enumerate(scenario.requests):
        assert received.status == 200, f"request {n}: {received.response}"
        assert received.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
        assert received.headers.get("x-goog-api-key") == KEY
        assert sent.response_headers["x-microcompact-mode"] == "compacted", f"request {n}"


def test_micro_compaction_kept_the_loop_under_the_window(scenario: Scenario) -> None:
    sent, received = scenario.requests[-1]
    uncompacted = gemini_server.prompt_tokens(json.loads(sent.request_body))
    assert uncompacted > WINDOW, f"the scenario must need compaction: the CLI's last request is {uncompacted} tokens"
    peak = max(r.prompt_tokens for _, r in scenario.requests)
    assert peak < WINDOW, f"peak prompt {peak} tokens over a {WINDOW}-token window"
    assert markers(received.body), "the last request carries a marker"
    absorbed = [p["exchange_tokens"] for p in _micro_passes(scenario.log) if p["outcome"] == "absorbed"]
    whole = [tokens for tokens in absorbed if tokens >= WHOLE_STEP]
    assert len(whole) >= STEPS // 3, f"micro passes folded whole steps, not pruned stubs: {absorbed}"
    client_outputs, outputs = _outputs(_client_contents(sent)), _outputs(received.body["contents"])
    assert len(client_outputs) == STEPS
    folded = [o for o in client_outputs if o not in outputs]
    assert len(folded) >= STEPS // 2, "old steps were folded into the marker, not only shortened"
    assert f"step {STEPS} line {LINES}: checked" in outputs[-1], "the newest output is kept whole"


def test_the_first_content_goes_verbatim_in_every_request(scenario: Scenario) -> None:
    first = _client_contents(scenario.requests[0][0])[0]
    assert any(p.get("text") == PROMPT for p in first["parts"])
    for n, (sent, received) in enumerate(scenario.requests):
        assert _client_contents(sent)[0] == first, f"request {n}: the CLI resent its first content"
        assert received.body["contents"][0] == first, f"request {n}: the first user content verbatim"


def test_calls_and_responses_stay_paired_with_their_signatures(scenario: Scenario) -> None:
    for n, (sent, received) in enumerate(scenario.requests):
        contents = received.body["contents"]
        assert pairing_errors(contents) == [], f"request {n}"
        client = _client_contents(sent)
        for i, content in enumerate(contents):
            kept = _without_markers(content)
            if not kept["parts"]:
                continue  # the marker on its own
            stubbed = all("functionResponse" in p for p in kept["parts"])  # a batch prune's stub, if any
            assert kept in client or stubbed, f"request {n}, contents.{i}: not the CLI's own content"
            calls = [p for p in kept["parts"] if "functionCall" in p]
            if calls:
                assert calls[0].get("thoughtSignature") in scenario.signatures, f"request {n}, contents.{i}"


def test_the_cli_read_the_upstreams_bytes(scenario: Scenario) -> None:
    for n, (sent, received) in enumerate(scenario.requests):
        assert sent.status == received.status and sent.complete, f"request {n}"
        assert sent.response_body == received.sent, f"request {n}: the answer changed on its way back"
    assert DONE.encode() in scenario.requests[-1][0].response_body


def test_the_killed_server_resumed_the_stored_conversation(scenario: Scenario) -> None:
    before = scenario.requests[: scenario.restarted_at]
    after = scenario.requests[scenario.restarted_at :]
    assert before and after, "requests were served by both processes"
    sessions = {sent.response_headers["x-microcompact-session"] for sent, _ in scenario.requests}
    assert len(sessions) == 1, f"one conversation across the restart, got {sessions}"
    assert f"step {PAUSE} line {LINES}: checked" in _outputs(after[0][1].body["contents"])[-1]
    markers_sent = [m for _, r in before for m in markers(r.body)]
    assert markers_sent, "the killed server had compacted"
    assert any(markers(r.body) for _, r in after), "the restarted server compacted on from the stored state"
    [session] = sessions
    history = len(_client_contents(scenario.requests[-1][0]))
    errors = stored_session_errors(scenario.db, session, history, list(dict.fromkeys(markers_sent)))
    assert errors == [], "one stored conversation, every content once, the killed server's markers kept"
