"""Side-by-side replay of one transcript under several compaction policies, priced with a cache model.

Every policy replays the same messages through a real :class:`Session`; at each model request the prompt
goes through :class:`~microcompact.bill.replay_cost.CacheModel`, and every summarizer call is tallied from the
telemetry records the engines return. What the table shows is what an agent would have paid.
"""

from __future__ import annotations

from typing import Any

from ..bill.cache_usage import UsageReport
from ..bill.replay_cost import CacheModel, Pricing
from ..config import Config
from ..events import Outcome
from ..messages import Message
from ..micro.price import PricePolicy
from ..recall import IdentifierReader, RecallTotals, RequestRecall, reply_targets, request_recall
from ..session import Session
from . import SimClock, replay, request_times

POLICIES = (
    "batch-only",
    "micro-every-turn",
    "micro-every-N",
    "micro-reclaim-gate",
    "micro-cache-aware",
    "micro-price",
)


def policy_config(base: Config, policy: str, *, every_n: int, reclaim_tokens: int, ttl_seconds: float) -> Config:
    micro: dict[str, Any] = {
        "micro_compact": True,
        "micro_compact_every_n_turns": 1,
        "micro_compact_min_reclaim_tokens": 0,
        "micro_compact_cache_ttl_seconds": None,
    }
    if policy == "batch-only":
        micro = {"micro_compact": False}
    elif policy == "micro-every-N":
        micro["micro_compact_every_n_turns"] = every_n
    elif policy == "micro-reclaim-gate":
        micro["micro_compact_min_reclaim_tokens"] = reclaim_tokens
    elif policy == "micro-cache-aware":
        micro["micro_compact_cache_ttl_seconds"] = ttl_seconds
    elif policy == "micro-price":
        micro["micro_compact_schedule"] = "price"
    elif policy != "micro-every-turn":
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    data = base.model_dump()
    data["compression"].update(micro)
    return Config.model_validate(data)


def run_policy(
    messages: list[Message],
    config: Config,
    pricing: Pricing,
    policy: str,
    times: list[float],
    targets: dict[int, frozenset[str]] | None = None,
    reader: IdentifierReader | None = None,
) -> dict[str, Any]:
    """One policy's replay, priced; with ``targets`` (``recall.reply_targets`` of ``messages``), also the
    future-reference recall of its prompts (what the agent used next that its prompt still held)."""
    clock = SimClock()
    recalled: list[RequestRecall] = []
    session = Session(config, session_id=policy, clock=clock)
    model = CacheModel(pricing)
    priced = policy == "micro-price"
    if priced:  # folds by the prices of this comparison, reading the cache model's figures as usage
        session.micro.use_policy(PricePolicy(config, pricing, session.cache))

    def on_request(i: int, s: Session) -> None:
        # The reply to this request is the message about to be appended.
        if targets is not None and i in targets:
            recalled.append(request_recall(i, targets[i], s.ledger.messages, reader))
        read, written = model.tally.cached_read_tokens, model.tally.cache_write_tokens + model.tally.uncached_tokens
        model.request(s.ledger.messages, s.ledger.tokens, clock.now, s.counter.count_message(messages[i]))
        if priced:
            read = model.tally.cached_read_tokens - read
            written = model.tally.cache_write_tokens + model.tally.uncached_tokens - written
            s.cache.record(UsageReport(read + written, read, written, clock.now))

    stats = replay(messages, session, clock=clock, times=times, on_request=on_request)
    for record in stats.passes + stats.batches:
        if record.get("summarizer_input_tokens"):
            model.summarizer_call(record["summarizer_input_tokens"], record.get("summarizer_output_tokens", 0))
    threshold = config.threshold_tokens()
    peak = max([*stats.samples, session.tokens])
    tally = model.tally
    recall = RecallTotals.of(recalled)
    return {
        "policy": policy,
        "recall": None if recall.recall is None else round(100 * recall.recall, 2),
        "recall_targets": recall.targets,
        "requests_losing": recall.losing,
        "peak_tokens": peak,
        "peak_occupancy": round(100 * peak / threshold, 1) if threshold else None,
        "final_occupancy": session.occupancy_pct(),
        "batch_compactions": session.batch.stats().compactions,
        "batch_prunes": sum(1 for b in stats.batches if b["outcome"] == Outcome.PRUNED),
        "micro_passes": session.micro.stats().passes_total,
        "largest_summarization_tokens": max(
            session.micro.stats().largest_pass_tokens, session.batch.stats().largest_input_tokens
        ),
        "summarizer_calls": tally.summarizer_calls,
        "summarizer_tokens": tally.summarizer_input_tokens + tally.summarizer_output_tokens,
        "requests": tally.requests,
        "cached_read_tokens": tally.cached_read_tokens,
        "cache_write_tokens": tally.cache_write_tokens,
        "uncached_tokens": tally.uncached_tokens,
        "output_tokens": tally.output_tokens,
        "cache_expiries": tally.cache_expiries,
        "cost": tally.cost(pricing),
        "_occupancy_series": [round(100 * v / threshold, 2) for v in stats.samples] if threshold else [],
    }


def plot_compare(result: dict[str, Any], path: str) -> None:
    """Occupancy per model request for each policy (PNG). Needs matplotlib (``pip install matplotlib``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for row in result["policies"]:
        ax.plot(row["_occupancy_series"], label=row["policy"], linewidth=1.2)
    ax.axhline(100, color="black", linestyle="--", linewidth=0.8, label="batch threshold")
    ax.set_xlabel("model request")
    ax.set_ylabel("occupancy (% of the batch threshold)")
    ax.set_title("Occupancy per model request, by compaction policy")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare(
    messages: list[Message],
    base: Config,
    pricing: Pricing,
    *,
    every_n: int = 5,
    reclaim_tokens: int = 4096,
    assumed_gap_seconds: float = 30.0,
    policies: tuple[str, ...] = POLICIES,
) -> dict[str, Any]:
    times, recorded = request_times(messages, assumed_gap_seconds)
    reader = IdentifierReader()
    targets = reply_targets(messages, reader)
    rows = [
        run_policy(
            messages,
            policy_config(base, p, every_n=every_n, reclaim_tokens=reclaim_tokens, ttl_seconds=pricing.ttl_seconds),
            pricing,
            p,
            times,
            targets,
            reader,
        )
        for p in policies
    ]
    return {
        "pricing": pricing.model_dump(),
        "timing": (
            "timestamps recorded in the transcript"
            if recorded
            else f"assumed: {assumed_gap_seconds:g} s between model requests (no timestamps recorded)"
        ),
        "context_limit": base.model.context_length,
        "threshold_tokens": base.threshold_tokens(),
        "every_n": every_n,
        "reclaim_tokens": reclaim_tokens,
        "policies": rows,
    }
