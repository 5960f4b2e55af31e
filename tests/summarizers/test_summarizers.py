"""Summarizers: the extractive one on a real transcript, bounded input, and the OpenAI one over real HTTP."""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.redact import REDACTED
from microcompact.summarizers import (
    BATCH_PROMPT,
    BATCH_SECTIONS,
    CONDENSE_PROMPT,
    MERGE_PROMPT,
    ExtractiveSummarizer,
    OpenAISummarizer,
    Summarizer,
    SummarizerAuthError,
    SummarizerBadOutput,
    SummarizerRateLimited,
    SummarizerTimeout,
    SummarizerUnavailable,
    prepare_exchange,
    prompts,
    render_exchange,
    shorten_summary,
)
from microcompact.tokens import EstimateCounter, make_text_counter
from support.chat_server import ChatServer, notes
from support.paths import NORMALIZED
from support.strategies import examples

TRANSCRIPT = NORMALIZED / "cc_fa812bfe.jsonl"
ROOT = "/home/USER/projects/spotter-worktrees/spotter-a0y"
KEY_ENV = "MICROCOMPACT_TEST_SUMMARIZER_KEY"
OPENAI_KEY = "sk-proj-" + "Xq7Lm2Vb9Tn4Rk8Wp3Zs6Hd1Jf5Gc0Ya"  # fake; concatenated to keep scanners quiet
estimate = EstimateCounter().count


