"""``microcompact replay``: drive a recorded transcript through a session and say what compaction did."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..bill.replay_cost import Pricing, load_pricing
from ..config import Config, ConfigError, SummarizerKind, load_config
from ..messages import Message, TranscriptError
from ..replay import ReplayStats, default_session_id, read_transcript, resume_start, summary_json
from ..session import Session
from ..store import StoreError, check_location, open_store
from ..telemetry import default_log_path
from . import runs
from .base import (
    ConfigOption,
    ContextLimitOption,
    LogOption,
    check_input_file,
    check_name,
    check_path_text,
    err,
    fail,
    logging_to,
    out,
    say,
)
from .compare_command import CompareOptions, compare_options, run_compare
from .output import as_read, check_apart, check_writable_target, sqlite_files, write_atomically
from .summarizer_check import failure_report, unreachable
from .tables import print_replay


@dataclass(frozen=True)
class ReplayRequest:
    """Everything ``replay`` was asked, as given on the command line (None: not given)."""

    transcript: Path
    config: Path | None = None
    context_limit: int | None = None
    summarizer: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    every: int | None = None
    out_file: Path | None = None
    log_file: Path | None = None
    as_json: bool = False
    micro: bool | None = None
    repair: bool = False
    session_id: str | None = None
    db: str | None = None
    compare: bool = False
    pricing: str | None = None
    every_n: int | None = None
    reclaim: int | None = None
    assume_gap: float | None = None
    plot: Path | None = None


def replay_cmd(
    transcript: Annotated[Path, typer.Argument(help="JSONL (one message per line) or a JSON array file.")],
    config: ConfigOption = None,
    context_limit: ContextLimitOption = None,
    summarizer: Annotated[str | None, typer.Option("--summarizer", help="extractive | openai")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Summarizer model name (openai).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Env var holding the API key.")] = None,
    every: Annotated[
        int | None,
        typer.Option("--every", help="Turn-end passes every N turns (long-turn pieces before requests are not gated)."),
    ] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the final transcript (JSONL).")] = None,
    log_file: LogOption = None,
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
    run_replay(
        ReplayRequest(
            transcript,
            config=config,
            context_limit=context_limit,
            summarizer=summarizer,
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            every=every,
            out_file=out_file,
            log_file=log_file,
            as_json=as_json,
            micro=micro_flag,
            repair=repair,
            session_id=session_id,
            db=db,
            compare=compare_policies,
            pricing=pricing,
            every_n=every_n,
            reclaim=reclaim,
            assume_gap=assume_gap,
            plot=plot,
        )
    )


def run_replay(req: ReplayRequest) -> None:
    """``replay``: every option checked and the input read before anything long runs, then one replay (or
    the --compare replays), then the --out file, and the summary as a table or JSON."""
    compare_opts = _checked_options(req)
    cfg, messages, prices = _load(req, compare_opts)
    if req.compare:
        assert prices is not None  # loaded for --compare
        run_compare(req.transcript, messages, cfg, prices, compare_opts, req.as_json, req.log_file)
        return
    with logging_to(req.log_file):
        stats, session = _replay_session(req, cfg, messages)
    summary = summary_json(stats, session)
    if req.out_file:
        _write_out(req.out_file, session, messages)
    if req.as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        print_replay(out, req.transcript, summary, stats, session)
    warning, code = failure_report(stats)
    for line in (warning, over_window(summary)):
        if line:
            say(line)
    if code:
        raise typer.Exit(code)


def over_window(summary: dict[str, Any]) -> str | None:
    """The warning when the replayed prompt went over the window anyway (what is never cut, the system and
    user messages and markers, is larger than it): without it a tiny --context-limit ends silently."""
    limit, peak = summary.get("context_limit"), summary.get("peak_tokens", 0)
    if not limit or peak <= limit:
        return None
    return (
        f"warning: the prompt reached {peak:,} tokens, over the {limit:,}-token window: the system and user "
        "messages and markers, which are never cut, alone are larger; use a larger --context-limit"
    )


def _checked_options(req: ReplayRequest) -> CompareOptions:
    """The checks that need no file read: names and paths, the summarizer's name, the --compare options,
    the --out target."""
    for what, path in (
        ("TRANSCRIPT", req.transcript),
        ("--config", req.config),
        ("--out", req.out_file),
        ("--log", req.log_file),
        ("--plot", req.plot),
    ):
        check_path_text(what, path)
    check_input_file("TRANSCRIPT", req.transcript)
    for what, given in (("--config", req.config), ("--pricing", req.pricing)):
        if given is not None:
            check_input_file(what, Path(given))  # a preset name (--pricing openai) is no file: it passes
    if req.session_id is not None:
        check_name("--session", req.session_id)
    if req.db is not None:
        try:
            check_location(req.db)
        except StoreError as exc:
            fail(f"--db: {exc}")
    if req.summarizer not in (None, "extractive", "openai"):
        fail(f"--summarizer must be extractive or openai, got {req.summarizer!r}")
    opts = compare_options(req.compare, req.pricing, req.every_n, req.reclaim, req.assume_gap, req.plot)
    _check_outputs_apart(req, opts)
    if req.out_file is not None:
        check_writable_target("--out", req.out_file)
    return opts


def _check_outputs_apart(req: ReplayRequest, opts: CompareOptions) -> None:
    """--out and --plot name neither the store, the log, the config nor each other (the transcript may be
    replaced by its replay: it is read whole first)."""
    others: list[tuple[str, str | Path | None]] = [("the --log file", req.log_file or default_log_path())]
    others += [(f"the --db store's file {f}", f) for f in sqlite_files(req.db)]
    others += [("the --config file", req.config)]
    if req.pricing is not None and Path(req.pricing).is_file():
        others.append(("the --pricing file", req.pricing))
    if req.out_file is not None:
        check_apart("--out", req.out_file, [*others, ("the --plot file", opts.plot)])
    if opts.plot is not None:
        check_apart("--plot", opts.plot, others)


def _load(req: ReplayRequest, opts: CompareOptions) -> tuple[Config, list[Message], Pricing | None]:
    """The config, the transcript (repairs reported on stderr, one line each) and, for --compare, the prices."""
    try:
        cfg = configure(req)
        messages, repairs = read_transcript(req.transcript, repair=req.repair)
        prices = load_pricing(opts.pricing) if req.compare else None
    except (ConfigError, TranscriptError) as exc:
        fail(str(exc))
    for line in repairs:
        say(line)
    why = unreachable(cfg)
    if why:
        fail(why)
    return cfg, messages, prices


def configure(req: ReplayRequest) -> Config:
    """The config for a replay: explicit flags > the config file > defaults (replay's default is micro on)."""
    # The library's default is off; replay's is on, unless the config file (or --micro) says otherwise.
    config = load_config(req.config).with_defaults(source="replay's defaults", compression={"micro_compact": True})
    compression = {"micro_compact": req.micro, "micro_compact_every_n_turns": req.every}
    aux = {
        "model": req.model,
        "base_url": req.base_url,
        "api_key_env": req.api_key_env,
        "provider": req.summarizer if req.summarizer else None,
    }
    cfg = config.with_overrides(
        source="command-line options (--context-limit, --every, --summarizer, --model, --base-url, --api-key-env)",
        compression=compression,
        **{"auxiliary.compression": aux},
        model={"context_length": req.context_limit},
    )
    if cfg.auxiliary.compression.kind is SummarizerKind.EXTRACTIVE:
        given = [
            flag
            for flag, v in (("--model", req.model), ("--base-url", req.base_url), ("--api-key-env", req.api_key_env))
            if v is not None
        ]
        if given:
            fail(
                f"{given[0]} only applies with a model summarizer: add --summarizer openai (or set "
                "auxiliary.compression.provider in the config)"
            )
    return cfg


def _replay_session(req: ReplayRequest, cfg: Config, messages: list[Message]) -> tuple[ReplayStats, Session]:
    """Replay into a new session, or into the stored one of --db (resumed where an interrupted run stopped)."""
    store = None
    try:
        sid = req.session_id or default_session_id(req.transcript, messages)
        start = 0
        if req.db:
            store = open_store(req.db)
            session = Session.open(store, sid, cfg)
            start = resume_start(session, messages, req.transcript.name)
            if start:
                err.print(f"resuming session {escape(sid)} from message {start} of {len(messages)}", highlight=False)
        else:
            session = Session(cfg, session_id=sid)
        stats = _drive(messages, session, start)
        session.close()
        if store is not None:
            store.close()
    except (ConfigError, StoreError, TranscriptError) as exc:
        if store is not None:
            store.close()  # gives the session's writer lease back at once
        fail(str(exc))
    except KeyboardInterrupt:
        where = "; run the same command again to resume from the store" if req.db else ""
        err.print(f"interrupted{where}", highlight=False)
        raise typer.Exit(130) from None
    return stats, session


def _drive(messages: list[Message], session: Session, start: int) -> ReplayStats:
    """The replay itself, with a progress bar on a terminal for long transcripts."""
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
        return runs.replay(messages, session, on_message=lambda i: progress.update(task, completed=i + 1), start=start)


def _write_out(path: Path, session: Session, messages: list[Message]) -> None:
    """The final transcript as JSONL, each message as the input spelled it when unchanged; whole or nothing."""
    lines = (json.dumps(as_read(m, messages), ensure_ascii=False) + "\n" for m in session.transcript)
    try:
        write_atomically(path, lines)
    except (OSError, ValueError) as exc:
        fail(f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}; nothing was written")
