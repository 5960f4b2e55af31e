"""The ``microcompact`` command line: replay transcripts and look at what compaction did."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from .compare import compare, plot_compare
from .config import Config, ConfigError, home_dir, load_config
from .cost import load_pricing
from .messages import TranscriptError, content_text
from .replay import load_transcript, replay, resume_point, summary_json
from .store import StoreError, open_store
from .session import Session
from .telemetry import setup_file_logging

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Keep long agent transcripts inside the context window without losing what the user said.")
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
    buckets = [max(values[i * n // width:max(i * n // width + 1, (i + 1) * n // width)]) for i in range(min(width, n))]
    top = max(top, max(buckets))
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in buckets)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _open_log(log_file: Optional[Path]) -> logging.Handler:
    path = log_file or home_dir() / "logs" / "agent.log"
    try:
        _create_private(path)
        return setup_file_logging(path)
    except OSError as exc:
        _fail(f"cannot open log file {path}: {exc.strerror or exc}")
        raise  # unreachable: _fail exits


def _create_private(path: Path) -> None:
    """Create the log (and its folder) readable by the owner only: it names sessions, files and errors."""
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.touch(mode=0o600)


def _configure(config_path: Optional[Path], context_limit: Optional[int], summarizer: Optional[str],
               model: Optional[str], base_url: Optional[str], api_key_env: Optional[str], every: Optional[int],
               micro: bool) -> Config:
    config = load_config(config_path)
    compression = {"micro_compact": micro, "micro_compact_every_n_turns": every}
    aux = {"model": model, "base_url": base_url, "api_key_env": api_key_env,
           "provider": summarizer if summarizer else None}
    return config.with_overrides(source="command-line options (--context-limit, --every, --summarizer, --model, "
                                        "--base-url, --api-key-env)",
                                 compression=compression, **{"auxiliary.compression": aux},
                                 model={"context_length": context_limit})


@app.command("replay")
def replay_cmd(
    transcript: Annotated[Path, typer.Argument(help="JSONL (one message per line) or a JSON array file.")],
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML config file.")] = None,
    context_limit: Annotated[Optional[int], typer.Option("--context-limit", help="Model context window, tokens.")] = None,
    summarizer: Annotated[Optional[str], typer.Option("--summarizer", help="extractive | openai")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Summarizer model name (openai).")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible endpoint.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="Env var holding the API key.")] = None,
    every: Annotated[Optional[int], typer.Option("--every", help="Turn-end passes every N turns (long-turn pieces before requests are not gated).")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the final transcript (JSONL).")] = None,
    log_file: Annotated[Optional[Path], typer.Option("--log", help="Log file (default $MICROCOMPACT_HOME/logs/agent.log).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable summary.")] = False,
    no_micro: Annotated[bool, typer.Option("--no-micro", help="Replay without micro-compaction.")] = False,
    session_id: Annotated[Optional[str], typer.Option("--session", help="Session id (default: derived from the file).")] = None,
    db: Annotated[Optional[str], typer.Option("--db", help="Store the session here (SQLite file or postgresql:// DSN); "
                                                            "run again to resume after an interruption.")] = None,
    compare_policies: Annotated[bool, typer.Option("--compare", help="Replay under every policy side by side, with costs.")] = False,
    pricing: Annotated[str, typer.Option("--pricing", help="Cost model: anthropic | openai | FILE.yaml (with --compare).")] = "anthropic",
    every_n: Annotated[int, typer.Option("--every-n", help="N for the micro-every-N policy (with --compare).")] = 5,
    reclaim: Annotated[int, typer.Option("--reclaim", help="Reclaim gate tokens for micro-reclaim-gate (with --compare).")] = 4096,
    assume_gap: Annotated[float, typer.Option("--assume-gap", help="Seconds between model requests when the transcript has no timestamps.")] = 30.0,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="With --compare: draw occupancy per request (PNG).")] = None,
) -> None:
    """Replay a recorded transcript through the engine and report what happened."""
    if summarizer not in (None, "extractive", "openai"):
        _fail(f"--summarizer must be extractive or openai, got {summarizer!r}")
    try:
        cfg = _configure(config, context_limit, summarizer, model, base_url, api_key_env, every, not no_micro)
        messages = load_transcript(transcript)
        prices = load_pricing(pricing) if compare_policies else None
    except (ConfigError, TranscriptError) as exc:
        _fail(str(exc))
    if compare_policies:
        _compare(transcript, messages, cfg, prices, every_n, reclaim, assume_gap, as_json, plot, log_file)
        return
    handler = _open_log(log_file)
    try:
        store, start = None, 0
        sid = session_id or transcript.stem
        if db:
            store = open_store(db)
            session = Session.open(store, sid, cfg)
            start = resume_point(session)
            if start:
                err.print(f"resuming session {escape(sid)} from message {start} of {len(messages)}", highlight=False)
        else:
            session = Session(cfg, session_id=sid)
        with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True, disable=len(messages) < 200 or not err.is_terminal) as progress:
            task = progress.add_task("replay", total=len(messages), completed=start)
            stats = replay(messages, session, on_message=lambda i: progress.update(task, completed=i + 1),
                           start=start)
        session.close()
        if store is not None:
            store.close()
    except (ConfigError, StoreError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        where = "; run the same command again to resume from the store" if db else ""
        err.print(f"interrupted{where}", highlight=False)
        raise typer.Exit(130)
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    summary = summary_json(stats, session)
    if out_file:
        try:
            with open(out_file, "w", encoding="utf-8") as fh:
                for m in session.transcript:
                    fh.write(json.dumps(export_form(m), ensure_ascii=False) + "\n")
        except OSError as exc:
            _fail(f"cannot write {out_file}: {exc.strerror or exc}")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    _print_replay(transcript, summary, stats, session)


def _compare(path: Path, messages: list, cfg: Config, prices, every_n: int, reclaim: int, gap: float,
             as_json: bool, plot: Optional[Path], log_file: Optional[Path]) -> None:
    if cfg.model.context_length is None:
        _fail("--compare needs the model's context window: --context-limit N (or model.context_length)")
    handler = _open_log(log_file)
    try:
        with err.status("replaying under 5 policies...", spinner="dots") if err.is_terminal else _nullcontext():
            result = compare(messages, cfg, prices, every_n=every_n, reclaim_tokens=reclaim, assumed_gap_seconds=gap)
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    if plot:
        try:
            plot_compare(result, str(plot))
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'microcompact[plot]' (or pip install matplotlib)")
    public = {**result, "policies": [{k: v for k, v in row.items() if not k.startswith("_")}
                                     for row in result["policies"]]}
    if as_json:
        sys.stdout.write(json.dumps(public, indent=2) + "\n")
        return
    p = result["pricing"]
    table = Table(title=f"{path.name}: policies side by side ({p['name']} pricing, cache TTL {p['ttl_seconds']:g} s)",
                  title_justify="left")
    for col in ("policy", "peak occ %", "final occ %", "batch", "largest stall (tok)", "summ calls",
                "summ tokens", "cached read", "cache write", "uncached", "cost $"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for row in result["policies"]:
        table.add_row(row["policy"], f"{row['peak_occupancy']}", f"{row['final_occupancy']}",
                      f"{row['batch_compactions']} (+{row['batch_prunes']} pruned)",
                      f"{row['largest_summarization_tokens']:,}",
                      str(row["summarizer_calls"]), f"{row['summarizer_tokens']:,}",
                      f"{row['cached_read_tokens']:,}", f"{row['cache_write_tokens']:,}",
                      f"{row['uncached_tokens']:,}", f"{row['cost']['total']:.4f}")
    out.print(table)
    out.print(f"timing: {result['timing']}; micro-every-N uses N={result['every_n']}, micro-reclaim-gate "
              f"{result['reclaim_tokens']:,} tokens; cost includes summarizer calls at the main model's prices "
              "unless the pricing file sets summarizer_input/summarizer_output.", soft_wrap=True)
    if plot:
        out.print(f"plot written to {plot}")


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
    table.add_row("passes", f"{s['passes']}  " + ", ".join(f"{k}={v}" for k, v in s["outcomes"].items()))
    table.add_row("tokens: uncompacted -> final", f"{s['uncompacted_tokens']:,} -> {s['final_tokens']:,} "
                  f"(saved {s['tokens_saved_total']:,})")
    table.add_row("peak prompt tokens", f"{s['peak_tokens']:,}")
    if occ["max"] is not None:
        table.add_row("occupancy % of threshold", f"min {occ['min']}  median {occ['median']}  max {occ['max']}  "
                      f"final {occ['final']}")
    table.add_row("largest single summarization", f"{s['largest_pass_tokens']:,} tokens read")
    table.add_row("summarizer time", f"{s['summarizer_ms_total'] / 1000:.2f} s")
    out.print(table)
    threshold = s["threshold_tokens"]
    if threshold and stats.samples:
        raw = [100.0 * v / threshold for v in stats.raw_samples]
        got = [100.0 * v / threshold for v in stats.samples]
        top = max(100.0, max(raw))
        out.print(f"occupancy per model request (full height = {top:.0f}% of the threshold):")
        out.print(f"  without compaction  {sparkline(raw, top=top)}  peak {max(raw):.0f}%", soft_wrap=True)
        out.print(f"  {'with micro' if session.micro.active else 'engine off':<18}  {sparkline(got, top=top)}  "
                  f"peak {max(got):.0f}%", soft_wrap=True)


# Store bookkeeping, not transcript content: left out of exported transcripts.
_BOOKKEEPING = ("_tokens", "_pos", "_row", "_src")


def export_form(message: dict) -> dict:
    return {k: v for k, v in message.items() if k not in _BOOKKEEPING}


sessions_app = typer.Typer(help="Sessions in the store: list, show, search absorbed originals, export.",
                           no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

DbOption = Annotated[Optional[str], typer.Option("--db", help="SQLite file or postgresql:// DSN "
                                                              "(default $MICROCOMPACT_HOME/sessions.db).")]


def _store(db: Optional[str]):
    try:
        return open_store(db)
    except StoreError as exc:
        _fail(str(exc))


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
        table.add_row(escape(str(r["id"])), str(r["created_at"])[:19], str(r["updated_at"])[:19], str(c["active"]),
                      str(c["absorbed"]), str(c["superseded"]), str(r["markers"]))
    out.print(table if rows else "no sessions stored")


@sessions_app.command("show")
def sessions_show(session_id: str, db: DbOption = None,
                  full: Annotated[bool, typer.Option("--full", help="Print whole messages, not one line each.")] = False
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
        table.add_row(str(m.get("_pos")), str(m.get("_row")), f"{m['role']}{' (' + kind + ' marker)' if kind else ''}",
                      escape(line))
    out.print(table)


@sessions_app.command("search")
def sessions_search(session_id: str, query: str, db: DbOption = None,
                    limit: Annotated[int, typer.Option("--limit")] = 20,
                    active: Annotated[bool, typer.Option("--include-active", help="Search active messages too.")] = False
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
        table.add_row(str(h["row"]), str(h["position"]), h["role"], h["state"], str(h.get("absorbed_by") or ""),
                      escape(h["snippet"]))
    out.print(table)


@sessions_app.command("export")
def sessions_export(session_id: str, db: DbOption = None,
                    include_absorbed: Annotated[bool, typer.Option("--include-absorbed", help="Also the originals compaction absorbed, in position order.")] = False,
                    expand: Annotated[Optional[int], typer.Option("--expand", help="Only the originals the marker with this row id stands for.")] = None
                    ) -> None:
    """The session as JSONL on stdout (replayable)."""
    with _store(db) as store:
        _require_session(store, session_id)
        try:
            messages = store.expand(session_id, expand) if expand is not None else \
                store.export(session_id, include_absorbed=include_absorbed)
        except (ValueError, StoreError) as exc:
            _fail(str(exc))
    for m in messages:
        sys.stdout.write(json.dumps(export_form(m), ensure_ascii=False) + "\n")


@app.command("report")
def report_cmd(
    logfiles: Annotated[Optional[list[Path]], typer.Argument(help="Log files (default $MICROCOMPACT_HOME/logs/agent.log).")] = None,
    per_session: Annotated[bool, typer.Option("--per-session", help="Add the per-session table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw occupancy per pass for each session (PNG).")] = None,
) -> None:
    """Turn telemetry logs into answers: headroom, activity, tokens, per session."""
    from .report import run_report

    code = run_report(logfiles, per_session, as_json, plot, out, err)
    if code:
        raise typer.Exit(code)


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="A recorded session in the format given by --from.")],
    fmt: Annotated[str, typer.Option("--from", help="claude-code | swe-agent | adp | openai")],
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Output JSONL (default: stdout).")] = None,
    record: Annotated[Optional[int], typer.Option("--record", help="adp files: which record (0-based; default the largest).")] = None,
) -> None:
    """Convert a recorded agent session into the JSONL that replay reads."""
    from .importers import run_import

    code = run_import(fmt, file, out_file, err, record=record)
    if code:
        raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