@pytest.fixture(scope="module")
def transcript() -> list[dict[str, Any]]:
    if not TRANSCRIPT.exists():
        pytest.skip(f"shared transcripts not found at {TRANSCRIPT}")
    return [json.loads(line) for line in TRANSCRIPT.read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant/tool messages between the first user message and the next one."""
    end = next(i for i in range(1, len(transcript)) if transcript[i]["role"] == "user")
    return transcript[1:end]


def tool_exchange(call_id: str, name: str, arguments: dict[str, Any], result: str, text: str = "") -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def sections_of(summary: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in summary.splitlines():
        if line.startswith("### "):
            current = line[4:]
            out[current] = []
        elif line.startswith("- "):
            out[current].append(line[2:])
    return out


# --------------------------------------------------------------------------- extractive


def test_extractive_is_deterministic(first_run: list[dict[str, Any]]) -> None:
    first = ExtractiveSummarizer().merge("", first_run)
    assert ExtractiveSummarizer().merge("", copy.deepcopy(first_run)) == first
    assert ExtractiveSummarizer().batch(first, first_run, focus="credo") == ExtractiveSummarizer().batch(
        first, first_run, focus="credo"
    )


def test_extractive_picks_up_facts_of_a_real_exchange(first_run: list[dict[str, Any]]) -> None:
    summary = ExtractiveSummarizer(max_items=500, ledger_budget_tokens=4000).merge("", first_run)
    sections = sections_of(summary)
    files_heading = f"Files under {ROOT}/"
    assert list(sections) == [
        "Findings",
        "Open questions",
        "Commands and results",
        files_heading,
        "Failing commands",
        "Test runs",
        "What tools showed",
    ]
    files = sections[files_heading]
    assert any(f.startswith("lib/spotter/services/session_registry.ex — read: defines ") for f in files)
    assert any(f.startswith("lib/spotter/services/active_session_registry.ex — created, edited 9x") for f in files)
    assert any(f.startswith("lib/spotter_web/router.ex — edited 1x: + post(") for f in files)
    commands = "\n".join(sections["Commands and results"])
    assert "`bd update spotter-a0y.1 --status in_progress` → ✓ Updated issue: spotter-a0y.1" in commands
    failing = sections["Failing commands"]
    # The later `git push --set-upstream origin spotter-a0y` worked: the push error is resolved, not open.
    assert "(resolved) `git push 2>&1` → exit 128: fatal: The current branch spotter-a0y has no upstream branch." in (
        failing
    )
    assert any(f.startswith("`mix credo --strict") and "→ exit 2: " in f for f in failing)
    assert "`mix test 2>&1` → 373 passed, 0 failed" in sections["Test runs"]
    assert "Let me explore the existing codebase" not in summary  # narration is not a finding
    prose_and_files = {name: items for name, items in sections.items() if name != "What tools showed"}
    assert all(len(item) <= 240 for items in prose_and_files.values() for item in items)
    taught = "\n".join(sections["What tools showed"])
    # What the agent went on to use from a file it read is kept with the read, under its whole path.
    assert f"read `{ROOT}/lib/spotter/services/tmux.ex`: used " in taught
    assert "pane_exists" in taught
    assert "ran `bd ready`: used spotter-a0y.2" in taught


def test_extractive_reads_tracebacks_exit_codes_questions_and_findings() -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\n    main()\n'
        "KeyError: 'user_id'\nExit code: 1"
    )
    exchange = [
        *tool_exchange(
            "c1",
            "run_shell",
            {"cmd": "python app.py"},
            traceback,
            text="The config must stay backwards compatible. Should I keep the old flag?",
        ),
        *tool_exchange("c2", "grep", {"pattern": "user_id", "path": "src"}, "src/a.py:1\nsrc/b.py:2"),
        *tool_exchange(
            "c3",
            "Edit",
            {"file_path": "src/app.py"},
            "<tool_use_error>String not found</tool_use_error>",
            text="I'll use a default instead because the key is optional. Let me check the fixture and fix the test.",
        ),
    ]
    sections = sections_of(ExtractiveSummarizer().merge("", exchange))
    assert sections["Failing commands"] == [
        "`python app.py` → exit 1: KeyError: 'user_id'",
        "`Edit src/app.py` → error: String not found",
    ]
    assert sections["Files"] == ["src — searched: grep 'user_id'"]  # the failed edit changed nothing
    assert "Requirements" not in sections  # only the user states requirements
    assert sections["Open questions"] == ["Should I keep the old flag?"]
    assert sections["Findings"] == [
        "The config must stay backwards compatible.",
        "I'll use a default instead because the key is optional.",
    ]


def test_merge_keeps_old_facts_adds_new_and_counts_edits(transcript: list[dict[str, Any]]) -> None:
    summarizer = ExtractiveSummarizer()
    first = summarizer.merge("", transcript[1:4])  # bd show, bd ready
    read = tool_exchange("r1", "Read", {"file_path": "lib/app.ex"}, "defmodule App do\nend")
    second = summarizer.merge(first, transcript[4:8] + read)  # bd show .1, bd update
    edit = tool_exchange("e1", "Edit", {"file_path": "lib/app.ex", "new_string": "  def run, do: :ok"}, "updated.")
    third = summarizer.merge(second, edit)
    commands = "\n".join(sections_of(third)["Commands and results"])
    for command in ("`bd show spotter-a0y`", "`bd ready`", "`bd show spotter-a0y.1`", "`bd update spotter-a0y.1"):
        assert command in commands
    assert sections_of(third)["Files"] == ["lib/app.ex — edited 1x: + def run, do: :ok"]
    assert sections_of(summarizer.merge(third, edit))["Files"] == ["lib/app.ex — edited 2x: + def run, do: :ok"]
    assert "app.ex` → edited since: defines App" in third  # what the read saw is of before the edit
    # reading a changed file again adds nothing to the files; what it shows is current again
    assert summarizer.merge(third, read) == third.replace("` → edited since: defines App", "`: defines App")


def test_summary_stays_bounded_over_200_merges() -> None:
    summarizer = ExtractiveSummarizer(max_items=8, ledger_budget_tokens=1_000)  # bounded by its ledger's budget
    summary = ""
    for i in range(200):
        exchange = tool_exchange(
            f"c{i}",
            "Bash",
            {"command": f"make step-{i}"},
            f"error: step {i} broke\nexit code 2",
            text=f"Step {i} fails because the batch is too large. Is step {i} still needed?",
        )
        exchange += tool_exchange(f"r{i}", "Read", {"path": f"src/module_{i}.py"}, "x = 1")
        summary = summarizer.merge(summary, exchange)
    sections = sections_of(summary)
    assert set(sections) == {"Findings", "Open questions", "Files", "Failing commands"}
    assert all(len(items) <= 8 for name, items in sections.items() if name in ("Findings", "Open questions"))
    assert sections["Failing commands"][-1] == "`make step-199` → exit 2: error: step 199 broke"
    assert "`make step-0`" not in summary  # oldest dropped
    files = sections["Files"]
    folded = int(re.match(r"src/ — (\d+) read or searched", files[-1])[1])  # files only read: folded ...
    assert folded + len(files) - 1 == 200  # ... but counted
    assert len(sections["Failing commands"]) <= 10
    assert estimate(summary) < 1_600


def test_batch_uses_the_fixed_sections_and_updates_the_previous_summary(transcript: list[dict[str, Any]]) -> None:
    summarizer = ExtractiveSummarizer()
    end = next(i for i in range(1, len(transcript)) if transcript[i]["role"] == "user")
    first = summarizer.batch("", transcript[: end // 2])
    prose = [s for s in sections_of(first) if s in BATCH_SECTIONS]
    assert prose == [s for s in BATCH_SECTIONS if s in prose]
    assert sections_of(first)["Goal"][0].startswith("Work on bead spotter-a0y.")
    second = summarizer.batch(first, transcript[end // 2 : end + 3], focus="git push")
    sections = sections_of(second)
    assert sections["Goal"][0].startswith("Work on bead spotter-a0y.")  # kept from the previous summary
    assert "continue until all are done" in sections["Goal"]
    assert (
        "(resolved) `git push 2>&1` → exit 128: fatal: The current branch spotter-a0y has no upstream branch."
        in sections["Failing commands"]
    )
    assert any(f.startswith("lib/spotter_web/router.ex — edited") for f in sections[f"Files under {ROOT}/"])
    third = summarizer.batch(second, tool_exchange("z1", "Bash", {"command": "make build"}, "built"))
    assert sections_of(third)["Active state"] == ["Last command: `make build` → built"]  # replaced
    assert "Ran `make build`" in sections_of(third)["Completed actions"]
    fourth = summarizer.batch(third, tool_exchange("z2", "Bash", {"command": "mix test"}, "31 tests, 0 failures"))
    assert sections_of(fourth)["Test runs"][-1] == "`mix test` → 31 passed, 0 failed"


def test_batch_focus_keeps_matching_bullets_when_capped() -> None:
    summarizer = ExtractiveSummarizer(max_items=3)
    exchange: list[dict] = []
    for i in range(10):
        name = "payments" if i == 1 else f"misc{i}"
        exchange += tool_exchange(f"c{i}", "Bash", {"command": f"make {name}"}, "ok")
    completed = sections_of(summarizer.batch("", exchange, focus="payments"))["Completed actions"]
    assert completed == ["Ran `make payments`", "Ran `make misc8`", "Ran `make misc9`"]


@settings(max_examples=examples(150), deadline=None)
@given(
    sections=st.lists(
        st.tuples(
            st.text(alphabet="abcdefgh ", min_size=1, max_size=12),
            st.lists(st.text(alphabet="abcdefghij /.-`", min_size=1, max_size=150), max_size=12),
        ),
        min_size=1,
        max_size=6,
    ),
    target=st.integers(min_value=0, max_value=400),
)
def test_shorten_summary_is_strictly_shorter_and_fits(sections: list[tuple[str, list[str]]], target: int) -> None:
    summary = "\n\n".join(f"### {h.strip() or 'x'}\n" + "\n".join(f"- {b}" for b in bullets) for h, bullets in sections)
    out = shorten_summary(summary, target, estimate)
    if estimate(summary) <= target:
        assert out == summary
    else:
        assert len(out) < len(summary)
        assert estimate(out) <= target


def test_shorten_summary_drops_oldest_bullets_first_and_keeps_headings() -> None:
    summary = (
        "### Commands and results\n"
        + "\n".join(f"- `step {i}` → ok, all fine here" for i in range(20))
        + "\n\n### Errors\n- `make` → exit 2: boom"
    )
    out = shorten_summary(summary, estimate(summary) - 20, estimate)
    assert "### Commands and results" in out and "### Errors" in out
    assert "`step 0`" not in out and "`step 19`" in out
    assert "- `make` → exit 2: boom" in out


def test_shortening_converges_on_a_real_summary(first_run: list[dict[str, Any]]) -> None:
    counter = make_text_counter()
    summarizer = ExtractiveSummarizer(count_text=counter.count, max_items=500)
    summary = summarizer.merge("", first_run)
    for target in (900, 600, 200, 40, 5):
        shorter = summarizer.condense(summary, target)
        assert len(shorter) < len(summary)
        assert counter.count(shorter) <= target
        summary = shorter
    # An echoing model: shortening its own output over and over must terminate.
    text, calls = ExtractiveSummarizer(max_items=500).merge("", first_run), 0
    while estimate(text) > 100:
        shorter = shorten_summary(text, estimate(text) - 1, estimate)
        assert len(shorter) < len(text)
        text, calls = shorter, calls + 1
    assert calls < 500


# --------------------------------------------------------------------------- bounded input


def test_prepare_exchange_cuts_a_huge_tool_output(transcript: list[dict[str, Any]]) -> None:
    counter = make_text_counter()
    outputs = [m["content"] for m in transcript if m["role"] == "tool" and isinstance(m["content"], str)]
    huge = f"DB_PASSWORD=correcthorse42\n{chr(10).join(outputs)}"[:40_000]
    exchange = [
        {
            "role": "assistant",
            "content": f"Using {OPENAI_KEY} to call the API.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": "cat big.log"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": huge, "_tokens": 11_000},
    ]
    before = copy.deepcopy(exchange)
    prepared = prepare_exchange(exchange, 2_000, counter.count)
    assert exchange == before, "the transcript itself is never touched"
    rendered = render_exchange(prepared)
    assert counter.count(rendered) <= 2_000 * 1.05
    cut = prepared[1]["content"]
    assert "characters omitted by microcompact ...]" in cut
    omitted = int(cut.split("[... ")[1].split(" characters")[0].replace(",", ""))
    assert 30_000 < omitted < 40_000
    assert cut.startswith("DB_PASSWORD=[REDACTED]\n") and cut.endswith(huge[-50:])
    assert prepared[0]["content"] == f"Using {REDACTED} to call the API."
    assert prepared[0]["tool_calls"] == exchange[0]["tool_calls"], "small pieces stay whole"
    assert "_tokens" not in prepared[1]
    assert OPENAI_KEY not in rendered and "correcthorse42" not in rendered


def test_prepare_exchange_cuts_only_the_outsized_pieces() -> None:
    big_args = json.dumps({"file_path": "src/big.py", "content": "x = 1\n" * 8_000})
    exchange = [
        {
            "role": "assistant",
            "content": "Writing the generated module.",
            "tool_calls": [{"id": "w1", "type": "function", "function": {"name": "Write", "arguments": big_args}}],
        },
        {"role": "tool", "tool_call_id": "w1", "content": "File created successfully at: src/big.py"},
    ]
    prepared = prepare_exchange(exchange, 1_000, estimate)
    arguments = prepared[0]["tool_calls"][0]["function"]["arguments"]
    assert "characters omitted by microcompact" in arguments  # no longer JSON: only summarizers read it
    assert arguments.startswith('{"file_path": "src/big.py"')
    assert prepared[0]["content"] == "Writing the generated module."
    assert prepared[1]["content"] == "File created successfully at: src/big.py"
    assert estimate(render_exchange(prepared)) <= 1_050
    assert prepare_exchange(exchange, 100_000, estimate) == exchange  # within budget: only redaction


def test_render_exchange_labels() -> None:
    exchange = [
        {"role": "user", "content": "fix it"},
        *tool_exchange("c9", "Read", {"path": "a.py"}, "x = 1", text="Reading a.py."),
    ]
    assert render_exchange(exchange) == (
        'USER: fix it\n\nASSISTANT: Reading a.py.\n\nTOOL CALL [c9] Read({"path": "a.py"})\n\nTOOL RESULT [c9]: x = 1'
    )


# --------------------------------------------------------------------------- OpenAI-compatible summarizer


def openai_summarizer(server: ChatServer, **options: Any) -> OpenAISummarizer:
    options = {
        "model": "summarizer-small",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "timeout": 2.0,
        **options,
    }
    return OpenAISummarizer(**options)


EXCHANGE = tool_exchange(
    "c1",
    "Bash",
    {"command": f"OPENAI_API_KEY={OPENAI_KEY} ./deploy.sh"},
    "deployed with password=correcthorse42\nexit code 0",
    text="Deploying now.",
)


def test_openai_success_request_shape(chat_server: ChatServer) -> None:
    summarizer = openai_summarizer(chat_server, max_output_tokens=300, temperature=0.1)
    assert isinstance(summarizer, Summarizer) and summarizer.name == "summarizer-small"
    answer = notes("Deployed via ./deploy.sh; it exited with code 0.", goal="Keep the API stable.")
    chat_server.responder = lambda request: f"Here is the updated summary:\n```markdown\n{answer}\n```"
    out = summarizer.merge("### Decisions\n- keep the API stable", EXCHANGE)
    # the model's notes, unwrapped, with the previous summary's other sections kept beside them by code
    assert out == answer + "\n\n### Decisions\n- keep the API stable"
    (request,) = chat_server.requests
    assert request["model"] == "summarizer-small"
    assert request["temperature"] <= 0.2
    assert request["max_tokens"] == 300
    system, user = request["messages"]
    assert system == {"role": "system", "content": MERGE_PROMPT}
    assert "keep the API stable" in user["content"] and "TOOL CALL [c1] Bash(" in user["content"]


def test_openai_condense_and_batch_prompts(chat_server: ChatServer) -> None:
    summarizer = openai_summarizer(chat_server)
    summarizer.condense("### Work done\nRead a.py.\n### Files\n- a.py — read", 120)
    summarizer.batch("", EXCHANGE, focus="deployment")
    condense, batch = chat_server.requests
    words = int(re.search(r"at most (\d+) words", condense["messages"][1]["content"])[1])
    assert 60 <= words < 120  # the stated length fits the target, less the facts kept beside the notes
    assert condense["messages"][0]["content"] == prompts.condense_system(words)
    assert condense["messages"][0]["content"] != CONDENSE_PROMPT  # the default length was not used
    assert batch["messages"][0]["content"] == BATCH_PROMPT
    assert "FOCUS: deployment" in batch["messages"][1]["content"]
    assert all(f"### {name}" in BATCH_PROMPT for name in BATCH_SECTIONS)


def test_openai_latency_within_timeout_is_fine(chat_server: ChatServer) -> None:
    chat_server.latency = 0.3
    assert openai_summarizer(chat_server, timeout=2.0).merge("", EXCHANGE).startswith("### Goal")


@pytest.mark.parametrize(
    "fault, error",
    [
        (429, SummarizerRateLimited),
        (500, SummarizerUnavailable),
        ("quota", SummarizerAuthError),
        ("malformed", SummarizerBadOutput),
        ("empty", SummarizerBadOutput),
    ],
)
def test_openai_faults_map_to_summarizer_errors(chat_server: ChatServer, fault: Any, error: type) -> None:
    chat_server.add_faults(fault)
    with pytest.raises(error):
        openai_summarizer(chat_server).merge("", EXCHANGE)
    assert len(chat_server.requests) == 1, "the SDK must not retry on its own"
    assert openai_summarizer(chat_server).merge("", EXCHANGE)  # the next call works again


def test_openai_401_without_key_names_the_env_var(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    chat_server.add_faults(401)
    with pytest.raises(SummarizerAuthError, match=KEY_ENV):
        openai_summarizer(chat_server).merge("", EXCHANGE)


def test_openai_401_with_rejected_key_names_the_env_var(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "local-test-key")
    chat_server.add_faults(401)
    with pytest.raises(SummarizerAuthError, match=f"{KEY_ENV} was rejected"):
        openai_summarizer(chat_server).merge("", EXCHANGE)


def test_openai_hang_times_out(chat_server: ChatServer) -> None:
    chat_server.add_faults("hang")
    start = time.monotonic()
    with pytest.raises(SummarizerTimeout):
        openai_summarizer(chat_server, timeout=0.5).merge("", EXCHANGE)
    assert time.monotonic() - start < 2.0


def test_openai_connection_refused_is_unavailable() -> None:
    with ChatServer() as server:
        base_url = server.base_url
    summarizer = OpenAISummarizer("m", base_url=base_url, api_key_env=KEY_ENV, timeout=1.0)
    with pytest.raises(SummarizerUnavailable):
        summarizer.merge("", EXCHANGE)


def test_openai_strips_think_blocks_and_preamble(chat_server: ChatServer) -> None:
    answer = notes("Ran ./deploy.sh.", findings="Deploys happen on Fridays.")
    chat_server.responder = lambda _: (
        f"<think>The user wants a summary. Long reasoning...</think>\nHere is the updated summary:\n{answer}"
    )
    assert openai_summarizer(chat_server).merge("", EXCHANGE) == answer
    chat_server.responder = lambda _: "<think>reasoning cut off by max_tokens"
    with pytest.raises(SummarizerBadOutput):
        openai_summarizer(chat_server).merge("", EXCHANGE)


def test_openai_secrets_never_leave_and_never_come_back(chat_server: ChatServer) -> None:
    summarizer = openai_summarizer(chat_server)
    previous = "### Requirements\n- deploy token=ab12cd34ef56 must not change"
    summarizer.merge(previous, EXCHANGE)  # raw exchange, not prepared: the summarizer redacts anyway
    summarizer.batch(previous, EXCHANGE, focus="deploy")
    chat_server.add_faults("echo")
    echoed = summarizer.merge(previous, EXCHANGE)  # the echo is rejected; the retry's answer is kept
    chat_server.responder = lambda _: notes(f"leaked {OPENAI_KEY} and password: hunter2hunter2")
    leaked = summarizer.merge(previous, EXCHANGE)
    sent = json.dumps(chat_server.requests)
    for secret in (OPENAI_KEY, "correcthorse42", "ab12cd34ef56"):
        assert secret not in sent
        assert secret not in echoed
    assert "TOOL RESULT [c1]: deployed with password=[REDACTED]" in sent
    assert "TOOL RESULT" not in echoed, "an echo of the request was accepted"
    kept = f"### Requirements\n- deploy token={REDACTED} must not change"  # the facts, redacted on the way out
    assert leaked == notes(f"leaked {REDACTED} and password: {REDACTED}") + "\n\n" + kept


def test_extractive_merge_of_a_plain_answer_is_not_empty():
    out = ExtractiveSummarizer().merge("", [{"role": "assistant", "content": "Done. All tests pass now."}])
    assert "All tests pass now" in out
