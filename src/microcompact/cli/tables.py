"""What the commands print: the replay summary with its occupancy sparklines, and the --compare table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..replay import ReplayStats
from ..session import Session

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 48, top: float = 100.0) -> str:
    """Block characters for ``values`` (bucketed to ``width``, each bucket's max), scaled 0..top."""
    if not values:
        return ""
    n = len(values)
    buckets = [
        max(values[i * n // width : max(i * n // width + 1, (i + 1) * n // width)]) for i in range(min(width, n))
    ]
    top = max(top, max(buckets))
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in buckets)


# --------------------------------------------------------------------------- replay


def print_replay(console: Console, path: Path, s: dict[str, Any], stats: ReplayStats, session: Session) -> None:
    """The human summary of one replay (``s`` is its --json summary), then occupancy per model request."""
    console.print(replay_table(path, s))
    threshold = s["threshold_tokens"]
    if threshold and stats.samples:
        _print_sparklines(console, threshold, stats, session)


def replay_table(path: Path, s: dict[str, Any]) -> Table:
    """One row per figure of the summary: limits, what ran, what it saved, how full the window got."""
    occ = s["occupancy"]
    table = Table(title=f"replay of {escape(path.name)}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    limit = s["context_limit"]
    table.add_row("context limit / threshold", f"{limit:,} / {s['threshold_tokens']:,} tokens" if limit else "unknown")
    table.add_row("summarizer / tokenizer", f"{s['summarizer']} / {s['tokenizer']}")
    table.add_row("messages in -> out", f"{s['messages_in']} -> {s['messages_out']}")
    table.add_row("turns / model requests", f"{s['turns']} / {s['model_requests']}")
    table.add_row(
        "micro passes",
        f"{s['passes']}  "
        + ", ".join(f"{k}={v}" for k, v in s["outcomes"].items())
        + (f"  (saved {s['tokens_saved_total']:,} tokens)" if s["passes"] else ""),
    )
    table.add_row(
        "batch",
        f"{s['batch_compactions']} compactions (freed {s['tokens_freed_by_batch']:,} tokens), "
        f"{s['batch_prunes']} prunes (freed {s['tokens_freed_by_prunes']:,} tokens)",
    )
    table.add_row(
        "tokens: uncompacted -> final",
        f"{s['uncompacted_tokens']:,} -> {s['final_tokens']:,} (saved {s['tokens_saved']:,} in all)",
    )
    table.add_row("peak prompt tokens", f"{s['peak_tokens']:,}")
    if occ["max"] is not None:
        table.add_row(
            "occupancy % of threshold",
            f"min {occ['min']}  median {occ['median']}  max {occ['max']}  final {occ['final']}",
        )
    table.add_row(
        "largest single summarization",
        f"{max(s['largest_pass_tokens'], s['largest_batch_input_tokens'] or 0):,} tokens read",
    )
    table.add_row("summarizer time", f"{s['summarizer_ms_total'] / 1000:.2f} s")
    return table


def _print_sparklines(console: Console, threshold: int, stats: ReplayStats, session: Session) -> None:
    """Occupancy per model request without compaction and with it, on one scale."""
    raw = [100.0 * v / threshold for v in stats.raw_samples]
    got = [100.0 * v / threshold for v in stats.samples]
    top = max(100.0, max(raw))
    console.print(f"occupancy per model request (full height = {top:.0f}% of the threshold):")
    console.print(f"  without compaction  {sparkline(raw, top=top)}  peak {max(raw):.0f}%", soft_wrap=True)
    label = (
        "with micro" if session.micro.active else "batch only" if session.config.compression.enabled else "engine off"
    )
    console.print(f"  {label:<18}  {sparkline(got, top=top)}  peak {max(got):.0f}%", soft_wrap=True)


# --------------------------------------------------------------------------- --compare

# Short policy names for the table (the full names are in --json and in the column legend's order).
SHORT_POLICY = {
    "batch-only": "batch-only",
    "micro-every-turn": "every-turn",
    "micro-every-N": "every-N",
    "micro-reclaim-gate": "reclaim",
    "micro-cache-aware": "cache-aware",
}


def tokens_short(n: int) -> str:
    """A token count in at most 6 characters: 9,999 / 123K / 1.23M."""
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.0f}K"
    return f"{n / 1_000_000:.2f}M"


def money_short(amount: float) -> str:
    """Dollars in about 7 characters, with 4 decimals below $10."""
    for limit, digits in ((10, 4), (100, 3), (1000, 2)):
        if amount < limit:
            return f"{amount:.{digits}f}"
    return f"{amount:,.0f}"


def compare_table(path: Path, result: dict[str, Any]) -> Table:
    """The --compare table, narrow enough for 100 columns (short names; --json has the full ones)."""
    p = result["pricing"]
    table = Table(
        title=f"{escape(path.name)}: policies ({p['name']} pricing, cache TTL {p['ttl_seconds']:g} s)",
        title_justify="left",
    )
    for col in (
        "policy",
        "peak\n%",
        "final\n%",
        "batch",
        "stall",
        "calls",
        "cache\nread",
        "cache\nwrite",
        "un-\ncached",
        "cost $",
        "recall\n%",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for row in result["policies"]:
        final = row["final_occupancy"]
        table.add_row(
            SHORT_POLICY.get(row["policy"], row["policy"]),
            f"{row['peak_occupancy']}",
            "-" if final is None else f"{final}",
            f"{row['batch_compactions']}+{row['batch_prunes']}p",
            tokens_short(row["largest_summarization_tokens"]),
            str(row["summarizer_calls"]),
            tokens_short(row["cached_read_tokens"]),
            tokens_short(row["cache_write_tokens"]),
            tokens_short(row["uncached_tokens"]),
            money_short(row["cost"]["total"]),
            "-" if row.get("recall") is None else f"{row['recall']:.1f}",
        )
    return table


def print_compare(console: Console, path: Path, result: dict[str, Any], plot: Path | None) -> None:
    """The --compare table, what its columns mean, the timing and policy settings, and where the plot went."""
    console.print(compare_table(path, result))
    console.print(
        "columns: peak/final % = occupancy, % of the batch threshold; batch = compactions + prunes (p); "
        "stall = the largest single summarization (tokens read); calls = summarizer calls; cache read/write, "
        "uncached = prompt tokens; recall = of the identifiers each reply used that a tool result first "
        "showed, the share its prompt still held; policies: every-turn, every-N, reclaim, cache-aware are "
        "micro-every-turn, micro-every-N, micro-reclaim-gate, micro-cache-aware. --json has every figure under "
        "its full name."
    )
    console.print(
        f"timing: {result['timing']}; micro-every-N uses N={result['every_n']}, micro-reclaim-gate "
        f"{result['reclaim_tokens']:,} tokens; cost includes summarizer calls at the main model's prices "
        "unless the pricing file sets summarizer_input/summarizer_output.",
        soft_wrap=True,
    )
    if plot:
        console.print(f"plot written to {plot}")
