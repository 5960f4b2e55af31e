"""The one tool-pairing repair and its two policies, on the same inputs.

``RENAME_DUPLICATES`` (``replay --repair``, ``import --from openai``) keeps every call a recording made;
``DROP_DUPLICATES`` (the format importers) drops a repeated call and flags its placeholder results. Both
leave a transcript whose pairing holds, and both leave a valid transcript untouched.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microcompact.contract import (
    DROP_DUPLICATES,
    INTERRUPTED_RESULT,
    NO_RESULT,
    RENAME_DUPLICATES,
    check_tool_pairing,
    repair_tool_pairing,
    tool_pairing_errors,
)
from microcompact.importers.common import ImportReport, repair
from support.strategies import examples, transcripts

Message = dict[str, Any]
FAST = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "Read", "arguments": "{}"}}


def A(*ids: str, text: str = "a") -> Message:
    m: Message = {"role": "assistant", "content": text}
    if ids:
        m["tool_calls"] = [call(i) for i in ids]
    return m


def T(cid: str, text: str = "r") -> Message:
    return {"role": "tool", "tool_call_id": cid, "content": text}


U: Message = {"role": "user", "content": "u"}


def kinds(found: list[Any]) -> list[str]:
    return [r.kind for r in found]


def test_a_repeated_call_id_is_renamed_or_dropped() -> None:
    damaged = [U, A("a", "a"), T("a", "first"), T("a", "second"), U]
    renamed, found = repair_tool_pairing(damaged, RENAME_DUPLICATES)
    assert renamed == [
        U,
        {"role": "assistant", "content": "a", "tool_calls": [call("a"), call("a~2")]},
        T("a", "first"),
        T("a~2", "second"),
        U,
    ]
    assert found == [
        (1, "duplicate_tool_call_renamed", "duplicate tool-call id 'a'", "renamed this call and its result 'a~2'")
    ]
    dropped, found = repair_tool_pairing(damaged, DROP_DUPLICATES)
    assert dropped == [U, A("a"), T("a", "first"), U]
    assert kinds(found) == ["duplicate_tool_call_dropped", "duplicate_tool_result_dropped"]
    assert tool_pairing_errors(renamed) == tool_pairing_errors(dropped) == []


def test_a_missing_result_is_added_as_each_policy_says() -> None:
    damaged = [U, A("a", "b"), T("a"), U]
    renamed, found = repair_tool_pairing(damaged, RENAME_DUPLICATES)
    assert renamed[3] == {"role": "tool", "tool_call_id": "b", "content": INTERRUPTED_RESULT}
    assert found[0].action == f"added the tool result {INTERRUPTED_RESULT!r}"
    dropped, found = repair_tool_pairing(damaged, DROP_DUPLICATES)
    assert dropped[3] == {"role": "tool", "tool_call_id": "b", "content": NO_RESULT, "_mc": {"placeholder": True}}
    assert list(dropped[3]) == ["role", "tool_call_id", "content", "_mc"]  # the order the importers wrote
    assert kinds(found) == ["missing_tool_result_added"]
    assert found[0].at == 1


def test_a_second_result_is_told_from_an_orphan_up_to_a_point_each_policy_names() -> None:
    """Dropped either way; the name differs: replay forgets answered calls at the next non-tool message,
    the importers at the next assistant message they keep."""
    damaged = [U, A("a"), T("a"), U, T("a")]
    renamed, found = repair_tool_pairing(damaged, RENAME_DUPLICATES)
    dropped, found_dropping = repair_tool_pairing(damaged, DROP_DUPLICATES)
    assert renamed == dropped == damaged[:4]
    assert kinds(found) == ["orphan_tool_result_dropped"]
    assert found[0].problem == "orphan tool result: a result with no open call for tool call 'a'"
    assert kinds(found_dropping) == ["duplicate_tool_result_dropped"]
    assert found_dropping[0].problem == "orphan tool result: a second result for tool call 'a'"
    after_text = [U, A("a"), T("a"), A(text="more"), T("a")]
    for policy in (RENAME_DUPLICATES, DROP_DUPLICATES):
        assert kinds(repair_tool_pairing(after_text, policy)[1]) == ["orphan_tool_result_dropped"]
    after_empty = [U, A("a"), T("a"), A(text=""), T("a")]
    assert kinds(repair_tool_pairing(after_empty, RENAME_DUPLICATES)[1]) == ["orphan_tool_result_dropped"]
    assert kinds(repair_tool_pairing(after_empty, DROP_DUPLICATES)[1]) == ["duplicate_tool_result_dropped"]


def test_replays_check_is_the_rename_policy() -> None:
    damaged = [U, A("a", "a"), T("a"), T("x"), U, A("b")]
    out, defects = check_tool_pairing(damaged)
    repaired, found = repair_tool_pairing(damaged, RENAME_DUPLICATES)
    assert out == repaired
    assert defects == [(r.at, r.problem, r.action) for r in found]


def test_the_importers_count_the_drop_policys_repairs() -> None:
    damaged = [U, A("a", "a"), T("a"), T("a"), T("z"), A(text=""), {"role": "system", "content": "late"}, A("b")]
    report = ImportReport("test", "inline")
    out = repair(damaged, report)
    _paired, found = repair_tool_pairing(damaged, DROP_DUPLICATES)
    assert report.repairs == Counter(kinds(found)) + Counter(empty_assistant_dropped=1, late_system_message_as_user=1)
    assert out == [
        U,
        A("a"),
        T("a"),
        {"role": "user", "content": "late"},
        A("b"),
        {"role": "tool", "tool_call_id": "b", "content": NO_RESULT, "_mc": {"placeholder": True}},
    ]


@FAST
@given(transcripts())
def test_a_valid_transcript_is_left_as_it_is_by_both(messages: list[Message]) -> None:
    for policy in (RENAME_DUPLICATES, DROP_DUPLICATES):
        assert repair_tool_pairing(messages, policy) == (messages, [])


@FAST
@given(transcripts(), st.integers(0, 2**32 - 1))
def test_both_repair_whatever_a_recording_broke(messages: list[Message], seed: int) -> None:
    """Messages dropped, repeated and a call id doubled at random: both policies pair every call."""
    rng = random.Random(seed)
    damaged = [m for m in messages if rng.random() > 0.15]
    damaged = [m for m in damaged for _ in range(2 if rng.random() < 0.1 else 1)]
    for i, m in enumerate(damaged):
        if m.get("tool_calls") and rng.random() < 0.3:
            damaged[i] = {**m, "tool_calls": [*m["tool_calls"], m["tool_calls"][0]]}

    def others(ms: list[Message]) -> list[Message]:
        return [{k: v for k, v in m.items() if k != "tool_calls"} for m in ms if m.get("role") != "tool"]

    def calls(ms: list[Message]) -> list[int]:
        return [len(m.get("tool_calls") or ()) for m in ms if m.get("role") != "tool"]

    for policy in (RENAME_DUPLICATES, DROP_DUPLICATES):
        out, found = repair_tool_pairing(damaged, policy)
        assert tool_pairing_errors(out) == []
        assert (found == []) == (out == damaged)
        assert others(out) == others(damaged)  # only tool results and calls are touched
        for m in out:
            ids = [tc["id"] for tc in m.get("tool_calls") or ()]
            assert len(set(ids)) == len(ids)
    assert calls(repair_tool_pairing(damaged, RENAME_DUPLICATES)[0]) == calls(damaged)  # no call lost
