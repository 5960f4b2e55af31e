"""``microcompact report`` on hand-written logs whose figures are computed by hand below.

The logs (two rotated files, given newest first so the time ordering matters) hold three sessions:

alpha  10:01 absorbed   delta +40  exch 300  occ 50.4  dur 100  summ  80   cumulative saved -40
       10:02 summ.fail  delta   0  exch 500  occ 55.0  dur  50  summ  45                    -40
       10:03 absorbed   delta -10  exch 500  occ 59.9  dur 200  summ 180                    -30
       10:05 absorbed   delta -100 exch 400  occ 64.0  dur 300  summ 250                    +70  <- payback pass 4
       10:05:30 batch pruned  (-400, micro_passes_since_last 3)
       10:06 defrag     delta -200 exch   0  occ 68.0  dur 400  summ 390                   +270
       10:07:30 batch cooldown; 10:08 batch fallback (-6000, micro_passes_since_last 1)
beta   10:00 absorbed   delta +25  exch 200  occ 30.3  dur 120  summ 100                    -25
       10:04 absorbed   delta -10  exch 600  occ 34.9  dur 180  summ 170                    -15
       10:06:30 batch compacted (-6100, micro_passes_since_last 2)
       10:07 absorbed   delta -50  exch 700  occ 41.5  dur  90  summ  80                    +35  <- payback pass 3
gamma  10:09 absorbed   delta +30  exch 150  occ null  dur  60  summ  50                    -30
       10:10 no_reclaim delta   0  exch 120  occ null  dur  10  summ   0                    -30  (never paid back)

Hand-computed answers:
  occupancy (8 known, 2 null): sorted 30.3 34.9 41.5 50.4 | 55.0 59.9 64.0 68.0 -> min 30.3, median 52.7, max 68.0
  outcomes of 10 passes: absorbed 7 (70%), summarize_failed / defrag / no_reclaim 1 each (10%)
  durations sorted 10 50 60 90 100 | 120 180 200 300 400 -> median 110, p95 = 10th of 10 (ceil 9.5) = 400
  summarizer share 1345 / 1510 = 89.1%
  net saved = 270 + 35 - 30 = 275; mean exchange = (300+500+400+200+600+700+150) / 7 = 407.1
  marker overhead 40, 25, 30 -> median 30; payback passes 4 and 3 -> median 3.5; gamma not paid back
  batch: 4 attempts, 2 compactions (compacted, fallback), 1 pruned; passes per compaction [2, 1] -> 1.5
Noise: 6 ignored lines (2 other log lines, a truncated JSON line, a non-object JSON line, a telemetry line
from another logger, a traceback line), 2 of them malformed telemetry; blank lines are not counted.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from microcompact import report as rep
from microcompact.report import build_report, percentile_nearest_rank, run_report
from microcompact.telemetry import format_line

T, LIMIT = 10000, 12500


def tl(ts: str, kind: str, record: dict, level: str = "INFO", logger: str = "microcompact.telemetry") -> str:
    """A log line as setup_file_logging writes it."""
    return f"2024-05-01 {ts},000 {level} {logger}: {format_line(kind, record)}"


def micro(ts, sid, outcome, before, after, exch, pt, saved, dur, summ, occ, mode="turn", limit=LIMIT, **extra):
    record = {
        "event": "micro_compaction",
        "session_id": sid,
        "outcome": outcome,
        "mode": mode,
        "messages_before": 20,
        "messages_after": 20,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_delta": after - before,
        "exchange_tokens": exch,
        "rolling_summary_tokens": 100,
        "cursor": 5,
        "passes_total": pt,
        "tokens_saved_total": saved,
        "duration_ms": dur,
        "summarizer_ms": summ,
        "engine_ms": dur - summ,
        "threshold_tokens": T if limit else None,
        "context_limit": limit,
        "occupancy_pct": occ,
        "aux_model": "extractive",
        **extra,
    }
    return tl(ts, "micro", record)


def batch(ts, sid, outcome, before, after, total, **extra):
    record = {
        "event": "batch_compaction",
        "session_id": sid,
        "outcome": outcome,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_delta": after - before,
        "messages_before": 40,
        "messages_after": 12,
        "duration_ms": 500,
        "summarizer": "extractive",
        "reason": "threshold",
        "threshold_tokens": T,
        "context_limit": LIMIT,
        "occupancy_pct": round(100 * after / T, 1),
        "compactions_total": total,
        **extra,
    }
    return tl(ts, "batch", record)


OLDER = [
    micro("10:00:00", "beta", "absorbed", 3000, 3025, 200, 1, -25, 120, 100, 30.3),
    "2024-05-01 10:00:05,000 INFO microcompact.micro: Micro-compaction: 12 -> 9 messages",
    micro("10:01:00", "alpha", "absorbed", 5000, 5040, 300, 1, -40, 100, 80, 50.4),
    micro("10:02:00", "alpha", "summarize_failed", 5500, 5500, 500, 1, -40, 50, 45, 55.0, error="RuntimeError"),
    '2024-05-01 10:02:30,000 INFO microcompact.telemetry: micro compaction telemetry: {"event": "micro_compac',
    "",
]
NEWER = [
    micro("10:03:00", "alpha", "absorbed", 6000, 5990, 500, 2, -30, 200, 180, 59.9),
    "2024-05-01 10:03:30,000 WARNING microcompact.micro: Micro-compaction: summarizer failed on exchange",
    micro("10:04:00", "beta", "absorbed", 3500, 3490, 600, 2, -15, 180, 170, 34.9),
    micro("10:05:00", "alpha", "absorbed", 6500, 6400, 400, 3, 70, 300, 250, 64.0),
    batch("10:05:30", "alpha", "pruned", 6400, 6000, 0, micro_passes_since_last=3),
    micro("10:06:00", "alpha", "defrag", 7000, 6800, 0, 4, 270, 400, 390, 68.0, mode="defrag", defrag_method="model"),
    batch("10:06:30", "beta", "compacted", 10100, 4000, 1, micro_passes_since_last=2),
    micro("10:07:00", "beta", "absorbed", 4200, 4150, 700, 3, 35, 90, 80, 41.5),
    batch("10:07:30", "alpha", "cooldown", 7100, 7100, 0, micro_passes_since_last=1),
    batch("10:08:00", "alpha", "fallback", 9000, 3000, 1, micro_passes_since_last=1),
    tl(
        "10:08:30",
        "micro",
        {"event": "micro_compaction", "session_id": "gamma", "outcome": "absorbed"},
        level="DEBUG",
        logger="somelib.echo",
    ),
    micro("10:09:00", "gamma", "absorbed", 2000, 2030, 150, 1, -30, 60, 50, None, limit=None),
    micro("10:10:00", "gamma", "no_reclaim", 2500, 2500, 120, 1, -30, 10, 0, None, mode="request", limit=None),
    "2024-05-01 10:10:30,000 INFO microcompact.telemetry: micro compaction telemetry: [1, 2]",
    "Traceback (most recent call last):",
    "",
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def logs(tmp_path: Path) -> list[Path]:
    """Newest first, as a shell glob of agent.log* would not give them in time order either."""
    return [write(tmp_path / "agent.log", NEWER), write(tmp_path / "agent.log.1", OLDER)]


def consoles(width: int = 220) -> tuple[Console, Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return (
        Console(file=out, width=width, color_system=None),
        Console(file=err, width=width, color_system=None),
        out,
        err,
    )


def run(logfiles, per_session=False, as_json=False, plot=None, width=220) -> tuple[int, str, str]:
    console, err_console, out, err = consoles(width)
    code = run_report(logfiles, per_session, as_json, plot, console, err_console)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- the figures


def test_lines_counted_and_noise_ignored(logs):
    r = build_report(logs)
    assert r["files"] == {"read": [str(p) for p in logs], "skipped": []}
    assert r["lines"] == {"total": 20, "micro": 10, "batch": 4, "ignored": 6, "malformed": 2, "other_logger": 1}


def test_headroom(logs):
    h = build_report(logs)["headroom"]
    assert h["occupancy_pct"] == {"min": 30.3, "median": 52.7, "max": 68.0, "samples": 8, "unknown": 2}
    assert h["threshold_tokens"] == [T] and h["context_limit"] == [LIMIT]
    b = h["batch"]
    assert (b["attempts"], b["compactions"], b["pruned"], b["still_over_threshold"]) == (4, 2, 1, 0)
    assert b["outcomes"] == {"compacted": 1, "cooldown": 1, "fallback": 1, "pruned": 1}
    assert b["tokens_freed"] == 400 + 6100 + 6000
    assert b["micro_passes_per_compaction"] == {
        "mean": 1.5,
        "median": 1.5,
        "values": [2, 1],
        "source": "micro_passes_since_last",
    }


def test_activity(logs):
    a = build_report(logs)["activity"]
    assert (a["sessions"], a["sessions_with_micro"], a["passes"], a["committed_passes"]) == (3, 3, 10, 8)
    assert a["outcomes"] == {
        "absorbed": {"count": 7, "pct": 70.0},
        "defrag": {"count": 1, "pct": 10.0},
        "no_reclaim": {"count": 1, "pct": 10.0},
        "summarize_failed": {"count": 1, "pct": 10.0},
    }
    assert list(a["outcomes"]) == ["absorbed", "defrag", "no_reclaim", "summarize_failed"]
    assert a["modes"] == {"turn": 8, "defrag": 1, "request": 1}
    assert a["duration_ms"] == {"median": 110, "p95": 400, "max": 400}
    assert a["summarizer_share_pct"] == 89.1


def test_tokens(logs):
    t = build_report(logs)["tokens"]
    assert t["net_saved"] == 275
    assert t["counter_saved"] == 275
    assert t["exchanges_absorbed"] == 7 and t["partial_absorbs"] == 0
    assert t["mean_exchange_tokens"] == 407.1
    assert t["marker_overhead"] == {"sessions": 3, "median": 30, "max": 40, "total": 95}
    assert t["payback"] == {
        "median_pass": 3.5,
        "paid_back": 2,
        "not_paid_back": 1,
        "no_overhead": 0,
        "start_missing": 0,
        "no_absorb": 0,
    }


def test_totals_agree_with_the_per_session_rows(logs):
    # Each section is computed on its own; a reader adds the per-session rows up and expects the totals.
    r = build_report(logs)
    rows = r["per_session"]
    assert r["activity"]["passes"] == sum(s["passes"] for s in rows)
    assert r["activity"]["committed_passes"] == sum(s["committed_passes"] for s in rows)
    assert r["activity"]["sessions"] == len(rows)
    assert r["tokens"]["net_saved"] == sum(s["tokens_saved"] for s in rows)
    assert r["tokens"]["exchanges_absorbed"] == sum(s["absorbed"] for s in rows)
    batch = r["headroom"]["batch"]
    assert batch["attempts"] == sum(s["batch_attempts"] for s in rows)
    assert batch["compactions"] == sum(s["batch_compactions"] for s in rows)
    assert batch["pruned"] == sum(s["batch_pruned"] for s in rows)
    occ = [v for s in rows for v in s["occupancy_series"] if v is not None]
    assert r["headroom"]["occupancy_pct"]["max"] == max(occ) and r["headroom"]["occupancy_pct"]["samples"] == len(occ)


def test_per_session_sorted_by_passes(logs):
    rows = build_report(logs)["per_session"]
    assert [s["session_id"] for s in rows] == ["alpha", "beta", "gamma"]
    alpha, beta, gamma = rows
    assert {
        k: alpha[k]
        for k in (
            "passes",
            "absorbed",
            "failures",
            "tokens_saved",
            "occupancy_max",
            "batch_compactions",
            "batch_pruned",
            "batch_attempts",
            "marker_overhead",
            "payback_pass",
            "payback_status",
        )
    } == {
        "passes": 5,
        "absorbed": 3,
        "failures": 1,
        "tokens_saved": 270,
        "occupancy_max": 68.0,
        "batch_compactions": 1,
        "batch_pruned": 1,
        "batch_attempts": 3,
        "marker_overhead": 40,
        "payback_pass": 4,
        "payback_status": "paid_back",
    }
    assert alpha["occupancy_series"] == [50.4, 55.0, 59.9, 64.0, 68.0]
    assert (
        beta["passes"],
        beta["tokens_saved"],
        beta["occupancy_max"],
        beta["batch_compactions"],
        beta["marker_overhead"],
        beta["payback_pass"],
    ) == (3, 35, 41.5, 1, 25, 3)
    assert (
        gamma["passes"],
        gamma["tokens_saved"],
        gamma["occupancy_max"],
        gamma["marker_overhead"],
        gamma["payback_pass"],
        gamma["payback_status"],
    ) == (2, -30, None, 30, None, "not_paid_back")
    assert gamma["occupancy_series"] == [None, None]


def test_time_order_across_files_does_not_depend_on_argument_order(logs):
    assert build_report(logs)["per_session"] == build_report(list(reversed(logs)))["per_session"]


def test_gzipped_rotated_log(tmp_path, logs):
    gz = tmp_path / "agent.log.1.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(logs[1].read_text(encoding="utf-8"))
    assert build_report([logs[0], gz])["tokens"] == build_report(logs)["tokens"]


@pytest.mark.parametrize(
    "values, expected",
    [
        (list(range(1, 21)), 19),  # ceil(0.95 * 20) = 19th
        (list(range(1, 11)), 10),  # ceil(9.5) = 10th
        (list(range(100, 0, -1)), 95),  # unsorted input; ceil(95.0) = 95th
        ([7, 3], 7),  # ceil(1.9) = 2nd
        ([5], 5),
        ([], None),
    ],
)
def test_p95_is_nearest_rank(values, expected):
    assert percentile_nearest_rank(values, 95) == expected


def test_no_batch_compaction_and_passes_per_batch_fallback(tmp_path):
    only_micro = write(tmp_path / "a.log", [micro("10:00:00", "s", "absorbed", 100, 90, 50, 1, 10, 5, 4, 1.0)])
    r = build_report([only_micro])
    assert r["headroom"]["batch"]["compactions"] == 0
    assert r["tokens"]["payback"]["no_overhead"] == 1 and r["per_session"][0]["marker_overhead"] == 0
    code, out, _ = run([only_micro])
    assert code == 0 and rep.NO_BATCH_LINE in out
    # A batch line without micro_passes_since_last: committed micro passes / batch compactions.
    old_batch = batch("10:01:00", "s", "compacted", 900, 300, 1)
    assert "micro_passes_since_last" not in old_batch
    both = write(
        tmp_path / "b.log",
        [
            micro("10:00:00", "s", "absorbed", 100, 90, 50, 1, 10, 5, 4, 1.0),
            micro("10:00:30", "s", "absorbed", 100, 80, 50, 2, 30, 5, 4, 1.0),
            old_batch,
        ],
    )
    pb = build_report([both])["headroom"]["batch"]["micro_passes_per_compaction"]
    assert pb == {"mean": 2.0, "median": None, "values": [], "source": "committed_passes/batch_compactions"}


def test_session_start_not_in_logs(tmp_path):
    f = write(tmp_path / "a.log", [micro("10:00:00", "late", "absorbed", 5000, 5030, 300, 7, 900, 5, 4, 40.0)])
    s = build_report([f])["per_session"][0]
    assert (s["marker_overhead"], s["payback_pass"], s["payback_status"]) == (None, None, "start_missing")
    assert s["counter_saved"] == 900 and s["tokens_saved"] == -30


# --------------------------------------------------------------------------- the command


def test_human_output(logs):
    code, out, err = run(logs, per_session=True)
    assert code == 0 and err == ""
    assert "10 micro and 4 batch telemetry lines, 6 ignored lines" in out
    assert "min 30.3  median 52.7  max 68.0  (8 passes; 2 unknown)" in out
    assert "2 (+1 pruned)" in out and "median 1.5, mean 1.5" in out
    assert "absorbed 7 (70.0%), defrag 1 (10.0%), no_reclaim 1 (10.0%), summarize_failed 1 (10.0%)" in out
    assert "median 110  p95 400  max 400" in out
    assert "89.1% of pass time" in out
    assert "275 (sum of -tokens_delta over committed passes" in out
    assert "7, mean size 407.1 tokens" in out
    assert "median 30 tokens, max 40 (3 session(s))" in out
    assert "median 3.5 (2 of 3 paid back, 1 not yet)" in out
    table = out[out.index("Per session") :]
    assert table.index("alpha") < table.index("beta") < table.index("gamma")
    rows = {
        cells[0]: cells[1:]
        for cells in (line.replace("│", " ").split() for line in table.splitlines())
        if cells and cells[0] in ("alpha", "beta", "gamma")
    }
    # passes, absorbed, failures, tokens saved, occupancy max, batch compactions, payback pass, kept in use
    assert rows["alpha"] == ["5", "3", "1", "270", "68.0%", "1", "4", "0"]
    assert rows["beta"] == ["3", "3", "0", "35", "41.5%", "1", "3", "0"]
    assert rows["gamma"] == ["2", "1", "0", "-30", "—", "0", "not", "yet", "0"]


def test_per_session_table_only_when_asked(logs):
    _, out, _ = run(logs, per_session=False)
    assert "Per session" not in out


def test_json_output_parses(logs):
    code, out, err = run(logs, as_json=True, width=30)  # a narrow terminal must not wrap the JSON
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data == json.loads(json.dumps(build_report(logs)))
    assert set(data) == {"version", "files", "lines", "headroom", "activity", "tokens", "per_session", "definitions"}
    assert data["version"] == 1
    assert data["tokens"]["net_saved"] == 275
    assert [s["session_id"] for s in data["per_session"]] == ["alpha", "beta", "gamma"]


def test_missing_and_unreadable_files_warned_and_skipped(tmp_path, logs):
    missing, folder = tmp_path / "nope.log", tmp_path / "adir"
    folder.mkdir()
    code, _out, err = run([missing, *logs, folder])
    assert code == 0
    assert f"cannot read {missing}" in err and f"cannot read {folder}" in err and err.count("skipped") == 2
    assert "No such file" in err
    r = build_report([missing, *logs, folder])
    assert [s["path"] for s in r["files"]["skipped"]] == [str(missing), str(folder)]
    assert r["files"]["read"] == [str(p) for p in logs]
    assert r["tokens"]["net_saved"] == 275


def test_exit_1_without_micro_telemetry(tmp_path):
    noise = write(
        tmp_path / "agent.log",
        [
            "2024-05-01 10:00:00,000 INFO microcompact.batch: Batch compaction: 40 -> 12 messages",
            batch("10:00:01", "s", "compacted", 9000, 3000, 1, micro_passes_since_last=None),
        ],
    )
    code, out, err = run([noise])
    assert code == 1 and out == ""
    assert "no micro-compaction telemetry found in" in err and str(noise) in err
    assert "1 batch compaction line(s)" in err
    assert "compression.micro_compact: true" in err


def test_exit_1_when_nothing_readable(tmp_path):
    code, _, err = run([tmp_path / "gone.log"])
    assert code == 1
    assert "cannot read" in err and "no log file could be read" in err and "compression.micro_compact: true" in err


def test_lines_without_timestamps_keep_file_order(tmp_path):
    """Telemetry from a handler with another format: no asctime, so the order given is the time order."""
    tag = "microcompact.telemetry: "
    raw = [line.split(tag, 1)[1] for line in OLDER + NEWER if tag in line]
    r = build_report([write(tmp_path / "raw.log", raw)])
    assert r["lines"]["micro"] == 10 and r["lines"]["ignored"] == 2  # the truncated and the non-object lines
    assert [(s["session_id"], s["payback_pass"]) for s in r["per_session"]] == [
        ("alpha", 4),
        ("beta", 3),
        ("gamma", None),
    ]


def test_default_log_is_under_microcompact_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path))
    (tmp_path / "logs").mkdir()
    write(tmp_path / "logs" / "agent.log", OLDER + NEWER)
    code, out, _ = run(None, as_json=True)
    assert code == 0
    data = json.loads(out)
    assert data["files"]["read"] == [str(tmp_path / "logs" / "agent.log")]
    assert data["tokens"]["net_saved"] == 275


def test_session_ids_are_not_markup(tmp_path):
    f = write(tmp_path / "a.log", [micro("10:00:00", "[bold]x[/bold]", "absorbed", 100, 90, 50, 1, 10, 5, 4, 1.0)])
    code, out, _ = run([f], per_session=True)
    assert code == 0 and "[bold]x[/bold]" in out


# --------------------------------------------------------------------------- --plot


def test_plot_writes_png(tmp_path, logs):
    pytest.importorskip("matplotlib")
    png = tmp_path / "occupancy.png"
    code, _out, err = run(logs, plot=png)
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"occupancy plot written to {png}" in err


def test_plot_with_json_keeps_stdout_parseable(tmp_path, logs):
    pytest.importorskip("matplotlib")
    png = tmp_path / "o.png"
    code, out, _ = run(logs, as_json=True, plot=png)
    assert code == 0 and json.loads(out)["version"] == 1 and png.stat().st_size > 0


def _matplotlib_missing() -> bool:
    return importlib.util.find_spec("matplotlib") is None


@pytest.mark.skipif(not _matplotlib_missing(), reason="matplotlib is installed")
def test_plot_without_matplotlib_exits_2(tmp_path, logs):
    png = tmp_path / "occupancy.png"
    code, out, err = run(logs, plot=png)
    assert code == 2 and out == "" and not png.exists()
    assert "pip install matplotlib" in err


def test_plot_without_matplotlib_simulated(tmp_path, logs, monkeypatch):
    """The same branch whether or not matplotlib is installed here: a None entry makes the import fail."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    png = tmp_path / "occupancy.png"
    code, out, err = run(logs, plot=png)
    assert code == 2 and out == "" and not png.exists()
    assert "pip install matplotlib" in err


def test_session_ids_are_cut_no_shorter_than_what_tells_them_apart() -> None:
    """Issue 28: the cost table cut ids to 16 characters until two printed the same."""
    from microcompact.report.cost import short_ids

    ids = ["anthropic-0123456789abcdef-1111", "anthropic-0123456789abcdef-2222", "short", "openai-aaaaaaaaaaaaaaaa"]
    shown = short_ids(ids)
    assert len(set(shown.values())) == len(ids)
    assert shown["short"] == "short" and shown["openai-aaaaaaaaaaaaaaaa"] == "openai-aaaaaaaaa"
    assert shown["anthropic-0123456789abcdef-1111"] == "anthropic-0123456789abcdef-1"
    assert all(sid.startswith(cut) for sid, cut in shown.items())
