"""OpenHands trajectories: OpenHands' own test trajectories imported through the command line, and replayed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from microcompact.contract import role_sequence_errors
from microcompact.importers import NO_RESULT, import_report, to_epoch
from microcompact.messages import TranscriptError
from support.import_checks import DATA, assert_replays_keeping_the_contract, cli, import_with_cli, sniffers_of

INTERACTIONS = DATA / "openhands" / "basic_interactions.json"
GUI_MODE = DATA / "openhands" / "basic_gui_mode_first_events.json"
V1 = DATA / "openhands" / "v1_events.json"  # software-agent-sdk events


def _events(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))


def _model_message(event: dict[str, Any]) -> dict[str, Any]:
    return event["tool_call_metadata"]["model_response"]["choices"][0]["message"]


@pytest.mark.parametrize("sample", [INTERACTIONS, GUI_MODE], ids=lambda p: p.stem)
def test_samples_import_with_auto_detection(sample: Path, tmp_path: Path) -> None:
    assert sniffers_of(sample) == ["openhands"]
    messages, report = import_with_cli(sample, tmp_path / "oh.jsonl")
    assert report[0] == f"{sample}: detected format openhands (--from NAME overrides)"
    assert role_sequence_errors(messages) == []
    events = _events(sample)
    # The user's messages verbatim, in order; every event the conversation came from keeps its time.
    said = [e["args"]["content"] for e in events if e.get("action") == "message" and e["source"] == "user"]
    assert [m["content"] for m in messages if m["role"] == "user"] == said
    stamps = {to_epoch(e["timestamp"]) for e in events}
    assert all(m["_ts"] in stamps for m in messages if m.get("_mc") != {"placeholder": True})
    # Every tool call is the model's own, with the arguments it sent.
    sent = {
        tc["id"]: tc["function"]["arguments"]
        for e in events
        if "tool_call_metadata" in e and "action" in e
        for tc in _model_message(e)["tool_calls"]
    }
    assert {tc["id"]: tc["function"]["arguments"] for m in messages for tc in m.get("tool_calls", ())} == sent


def test_agent_replies_and_the_finish_call() -> None:
    report = import_report(INTERACTIONS, "openhands")
    events = _events(INTERACTIONS)
    replies = [e["args"]["content"] for e in events if e.get("action") == "message" and e["source"] == "agent"]
    assistants = [m for m in report.messages if m["role"] == "assistant"]
    assert [m["content"] for m in assistants[:-1]] == replies
    finish = assistants[-1]
    assert [tc["function"]["name"] for tc in finish["tool_calls"]] == ["finish"]
    # finish is never observed: its call gets the placeholder result, and the report counts the repair.
    assert report.messages[-1] == {
        "role": "tool",
        "tool_call_id": finish["tool_calls"][0]["id"],
        "content": NO_RESULT,
        "_mc": {"placeholder": True},
    }
    assert report.repairs == Counter({"missing_tool_result_added": 1})


def test_state_events_are_counted_not_imported() -> None:
    report = import_report(GUI_MODE, "openhands")
    events = _events(GUI_MODE)
    assert [m["role"] for m in report.messages] == ["user", "assistant", "tool"]
    run, result = report.messages[1], report.messages[2]
    action = next(e for e in events if e.get("action") == "run")
    assert run["content"] == _model_message(action)["content"]
    assert result["tool_call_id"] == run["tool_calls"][0]["id"] == action["tool_call_metadata"]["tool_call_id"]
    skipped = Counter(
        f"observation_skipped:{e['observation']}"
        for e in events
        if "observation" in e and "tool_call_metadata" not in e
    ) + Counter(f"action_skipped:{e['action']}" for e in events if e.get("source") == "environment" and "action" in e)
    assert report.notes == skipped
    assert report.repairs == Counter()


@pytest.mark.parametrize("sample", [INTERACTIONS, GUI_MODE], ids=lambda p: p.stem)
def test_samples_replay_keeping_the_contract(sample: Path, tmp_path: Path) -> None:
    imported = tmp_path / "oh.jsonl"
    import_with_cli(sample, imported)
    # Too small to compact (a few hundred tokens), and the user messages cannot be absorbed: replayed as is.
    assert_replays_keeping_the_contract(imported, tmp_path, context_limit=4000, passes=False)


def _response(response_id: str, content: str | None, calls: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}} for cid, name in calls
        ],
        **extra,
    }
    return {"id": response_id, "choices": [{"index": 0, "message": message}]}


def test_one_response_with_several_calls_is_one_assistant_message(tmp_path: Path) -> None:
    response = _response("r1", "Two things at once.", [("a", "execute_bash"), ("b", "str_replace_editor")])
    response["choices"][0]["message"]["reasoning_content"] = "thinking it over"

    def meta(cid: str) -> dict[str, Any]:
        return {"tool_call_id": cid, "function_name": "f", "model_response": response}

    events = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands."}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "go", "image_urls": ["data:x"]}},
        {"id": 2, "source": "agent", "action": "run", "tool_call_metadata": meta("a"), "args": {}},
        {"id": 3, "source": "agent", "action": "edit", "tool_call_metadata": meta("b"), "args": {}},
        {"id": 4, "source": "agent", "observation": "run", "tool_call_metadata": meta("a"), "content": "A"},
        {"id": 5, "source": "agent", "observation": "error", "tool_call_metadata": meta("b"), "content": "B failed"},
    ]
    src = tmp_path / "output.json"
    src.write_text(json.dumps({"instance_id": "x", "history": events}), encoding="utf-8")  # an evaluation output
    assert sniffers_of(src) == ["openhands"]
    report = import_report(src, "auto")
    assert report.messages == [
        {"role": "system", "content": "You are OpenHands."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "go"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
        },
        {
            "role": "assistant",
            "content": "Two things at once.",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "execute_bash", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B failed", "_mc": {"is_error": True}},
    ]
    assert report.notes == Counter(
        {"reasoning_dropped": 1, "action_of_an_earlier_response": 1, "tool_result_is_error": 1}
    )


@pytest.mark.parametrize(
    "events,problem",
    [
        ([{"id": 0, "source": "user"}], r"event 0: event has neither 'action' nor 'observation'"),
        ([{"id": 0, "source": "agent", "observation": "run", "tool_call_metadata": {}}], r"event 0: .*tool_call_id"),
        (["not an event"], r"event 0: expected a JSON object, got str"),
        ({"events": []}, r"expected a JSON array of OpenHands events or an object with a 'history' or 'items' list"),
    ],
)
def test_bad_events_are_named(tmp_path: Path, events: Any, problem: str) -> None:
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(events), encoding="utf-8")
    with pytest.raises(TranscriptError, match=problem):
        import_report(src, "openhands")
    code, stdout, stderr = cli("import", "--from", "openhands", src, "--out", tmp_path / "out.jsonl")
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1 and str(src) in stderr


def test_an_action_without_its_model_response_is_rebuilt_from_the_action(tmp_path: Path) -> None:
    meta = {"tool_call_id": "t1", "function_name": "execute_bash"}
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "list files"}},
        {
            "id": 1,
            "source": "agent",
            "action": "run",
            "tool_call_metadata": meta,
            "args": {"command": "ls", "thought": "Let me look."},
        },
        {"id": 2, "source": "agent", "observation": "run", "tool_call_metadata": meta, "content": "a.py"},
    ]
    src = tmp_path / "trajectory.json"
    src.write_text(json.dumps(events), encoding="utf-8")
    report = import_report(src, "openhands")
    call = {"id": "t1", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}}
    assert report.messages[1] == {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}
    assert report.messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "a.py"}
    assert report.notes["tool_call_rebuilt_from_action"] == 1


# ------------------------------------------------------------------------------------------ V1 (software-agent-sdk)


def _text(items: list[dict[str, Any]]) -> str:
    return "\n".join(item["text"] for item in items)


def test_v1_events_import_with_auto_detection(tmp_path: Path) -> None:
    assert sniffers_of(V1) == ["openhands"]
    messages, report = import_with_cli(V1, tmp_path / "v1.jsonl")
    assert report[0] == f"{V1}: detected format openhands (--from NAME overrides)"
    assert role_sequence_errors(messages) == []
    events = _events(V1)
    of = {kind: [e for e in events if e["kind"] == kind] for kind in {e["kind"] for e in events}}
    system = of["SystemPromptEvent"][0]
    assert messages[0] == {
        "role": "system",
        "content": system["system_prompt"]["text"] + "\n" + system["dynamic_context"]["text"],
        "_ts": to_epoch(system["timestamp"]),
    }
    said = [_text(e["llm_message"]["content"]) for e in of["MessageEvent"] if e["source"] == "user"]
    summary = of["Condensation"][0]["summary"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [*said, summary]
    # The calls of one model response (same llm_response_id) are one assistant message.
    responses = Counter(e["llm_response_id"] for e in of["ActionEvent"])
    assistants = [m for m in messages if m.get("tool_calls")]
    assert [len(m["tool_calls"]) for m in assistants] == list(responses.values())
    calls = {tc["id"]: tc["function"] for m in assistants for tc in m["tool_calls"]}
    assert calls == {
        e["tool_call_id"]: {k: e["tool_call"][k] for k in ("name", "arguments")} for e in of["ActionEvent"]
    }
    # Every call has its result: the observation, the user's rejection, or the agent's error.
    results = {m["tool_call_id"]: m for m in messages if m["role"] == "tool"}
    for e in of["ObservationEvent"]:
        assert results[e["tool_call_id"]]["content"] == _text(e["observation"]["content"])
    rejected = of["UserRejectObservation"][0]
    assert results[rejected["tool_call_id"]]["content"] == f"Action rejected: {rejected['rejection_reason']}"
    failed = of["AgentErrorEvent"][0]
    assert results[failed["tool_call_id"]] == {
        "role": "tool",
        "tool_call_id": failed["tool_call_id"],
        "content": failed["error"],
        "_mc": {"is_error": True},
        "_ts": to_epoch(failed["timestamp"]),
    }


def test_v1_report_counts_what_is_not_a_chat_message() -> None:
    report = import_report(V1, "openhands")
    events = _events(V1)
    assert report.notes["event_skipped:ConversationStateUpdateEvent"] == sum(
        e["kind"] == "ConversationStateUpdateEvent" for e in events
    )
    assert report.notes["reasoning_dropped"] == sum(bool(e.get("reasoning_content")) for e in events)
    assert report.compact_summary_indices == [
        i for i, m in enumerate(report.messages) if m.get("_mc") == {"compact_summary": True}
    ]
    assert report.repairs == Counter()


def test_v1_events_replay_keeping_the_contract(tmp_path: Path) -> None:
    imported = tmp_path / "v1.jsonl"
    import_with_cli(V1, imported)
    assert_replays_keeping_the_contract(imported, tmp_path, context_limit=1024)


def test_v1_event_search_page_and_bad_events(tmp_path: Path) -> None:
    page = tmp_path / "events.json"
    page.write_text(json.dumps({"items": _events(V1), "next_page_id": None}), encoding="utf-8")
    assert sniffers_of(page) == ["openhands"]
    assert import_report(page, "auto").messages == import_report(V1, "openhands").messages
    for event, problem in [
        ({"kind": "MessageEvent", "source": "user", "llm_message": {"role": "robot"}}, "needs an llm_message"),
        ({"kind": "ActionEvent", "source": "agent", "tool_call": {"name": "terminal"}}, "tool call needs an id"),
        ({"kind": "ObservationEvent", "source": "environment", "observation": {"content": []}}, "needs a tool_call_id"),
        ({"source": "agent"}, "expected an event object with a 'kind'"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps([_events(V1)[0], event]), encoding="utf-8")
        with pytest.raises(TranscriptError, match=rf"bad\.json: event 1: .*{problem}"):
            import_report(bad, "openhands")


# ------------------------------------------------------------------------------------------ event folders


def _as_folder(events: list[dict[str, Any]], folder: Path, name: Any) -> Path:
    """Write each event to its own file, as OpenHands stores a conversation's events."""
    folder.mkdir(parents=True)
    for n, event in enumerate(events):
        (folder / name(n, event)).write_text(json.dumps(event), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    "sample,name",
    [
        (INTERACTIONS, lambda n, e: f"{e['id']}.json"),  # classic: sessions/<id>/events/<id>.json (3 before 12)
        (V1, lambda n, e: f"event-{n:05d}-{e['id']}.json"),  # V1: conversations/<id>/events/event-<n>-<id>.json
    ],
    ids=["classic", "v1"],
)
def test_a_folder_of_event_files_imports_like_the_list(tmp_path: Path, sample: Path, name: Any) -> None:
    folder = _as_folder(_events(sample), tmp_path / "events", name)
    messages, report = import_with_cli(folder, tmp_path / "out.jsonl")
    assert report[0] == f"{folder}: detected format openhands (--from NAME overrides)"
    assert messages == import_report(sample, "openhands").messages


def test_folders_are_refused_where_they_cannot_be_read(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TranscriptError, match=r"empty: a folder with no \.json files"):
        import_report(empty, "auto")
    events = _as_folder(_events(INTERACTIONS), tmp_path / "events", lambda n, e: f"{n}.json")
    with pytest.raises(TranscriptError, match=r"events: a folder; only the openhands format reads a folder"):
        import_report(events, "codex")
    other = _as_folder([{"a": 1}], tmp_path / "other", lambda n, e: "x.json")
    code, stdout, stderr = cli("import", other, "--out", tmp_path / "out.jsonl")
    assert code == 2 and stdout == "" and "cannot tell its format from its start" in stderr
    (events / "3.json").write_text('{"id": 3, "source": "agent"}', encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"events/3\.json: event has neither 'action' nor 'observation'"):
        import_report(events, "openhands")
