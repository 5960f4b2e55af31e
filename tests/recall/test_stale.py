"""Stale claims on hand-made transcripts: which tool calls are file events, and which summary lines state a
file as it was before a change that was folded away."""

from __future__ import annotations

import json
from typing import Any

from microcompact.recall.stale import Change, FileEvent, file_events, names, stale_claims


def call(name: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": function}]}


OLD = "    return compute_total(items, rate=0.2)"
NEW = "    return compute_total(items, rate=RATE)"
SESSION = [
    {"role": "user", "content": "Tidy the project."},
    call("Write", file_path="/w/app/billing.py", content=f"def total(items):\n{OLD}\n"),  # 1
    call("Edit", file_path="/w/app/billing.py", old_string=OLD, new_string=NEW),  # 2
    call("Bash", command="rm /w/app/legacy_report.py && echo done"),  # 3
    call("Bash", command="git mv /w/scripts/tail_wrapper.sh /w/priv/scripts/tail_wrapper.sh"),  # 4
    call(
        "Write", file_path="/w/app/billing.py", content="def total(items):\n    return sum_all(items, rounding=2)\n"
    ),  # 5
    call("Read", file_path="/w/app/billing.py"),  # 6: no change
]


def test_file_events_are_read_from_arguments_whatever_the_tool() -> None:
    events = file_events(SESSION)
    assert [(e.index, e.change) for e in events] == [
        (1, Change.WRITTEN),
        (2, Change.EDITED),
        (3, Change.DELETED),
        (4, Change.RENAMED),
        (5, Change.WRITTEN),
    ]
    assert events[1].removed == (OLD.strip(),) and events[1].added == (NEW.strip(),)
    assert events[2].path == "/w/app/legacy_report.py"
    assert events[3].new_path == "/w/priv/scripts/tail_wrapper.sh"
    assert events[4].removed == (OLD.strip(),)  # the rewrite dropped the first write's line


def test_multi_edit_and_lines_too_weak_to_claim_anything() -> None:
    old = "x = 1\nlong_enough_old_line = value_a\n    TranscriptRenderer,\nconfig :opentelemetry,"
    new = "long_enough_new_line = value_b\nconfig :opentelemetry, traces_exporter: :none"
    (event,) = file_events([call("MultiEdit", file_path="m.py", edits=[{"old_string": old, "new_string": new}])])
    # "x = 1" is too short, a lone name says nothing, and the config line lives on inside its new version
    assert event.removed == ("long_enough_old_line = value_a",)
    assert event.added == ("long_enough_new_line = value_b", "config :opentelemetry, traces_exporter: :none")


def test_a_line_names_a_path_by_a_suffix_of_two_components_or_more() -> None:
    assert names("see app/legacy_report.py", "/w/app/legacy_report.py")
    assert names("see /w/app/legacy_report.py", "/w/app/legacy_report.py")
    assert not names("see legacy_report.py", "/w/app/legacy_report.py")  # a bare name is too weak
    assert not names("see priv/scripts/tail_wrapper.sh", "/w/scripts/tail_wrapper.sh")


def claims(summary: str, upto: int = 7, folded: tuple[int, ...] = (1, 2, 3, 4, 5)) -> list[tuple[Change, str]]:
    return [(c.event.change, c.line) for c in stale_claims(file_events(SESSION), upto, summary, folded)]


def test_a_deleted_path_stated_as_existing_is_stale_and_said_gone_is_not() -> None:
    assert claims("- app/legacy_report.py builds the monthly report") == [
        (Change.DELETED, "- app/legacy_report.py builds the monthly report")
    ]
    assert claims("- app/legacy_report.py was deleted") == []


def test_a_renamed_path_by_its_old_name_is_stale_by_its_new_name_is_not() -> None:
    assert claims("- w/scripts/tail_wrapper.sh wraps tail") == [
        (Change.RENAMED, "- w/scripts/tail_wrapper.sh wraps tail")
    ]
    assert claims("- priv/scripts/tail_wrapper.sh wraps tail") == []
    assert claims("- w/scripts/tail_wrapper.sh moved to priv/scripts/") == []


def test_pre_edit_content_stated_as_current_is_stale() -> None:
    line = f"- billing.py: `{OLD.strip()}`"
    assert set(claims(line)) == {(Change.EDITED, line), (Change.WRITTEN, line)}
    assert claims(f"- billing.py: `{OLD.strip()}` was changed to use RATE") == []  # says it changed
    assert claims(f"- now `{NEW.strip()}`") == []
    assert claims(f"- added `{OLD.strip()}` to billing.py") == []  # a history of the change, not a state


def test_an_event_still_in_the_prompt_verbatim_is_not_stale() -> None:
    assert claims("- app/legacy_report.py builds the monthly report", folded=(1, 2)) == []


def test_events_after_the_request_do_not_count() -> None:
    assert claims("- app/legacy_report.py builds the monthly report", upto=3) == []


def test_a_path_written_again_after_its_deletion_exists_again() -> None:
    session = [
        call("Bash", command="rm gen/out_table.csv"),
        call("Write", file_path="gen/out_table.csv", content="a,b\n"),
    ]
    assert stale_claims(file_events(session), 2, "gen/out_table.csv holds the table", [0, 1]) == []
    assert len(stale_claims(file_events(session), 1, "gen/out_table.csv holds the table", [0])) == 1


def test_a_removed_line_added_back_later_is_current_again() -> None:
    line = "restore_this_line = compute_value(1)"
    events = [
        FileEvent(0, Change.EDITED, "a/b.py", removed=(line,), added=()),
        FileEvent(1, Change.EDITED, "a/b.py", removed=(), added=(line,)),
    ]
    assert stale_claims(events, 2, line, [0, 1]) == []
    assert len(stale_claims(events, 1, line, [0])) == 1
