"""The report's typed records: what a telemetry line becomes, and outcomes named by ``Outcome``.

The report reads logs written by any version of the engine, so a line may hold an outcome this version
does not know, a field of the wrong type, or no session id; each is counted under its own name or read as
unknown, never a crash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.events import Outcome
from microcompact.report import build_report, read_telemetry, report_of
from microcompact.report.reading import TelemetryRecord, outcome_of
from microcompact.telemetry import format_line


def _log(path: Path, *records: tuple[str, dict[str, object]]) -> Path:
    path.write_text(
        "".join(
            f"2026-12-01 10:00:{i:02d},000 INFO microcompact.telemetry: {format_line(kind, rec)}\n"
            for i, (kind, rec) in enumerate(records)
        ),
        encoding="utf-8",
    )
    return path


def test_known_outcomes_are_outcome_members_and_unknown_ones_keep_their_text() -> None:
    assert outcome_of("absorbed") is Outcome.ABSORBED
    assert outcome_of("pruned") is Outcome.PRUNED
    unknown = outcome_of("folded_by_price")
    assert unknown == "folded_by_price" and not isinstance(unknown, Outcome)
    assert outcome_of(None) == "None"  # a line without an outcome is counted under "None", as before


def test_a_record_reads_wrong_types_as_unknown() -> None:
    rec = TelemetryRecord.parse(
        "micro",
        {"outcome": "absorbed", "tokens_delta": "12", "occupancy_pct": True, "duration_ms": float("nan"), "mode": 3},
    )
    assert rec.session_id == "(none)" and rec.outcome is Outcome.ABSORBED
    assert rec.tokens_delta is None and rec.occupancy_pct is None and rec.duration_ms is None
    assert rec.mode == "3" and rec.rejected is None and rec.partial is False


def test_an_unhashable_outcome_is_counted_not_a_crash(tmp_path: Path) -> None:
    log = _log(
        tmp_path / "a.log",
        ("micro", {"event": "micro_compaction", "session_id": "s", "outcome": ["absorbed"], "tokens_delta": -5}),
        ("micro", {"event": "micro_compaction", "session_id": "s", "outcome": "absorbed", "tokens_delta": -7}),
    )
    report = build_report([log])
    assert report["activity"]["outcomes"] == {
        "['absorbed']": {"count": 1, "pct": 50.0},
        "absorbed": {"count": 1, "pct": 50.0},
    }
    assert report["tokens"]["net_saved"] == 7  # only the committed (known) outcome counts


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["micro", "batch"]),
            st.sampled_from([*map(str, Outcome), "someday_outcome"]),
            st.sampled_from(["a", "b"]),
            st.integers(-500, 500),
        ),
        max_size=12,
    )
)
def test_the_typed_report_is_the_json_report(
    tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[str, str, str, int]]
) -> None:
    """``--json`` is the typed report's dict, key for key, and every outcome count adds up to the passes."""
    folder = tmp_path_factory.mktemp("r")
    log = _log(
        folder / "a.log",
        *[
            (kind, {"event": f"{kind}_compaction", "session_id": sid, "outcome": outcome, "tokens_delta": delta})
            for kind, outcome, sid, delta in lines
        ],
    )
    typed = report_of(read_telemetry([log]))
    as_json = json.loads(json.dumps(build_report([log])))
    assert as_json == json.loads(json.dumps(typed.as_dict()))
    micro = [line for line in lines if line[0] == "micro"]
    assert typed.activity.passes == len(micro) == sum(v.count for v in typed.activity.outcomes.values())
    assert typed.headroom.batch.pruned == sum(1 for line in lines if line[0] == "batch" and line[1] == "pruned")
    keys = ["version", "files", "lines", "headroom", "activity", "tokens", "per_session", "definitions"]
    assert list(as_json) == keys
