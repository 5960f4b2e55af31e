"""``microcompact report``: what compaction did, read back from the telemetry lines in agent logs.

Every micro pass logs ``micro compaction telemetry: {json}`` and every batch attempt logs
``batch compaction telemetry: {json}`` on logger ``microcompact.telemetry`` (see :mod:`microcompact.telemetry`).
The package reads one or more log files (plain or ``.gz``) into typed records (``reading``), turns them
into typed aggregates (``aggregate``: :class:`Report`; :func:`build_report` gives its JSON-able dict), which
are rendered as Rich tables or JSON (``tables``) or drawn as occupancy per pass (``plot``, needs the
optional ``matplotlib``); ``cost`` and ``recall`` sum the proxy's cost and recall lines per session;
``command`` is the command itself (exit codes, messages).

Definitions (also in the ``definitions`` entry of the report):

* **pass**: one micro telemetry line, whatever its outcome. The pass index of a session counts its lines
  from 1 in time order. **Committed passes** are those that changed the transcript: outcomes ``absorbed``,
  ``model_rejected``, ``defrag`` and ``defrag_failed`` (a failed defrag still commits the deterministic
  shortening).
* **model rejected**: passes whose model summary failed the checks (echo, unchanged, unknown path, cut
  off, ...; the ``rejected`` field names which), so the deterministic summary absorbed the exchange.
  They are committed but never counted as ``absorbed``.
* **net tokens saved**: the sum of ``-tokens_delta`` over committed passes (the other outcomes leave the
  transcript as it was, delta 0). This only counts what the files read contain; ``counter_saved`` is the
  sum over sessions of the last ``tokens_saved_total`` seen, the engine's own running counter, which differs
  when the logs start after a session did (rotated logs) or a session was resumed in a new process.
* **failures**: outcomes ``summarize_failed``, ``exchange_skipped``, ``defrag_failed`` and ``store_failed``.
* **marker overhead**: ``tokens_delta`` of a session's first ``absorbed`` pass when positive (the marker
  scaffolding cost more than the exchange it replaced), else 0. Unknown (null) when that pass is not the
  session's first (its ``passes_total`` is over 1: the session began before the logs).
* **payback pass**: for a session with a positive overhead, the first pass index at which the cumulative
  ``-tokens_delta`` of the session's passes is >= 0 again; null while it is still negative.
* **batch compactions**: batch lines with outcome ``compacted``, ``user_floor_exceeded`` or ``fallback``;
  ``pruned`` ones are counted apart. Micro passes per batch compaction come from ``micro_passes_since_last``
  of those lines, else are committed micro passes / batch compactions.
* **percentiles**: medians are :func:`statistics.median` (mean of the two middle values for an even count);
  p95 is nearest-rank: the ``ceil(0.95 * n)``-th smallest value.
* **kept in use**: ``kept_in_use_iterations`` / ``kept_in_use_tokens`` summed over committed passes (tool
  iterations a fold left in place because the agent was still using them); ``logged``: the committed passes
  carrying them (folds by use).
* **recall** (proxy sessions): ``proxy recall telemetry`` lines, one per reply that used an identifier a
  tool result showed first: present / targets pooled; ``losing``, replies whose prompt lacked one.
* **ignored lines**: non-blank lines that are not telemetry: other log lines, telemetry whose JSON is
  broken or not an object (also counted as ``malformed``), telemetry whose event does not match its tag,
  and telemetry-looking lines logged by another logger than ``microcompact.telemetry``.

Lines are put in time order by their ``asctime`` prefix when every kept line has one (so rotated files can
be given in any order); otherwise they are taken in the order of the files and lines given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .aggregate import (
    DEFINITIONS,
    REPORT_VERSION,
    PaybackStatus,
    Report,
    SessionSummary,
    median,
    percentile_nearest_rank,
    report_of,
)
from .command import default_log, run_report
from .plot import PLOT_INSTALL_HINT, matplotlib_available, plot_report
from .reading import Telemetry, TelemetryRecord, read_telemetry
from .tables import NO_BATCH_LINE, render_report, report_json


def build_report(paths: list[Path]) -> dict[str, Any]:
    """The report of the telemetry in ``paths`` as a JSON-able dict; ``--json`` prints exactly this.

    Structure (``version`` 1; numbers are null when unknown; definitions in the module docstring)::

        version: 1
        files: {read: [path], skipped: [{path, error}]}
        lines: {total, micro, batch, ignored, malformed, other_logger}      # non-blank lines
        headroom:
          occupancy_pct: {min, median, max, samples, unknown}              # % of the batch threshold
          threshold_tokens: [int], context_limit: [int]                    # distinct values seen
          batch: {attempts, compactions, pruned, outcomes: {outcome: n}, still_over_threshold, tokens_freed,
                  micro_passes_per_compaction: {mean, median, values: [n],
                                                source: "micro_passes_since_last" |
                                                        "committed_passes/batch_compactions" | null}}
        activity: {sessions, sessions_with_micro, passes, committed_passes,
                   outcomes: {outcome: {count, pct}}, modes: {mode: n},
                   model_rejected, rejections: {check: n},
                   duration_ms: {median, p95, max}, summarizer_share_pct}
        tokens: {net_saved, counter_saved, exchanges_absorbed, partial_absorbs, mean_exchange_tokens,
                 marker_overhead: {sessions, median, max, total},          # over sessions with overhead > 0
                 payback: {median_pass, paid_back, not_paid_back, no_overhead, start_missing, no_absorb},
                 kept_in_use: {passes, iterations, tokens, logged}}        # what folds left in place in use
        per_session: [{session_id, passes, committed_passes, absorbed, model_rejected, failures, outcomes,
                       tokens_saved,
                       counter_saved, occupancy_max, occupancy_series: [pct | null per pass],
                       batch_compactions, batch_pruned, batch_attempts, marker_overhead, payback_pass,
                       payback_status: paid_back | not_paid_back | no_overhead | start_missing | no_absorb,
                       kept_in_use: {passes, iterations, tokens, logged}}]
                     # most passes first, then by session id
        definitions: {name: text}

    Outcome dicts are ordered by count (descending), then name. Unreadable files are listed in
    ``files.skipped``, never raised. The command's ``--json`` adds, for ``serve``'s sessions, ``cost`` (per
    session, each with its ``recall``) and ``recall`` (:mod:`.recall`), read from the proxy's own lines.
    """
    return report_of(read_telemetry(paths)).as_dict()


__all__ = [
    "DEFINITIONS",
    "NO_BATCH_LINE",
    "PLOT_INSTALL_HINT",
    "REPORT_VERSION",
    "PaybackStatus",
    "Report",
    "SessionSummary",
    "Telemetry",
    "TelemetryRecord",
    "build_report",
    "default_log",
    "matplotlib_available",
    "median",
    "percentile_nearest_rank",
    "plot_report",
    "read_telemetry",
    "render_report",
    "report_json",
    "report_of",
    "run_report",
]
