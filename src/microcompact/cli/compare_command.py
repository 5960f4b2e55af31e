"""``microcompact replay --compare``: the same transcript under every policy, side by side, with costs."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bill.replay_cost import Pricing
from ..config import Config, SummarizerKind
from ..messages import Message
from ..replay.compare import POLICIES, plot_compare
from . import runs
from .base import err, fail, logging_to, out
from .output import check_writable_target, replacing
from .tables import print_compare

PLOT_NEEDS_MATPLOTLIB = "--plot needs matplotlib: pip install 'microcompact[plot]' (or pip install matplotlib)"


@dataclass
class CompareOptions:
    pricing: str = "anthropic"
    every_n: int = 5
    reclaim: int = 4096
    assume_gap: float = 30.0
    plot: Path | None = None


def compare_options(
    on: bool, pricing: str | None, every_n: int | None, reclaim: int | None, assume_gap: float | None, plot: Path | None
) -> CompareOptions:
    """The --compare options, range-checked before anything long runs; given without --compare, an error
    (a flag that silently does nothing misleads)."""
    if not on:
        _refuse_without_compare(pricing=pricing, every_n=every_n, reclaim=reclaim, assume_gap=assume_gap, plot=plot)
    opts = CompareOptions()
    if pricing is not None:
        opts.pricing = pricing
    if every_n is not None:
        opts.every_n = _checked_every_n(every_n)
    if reclaim is not None:
        opts.reclaim = _checked_reclaim(reclaim)
    if assume_gap is not None:
        opts.assume_gap = _checked_assume_gap(assume_gap)
    if plot is not None:
        opts.plot = _checked_plot(plot)
    return opts


def _refuse_without_compare(**given: object) -> None:
    """The first --compare flag given without --compare, as an error (in the order of the options)."""
    for name, value in given.items():
        if value is not None:
            fail(f"--{name.replace('_', '-')} only applies with --compare")


def _checked_every_n(every_n: int) -> int:
    if not 1 <= every_n <= 1000:
        fail(f"--every-n must be between 1 and 1000, got {every_n}")
    return every_n


def _checked_reclaim(reclaim: int) -> int:
    if not 0 <= reclaim <= 10_000_000:
        fail(f"--reclaim must be between 0 and 10000000 tokens, got {reclaim}")
    return reclaim


def _checked_assume_gap(assume_gap: float) -> float:
    if not math.isfinite(assume_gap) or not 0 <= assume_gap <= 86_400:
        fail(f"--assume-gap must be a number of seconds between 0 and 86400, got {assume_gap}")
    return assume_gap


def _checked_plot(plot: Path) -> Path:
    plot = check_writable_target("--plot", plot)  # a symlink's target: the link stays
    if importlib.util.find_spec("matplotlib") is None:
        fail(PLOT_NEEDS_MATPLOTLIB)
    return plot


def run_compare(
    path: Path,
    messages: list[Message],
    cfg: Config,
    prices: Pricing,
    opts: CompareOptions,
    as_json: bool,
    log_file: Path | None,
) -> None:
    """Replay under every policy (logging to ``log_file``), draw the plot if asked, print the table or JSON."""
    if cfg.auxiliary.compression.kind is SummarizerKind.ENDPOINT:
        err.print(
            f"note: --compare replays under {len(POLICIES)} policies, each with its own summarizer calls: "
            f"about {len(POLICIES)} times the model calls of one replay",
            highlight=False,
            soft_wrap=True,
        )
    if cfg.model.context_length is None:
        fail("--compare needs the model's context window: --context-limit N (or model.context_length)")
    busy: contextlib.AbstractContextManager[object] = (
        err.status("replaying under 5 policies...", spinner="dots") if err.is_terminal else contextlib.nullcontext()
    )
    with logging_to(log_file), busy:
        result = runs.compare(
            messages,
            cfg,
            prices,
            every_n=opts.every_n,
            reclaim_tokens=opts.reclaim,
            assumed_gap_seconds=opts.assume_gap,
        )
    if opts.plot:
        _plot(result, opts.plot)
    if as_json:
        public = {
            **result,
            "policies": [{k: v for k, v in row.items() if not k.startswith("_")} for row in result["policies"]],
        }
        sys.stdout.write(json.dumps(public, indent=2) + "\n")
        return
    print_compare(out, path, result, opts.plot)


def _plot(result: dict[str, Any], plot: Path) -> None:
    """Occupancy per model request for each policy, as a PNG at ``plot``; a failure is a one-line error."""
    try:
        with replacing(plot, plot.suffix or ".png") as drawn:  # a file, whole or not at all; PNG unless named
            plot_compare(result, str(drawn))
    except ImportError:
        fail(PLOT_NEEDS_MATPLOTLIB)
    except (OSError, ValueError) as exc:
        fail(f"cannot write the plot {plot}: {getattr(exc, 'strerror', None) or exc}")
