"""The ``microcompact`` command line: replay transcripts and look at what compaction did."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .compare import POLICIES, compare, plot_compare
from .config import Config, ConfigError, load_config
from .cost import load_pricing
from .importers import FORMATS, run_import
from .messages import TranscriptError, content_text
from .replay import default_session_id, read_transcript, replay, resume_start, summary_json
from .session import Session
from .store import StoreError, default_store_path, open_store
from .telemetry import default_log_path, setup_file_logging

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Keep long agent transcripts inside the context window without losing what the user said.",
)
# Tables are wide; when stdout is not a terminal (CI logs, files) do not squeeze them into 80 columns.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


@app.callback()
def _root() -> None:
    """microcompact: rolling micro-compaction for agent transcripts."""


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


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _open_log(log_file: Path | None) -> logging.Handler:
    path = log_file or default_log_path()
    try:
        return setup_file_logging(path)
    except OSError as exc:
        _fail(f"cannot open log file {path}: {exc.strerror or exc}")
        raise  # unreachable: _fail exits


def _configure(
    config_path: Path | None,
    context_limit: int | None,
    summarizer: str | None,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    every: int | None,
    micro: bool | None,
) -> Config:
    """The config for a replay: explicit flags > the config file > defaults (replay's default is micro on)."""
    config = load_config(config_path)
    if micro is None:
        # The library's default is off; replay's is on, unless the config file says micro_compact itself.
        micro = config.compression.micro_compact if "micro_compact" in config.compression.model_fields_set else True
    compression = {"micro_compact": micro, "micro_compact_every_n_turns": every}
    aux = {
        "model": model,
        "base_url": base_url,
        "api_key_env": api_key_env,
        "provider": summarizer if summarizer else None,
    }
    return config.with_overrides(
        source="command-line options (--context-limit, --every, --summarizer, --model, --base-url, --api-key-env)",
        compression=compression,
        **{"auxiliary.compression": aux},
        model={"context_length": context_limit},
    )


@app.command("replay")
def replay_cmd(
    transcript: Annotated[Path, typer.Argument(help="JSONL (one message per line) or a JSON array file.")],
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file.")] = None,
    context_limit: Annotated[int | None, typer.Option("--context-limit", help="Model context window, tokens.")] = None,
    summarizer: Annotated[str | None, typer.Option("--summarizer", help="extractive | openai")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Summarizer model name (openai).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Env var holding the API key.")] = None,
    every: Annotated[
        int | None,
        typer.Option("--every", help="Turn-end passes every N turns (long-turn pieces before requests are not gated)."),
    ] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the final transcript (JSONL).")] = None,
    log_file: Annotated[
        Path | None, typer.Option("--log", help="Log file (default $MICROCOMPACT_HOME/logs/agent.log).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable summary.")] = False,
    micro_flag: Annotated[
        bool | None,
        typer.Option(
            "--micro/--no-micro",
            help="Replay with / without micro-compaction "
            "(default: compression.micro_compact of --config when the file "
            "sets it, else on). Everywhere an explicit flag beats the "
            "config file, which beats the "
            "default.",
            show_default=False,
        ),
    ] = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Repair known recording defects (orphan tool results, calls "
            "with no result, duplicate call ids), reporting each on "
            "stderr with its line.",
        ),
    ] = False,
    session_id: Annotated[
        str | None, typer.Option("--session", help="Session id (default: derived from the file).")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Store the session here (SQLite file or postgresql:// DSN); "
            "run again to resume after an interruption.",
        ),
    ] = None,
    compare_policies: Annotated[
        bool, typer.Option("--compare", help="Replay under every policy side by side, with costs.")
    ] = False,
    pricing: Annotated[
        str | None,
        typer.Option(
            "--pricing", help="With --compare: cost model, anthropic | openai | FILE.yaml.  [default: anthropic]"
        ),
    ] = None,
    every_n: Annotated[
        int | None, typer.Option("--every-n", help="With --compare: N for the micro-every-N policy.  [default: 5]")
    ] = None,
    reclaim: Annotated[
        int | None,
        typer.Option("--reclaim", help="With --compare: reclaim gate tokens for micro-reclaim-gate.  [default: 4096]"),
    ] = None,
    assume_gap: Annotated[
        float | None,
        typer.Option(
            "--assume-gap",
            help="With --compare: seconds between model requests when the transcript has no timestamps.  [default: 30]",
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="With --compare: draw occupancy per request (PNG).")
    ] = None,
) -> None:
    """Replay a recorded transcript through the engine and report what happened.

    Precedence: an explicit flag beats the --config file, which beats the defaults.
    """
    if summarizer not in (None, "extractive", "openai"):
        _fail(f"--summarizer must be extractive or openai, got {summarizer!r}")
    compare_opts = _compare_options(compare_policies, pricing, every_n, reclaim, assume_gap, plot)
    if out_file is not None:
        _check_writable_target("--out", out_file)
    try:
        cfg = _configure(config, context_limit, summarizer, model, base_url, api_key_env, every, micro_flag)
        messages, repairs = read_transcript(transcript, repair=repair)
        prices = load_pricing(compare_opts.pricing) if compare_policies else None
    except (ConfigError, TranscriptError) as exc:
        _fail(str(exc))
    for line in repairs:
        err.print(escape(line), highlight=False, soft_wrap=True)
    if compare_policies:
        if cfg.auxiliary.compression.kind == "openai":
            err.print(
                f"note: --compare replays under {len(POLICIES)} policies, each with its own summarizer calls: "
                f"about {len(POLICIES)} times the model calls of one replay",
                highlight=False,
                soft_wrap=True,
            )
        _compare(transcript, messages, cfg, prices, compare_opts, as_json, log_file)
        return
    handler = _open_log(log_file)
    try:
        store, start = None, 0
        sid = session_id or default_session_id(transcript, messages)
        if db:
            store = open_store(db)
            session = Session.open(store, sid, cfg)
            start = resume_start(session, messages, transcript.name)
            if start:
                err.print(f"resuming session {escape(sid)} from message {start} of {len(messages)}", highlight=False)
        else:
            session = Session(cfg, session_id=sid)
        with Progress(
            TextColumn("replaying"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=len(messages) < 200 or not err.is_terminal,
        ) as progress:
            task = progress.add_task("replay", total=len(messages), completed=start)
            stats = replay(messages, session, on_message=lambda i: progress.update(task, completed=i + 1), start=start)
        session.close()
        if store is not None:
            store.close()
    except (ConfigError, StoreError, TranscriptError) as exc:
        if store is not None:
            store.close()  # gives the session's writer lease back at once
        _fail(str(exc))
    except KeyboardInterrupt:
        where = "; run the same command again to resume from the store" if db else ""
        err.print(f"interrupted{where}", highlight=False)
        raise typer.Exit(130) from None
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    summary = summary_json(stats, session)
    if out_file:
        try:
            write_atomically(
                out_file, (json.dumps(as_read(m, messages), ensure_ascii=False) + "\n" for m in session.transcript)
            )
        except (OSError, ValueError) as exc:
            _fail(f"cannot write {out_file}: {getattr(exc, 'strerror', None) or exc}; nothing was written")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    _print_replay(transcript, summary, stats, session)


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path`` through a temporary file in the same folder, renamed into place only
    once fully written and synced: a full disk or a crash leaves no partial output (and an older file whole)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass
class CompareOptions:
    pricing: str = "anthropic"
    every_n: int = 5
    reclaim: int = 4096
    assume_gap: float = 30.0
    plot: Path | None = None


def _compare_options(
    on: bool, pricing: str | None, every_n: int | None, reclaim: int | None, assume_gap: float | None, plot: Path | None
) -> CompareOptions:
    """The --compare options, range-checked before anything long runs; given without --compare, an error
    (a flag that silently does nothing misleads)."""
    given = {
        "--pricing": pricing,
        "--every-n": every_n,
        "--reclaim": reclaim,
        "--assume-gap": assume_gap,
        "--plot": plot,
    }
    if not on:
        for flag, value in given.items():
            if value is not None:
                _fail(f"{flag} only applies with --compare")
    opts = CompareOptions()
    if pricing is not None:
        opts.pricing = pricing
    if every_n is not None:
        if not 1 <= every_n <= 1000:
            _fail(f"--every-n must be between 1 and 1000, got {every_n}")
        opts.every_n = every_n
    if reclaim is not None:
        if not 0 <= reclaim <= 10_000_000:
            _fail(f"--reclaim must be between 0 and 10000000 tokens, got {reclaim}")
        opts.reclaim = reclaim
    if assume_gap is not None:
        if not math.isfinite(assume_gap) or not 0 <= assume_gap <= 86_400:
            _fail(f"--assume-gap must be a number of seconds between 0 and 86400, got {assume_gap}")
        opts.assume_gap = assume_gap
    if plot is not None:
        _check_writable_target("--plot", plot)
        if importlib.util.find_spec("matplotlib") is None:
            _fail("--plot needs matplotlib: pip install 'microcompact[plot]' (or pip install matplotlib)")
        opts.plot = plot
    return opts


def _check_writable_target(flag: str, path: Path) -> None:
    """Fail before a long replay when ``path`` cannot be an output file (missing folder, a folder itself)."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        _fail(f"{flag} {path}: folder {folder} does not exist")
    if path.is_dir():
        _fail(f"{flag} {path}: is a folder, give a file name")


def _compare(
    path: Path, messages: list, cfg: Config, prices, opts: CompareOptions, as_json: bool, log_file: Path | None
) -> None:
    if cfg.model.context_length is None:
        _fail("--compare needs the model's context window: --context-limit N (or model.context_length)")
    handler = _open_log(log_file)
    try:
        with err.status("replaying under 5 policies...", spinner="dots") if err.is_terminal else _nullcontext():
            result = compare(
                messages,
                cfg,
                prices,
                every_n=opts.every_n,
                reclaim_tokens=opts.reclaim,
                assumed_gap_seconds=opts.assume_gap,
            )
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    plot = opts.plot
    if plot:
        try:
            plot_compare(result, str(plot))
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'microcompact[plot]' (or pip install matplotlib)")
        except (OSError, ValueError) as exc:
            _fail(f"cannot write the plot {plot}: {getattr(exc, 'strerror', None) or exc}")
    public = {
        **result,
        "policies": [{k: v for k, v in row.items() if not k.startswith("_")} for row in result["policies"]],
    }
    if as_json:
        sys.stdout.write(json.dumps(public, indent=2) + "\n")
        return
    out.print(compare_table(path, result))
    out.print(
        "columns: peak/final % = occupancy, % of the batch threshold; batch = compactions + prunes (p); "
        "stall = the largest single summarization (tokens read); calls = summarizer calls; cache read/write, "
        "uncached = prompt tokens; policies: every-turn, every-N, reclaim, cache-aware are micro-every-turn, "
        "micro-every-N, micro-reclaim-gate, micro-cache-aware. --json has every figure under its full name."
    )
    out.print(
        f"timing: {result['timing']}; micro-every-N uses N={result['every_n']}, micro-reclaim-gate "
        f"{result['reclaim_tokens']:,} tokens; cost includes summarizer calls at the main model's prices "
        "unless the pricing file sets summarizer_input/summarizer_output.",
        soft_wrap=True,
    )
    if plot:
        out.print(f"plot written to {plot}")


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


def compare_table(path: Path, result: dict) -> Table:
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
        )
    return table


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _print_replay(path: Path, s: dict, stats, session: Session) -> None:
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
    out.print(table)
    threshold = s["threshold_tokens"]
    if threshold and stats.samples:
        raw = [100.0 * v / threshold for v in stats.raw_samples]
        got = [100.0 * v / threshold for v in stats.samples]
        top = max(100.0, max(raw))
        out.print(f"occupancy per model request (full height = {top:.0f}% of the threshold):")
        out.print(f"  without compaction  {sparkline(raw, top=top)}  peak {max(raw):.0f}%", soft_wrap=True)
        label = (
            "with micro"
            if session.micro.active
            else "batch only"
            if session.config.compression.enabled
            else "engine off"
        )
        out.print(f"  {label:<18}  {sparkline(got, top=top)}  peak {max(got):.0f}%", soft_wrap=True)


# Store bookkeeping, not transcript content: left out of exported transcripts.
_BOOKKEEPING = ("_tokens", "_pos", "_row", "_src")


def export_form(message: dict) -> dict:
    return {k: v for k, v in message.items() if k not in _BOOKKEEPING}


def as_read(message: dict, originals: list[dict]) -> dict:
    """``message`` for --out: the input message itself (its keys in the input's order, nested too) when it
    is input message ``_src`` unchanged; the store may hand it back with its keys in another order, and a
    resumed run must write what an uninterrupted one writes."""
    clean = export_form(message)
    src = message.get("_src")
    if isinstance(src, int) and 0 <= src < len(originals) and clean == originals[src]:
        return originals[src]
    return clean


sessions_app = typer.Typer(
    help="Sessions in the store: list, show, search absorbed originals, export.", no_args_is_help=True
)
app.add_typer(sessions_app, name="sessions")

DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLite file or postgresql:// DSN (default $MICROCOMPACT_HOME/sessions.db).")
]


def _store(db: str | None):
    """The store for a read-only command: it must exist already (a mistyped --db must not create one)."""
    if not str(db or "").startswith(("postgresql://", "postgres://")):
        path = _sqlite_path(db)
        if path != ":memory:" and not Path(path).is_file():
            _fail(f"no session store at {path}")
    try:
        return open_store(db)
    except StoreError as exc:
        _fail(str(exc))


def _sqlite_path(db: str | None) -> str:
    """The file a SQLite --db names (as open_store reads it), the default store when None."""
    if db is None:
        return str(default_store_path())
    if db.startswith("sqlite:///"):
        return db[len("sqlite:///") :] if db.startswith("sqlite:////") else db[len("sqlite://") :]
    return db


def _require_session(store, session_id: str) -> None:
    if not any(r["id"] == session_id for r in store.list_sessions()):
        _fail(f"no session {session_id!r} in {store.describe()}")


@sessions_app.command("list")
def sessions_list(db: DbOption = None) -> None:
    """Every stored session with its message counts."""
    with _store(db) as store:
        rows = store.list_sessions()
    table = Table(title="sessions", title_justify="left")
    for col in ("session", "created", "updated", "active", "absorbed", "superseded", "markers"):
        table.add_column(col, justify="left" if col in ("session", "created", "updated") else "right")
    for r in rows:
        c = r["counts"]
        table.add_row(
            escape(str(r["id"])),
            str(r["created_at"])[:19],
            str(r["updated_at"])[:19],
            str(c["active"]),
            str(c["absorbed"]),
            str(c["superseded"]),
            str(r["markers"]),
        )
    out.print(table if rows else "no sessions stored")


@sessions_app.command("show")
def sessions_show(
    session_id: str,
    db: DbOption = None,
    full: Annotated[bool, typer.Option("--full", help="Print whole messages, not one line each.")] = False,
) -> None:
    """The active transcript of a session (what the model is sent), one line per message."""
    with _store(db) as store:
        _require_session(store, session_id)
        messages = store.load_active(session_id)
    table = Table(title=f"session {escape(session_id)}: {len(messages)} active messages", title_justify="left")
    for col in ("pos", "row", "role", "content"):
        table.add_column(col, overflow="fold")
    for m in messages:
        kind = (m.get("_mc") or {}).get("marker")
        text = content_text(m)
        calls = ", ".join((tc.get("function") or {}).get("name", "?") for tc in m.get("tool_calls") or [])
        line = text if full else " ".join(text.split())[:120]
        if calls:
            line = f"{line} [calls: {calls}]".strip()
        table.add_row(
            str(m.get("_pos")),
            str(m.get("_row")),
            f"{m['role']}{' (' + kind + ' marker)' if kind else ''}",
            escape(line),
        )
    out.print(table)


@sessions_app.command("search")
def sessions_search(
    session_id: str,
    query: str,
    db: DbOption = None,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    active: Annotated[bool, typer.Option("--include-active", help="Search active messages too.")] = False,
) -> None:
    """Full-text search over what compaction absorbed: nothing summarized is lost for good."""
    with _store(db) as store:
        _require_session(store, session_id)
        hits = store.search(session_id, query, limit=limit, include_active=active)
    if not hits:
        out.print(f"no match for {escape(query)!s} in session {escape(session_id)}")
        raise typer.Exit(1)
    table = Table(title=f"{len(hits)} match(es)", title_justify="left")
    for col in ("row", "pos", "role", "state", "absorbed by", "snippet"):
        table.add_column(col, overflow="fold")
    for h in hits:
        table.add_row(
            str(h["row"]),
            str(h["position"]),
            h["role"],
            h["state"],
            str(h.get("absorbed_by") or ""),
            escape(h["snippet"]),
        )
    out.print(table)


@sessions_app.command("export")
def sessions_export(
    session_id: str,
    db: DbOption = None,
    include_absorbed: Annotated[
        bool, typer.Option("--include-absorbed", help="Also the originals compaction absorbed, in position order.")
    ] = False,
    expand: Annotated[
        int | None, typer.Option("--expand", help="Only the originals the marker with this row id stands for.")
    ] = None,
) -> None:
    """The session as JSONL on stdout (replayable)."""
    if expand is not None and not 0 <= expand < 2**63:
        _fail(f"--expand must be a marker's row id (0 to {2**63 - 1}), got {expand}")
    with _store(db) as store:
        _require_session(store, session_id)
        try:
            messages = (
                store.expand(session_id, expand)
                if expand is not None
                else store.export(session_id, include_absorbed=include_absorbed)
            )
        except (ValueError, StoreError) as exc:
            _fail(str(exc))
    for m in messages:
        sys.stdout.write(json.dumps(export_form(m), ensure_ascii=False) + "\n")


@app.command("report")
def report_cmd(
    logfiles: Annotated[
        list[Path] | None, typer.Argument(help="Log files (default $MICROCOMPACT_HOME/logs/agent.log).")
    ] = None,
    per_session: Annotated[bool, typer.Option("--per-session", help="Add the per-session table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw occupancy per pass for each session (PNG).")] = None,
) -> None:
    """Turn telemetry logs into answers: headroom, activity, tokens, per session."""
    from .report import run_report

    code = run_report(logfiles, per_session, as_json, plot, out, err)
    if code:
        raise typer.Exit(code)


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="A recorded session (its format detected, or named by --from).")],
    fmt: Annotated[
        str,
        typer.Option("--from", help="auto (detect from the file's start, the default) | " + " | ".join(FORMATS)),
    ] = "auto",
    out_file: Annotated[Path | None, typer.Option("--out", help="Output JSONL (default: stdout).")] = None,
    record: Annotated[
        int | None, typer.Option("--record", help="adp files: which record (0-based; default the largest).")
    ] = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="openai files: repair recording defects (orphan tool "
            "results, "
            "calls with no result, duplicate call ids), each reported "
            "with its line, instead of refusing the file.",
        ),
    ] = False,
) -> None:
    """Convert a recorded agent session into the JSONL that replay reads."""

    code = run_import(fmt, file, out_file, err, record=record, repair=repair)
    if code:
        raise typer.Exit(code)


@app.command("serve")
def serve_cmd(
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free one).")] = 8765,
    openai_upstream: Annotated[
        str, typer.Option("--openai-upstream", help="OpenAI-compatible base URL requests go to.")
    ] = "https://api.openai.com/v1",
    anthropic_upstream: Annotated[
        str, typer.Option("--anthropic-upstream", help="Anthropic base URL requests go to.")
    ] = "https://api.anthropic.com",
    db: DbOption = None,
    context_limit: Annotated[int | None, typer.Option("--context-limit", help="Model context window, tokens.")] = None,
    log_file: Annotated[
        Path | None, typer.Option("--log", help="Log file (default $MICROCOMPACT_HOME/logs/agent.log).")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="MICROCOMPACT_PROXY_KEY",
            help="Require this key from clients, in the X-Microcompact-Key header.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the compaction proxy: point OpenAI or Anthropic clients (Claude Code, Codex, aider, SDKs) at it."""
    from .server.run import ServeError, ServeOptions, serve

    options = ServeOptions(config, host, port, openai_upstream, anthropic_upstream, db, context_limit, api_key)
    handler = _open_log(log_file)
    try:
        serve(options, say=lambda line: err.print(escape(line), highlight=False, soft_wrap=True))
    except ServeError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        pass
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
