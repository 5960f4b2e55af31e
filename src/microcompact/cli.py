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
from rich.table import Table

from .config import Config, ConfigError, home_dir, load_config
from .messages import TranscriptError
from .replay import load_transcript, replay, summary_json
from .session import Session
from .telemetry import setup_file_logging

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Keep long agent transcripts inside the context window without losing what the user said.")
out = Console()
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
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _configure(config_path: Optional[Path], context_limit: Optional[int], summarizer: Optional[str],
               model: Optional[str], base_url: Optional[str], api_key_env: Optional[str], every: Optional[int],
               micro: bool) -> Config:
    config = load_config(config_path)
    compression = {"micro_compact": micro, "micro_compact_every_n_turns": every}
    aux = {"model": model, "base_url": base_url, "api_key_env": api_key_env,
           "provider": summarizer if summarizer else None}
    return config.with_overrides(compression=compression, **{"auxiliary.compression": aux},
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
    every: Annotated[Optional[int], typer.Option("--every", help="Run a pass every N turns.")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the final transcript (JSONL).")] = None,
    log_file: Annotated[Optional[Path], typer.Option("--log", help="Log file (default $MICROCOMPACT_HOME/logs/agent.log).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable summary.")] = False,
    no_micro: Annotated[bool, typer.Option("--no-micro", help="Replay without micro-compaction.")] = False,
    session_id: Annotated[Optional[str], typer.Option("--session", help="Session id (default: derived from the file).")] = None,
) -> None:
    """Replay a recorded transcript through the engine and report what happened."""
    if summarizer not in (None, "extractive", "openai"):
        _fail(f"--summarizer must be extractive or openai, got {summarizer!r}")
    try:
        cfg = _configure(config, context_limit, summarizer, model, base_url, api_key_env, every, not no_micro)
        messages = load_transcript(transcript)
    except (ConfigError, TranscriptError) as exc:
        _fail(str(exc))
    handler = setup_file_logging(log_file or home_dir() / "logs" / "agent.log")
    try:
        session = Session(cfg, session_id=session_id or transcript.stem)
        with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True, disable=len(messages) < 200 or not err.is_terminal) as progress:
            task = progress.add_task("replay", total=len(messages))
            stats = replay(messages, session, on_message=lambda i: progress.update(task, completed=i + 1))
    except ConfigError as exc:
        _fail(str(exc))
    finally:
        logging.getLogger("microcompact").removeHandler(handler)
        handler.close()
    summary = summary_json(stats, session)
    if out_file:
        with open(out_file, "w", encoding="utf-8") as fh:
            for m in session.transcript:
                fh.write(json.dumps({k: v for k, v in m.items() if k != "_tokens"}, ensure_ascii=False) + "\n")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    _print_replay(transcript, summary, stats, session)


def _print_replay(path: Path, s: dict, stats, session: Session) -> None:
    occ = s["occupancy"]
    table = Table(title=f"replay of {path.name}", show_header=False, title_justify="left")
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
