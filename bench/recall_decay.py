"""``recall.py``'s decay check: facts planted in early tool results, each mentioned once by the agent, must
survive the rolling summary being folded into again and again, and defragmented.

The synthetic session: one user task; ``facts`` steps that each read a note whose output holds one fact (a
distinctive identifier among plain lines) and a reply naming it once; then filler steps (~6K tokens of
numbered output each, nothing the agent names again) until the library, at serve's config with inline
passes (:func:`recall_policies.inline_config`), has folded ``folds`` times after the last fact and
defragmented its summary at least once, or ``max_steps`` ran out. The result is the share of the facts
the final prompt still holds (by the identifier rule).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from microcompact.recall import missing_from
from microcompact.session import Session
from recall_policies import Sizes, inline_config

FILLER_LINES = 1500


@dataclass(frozen=True)
class DecayResult:
    planted: int
    kept: int
    folds: int
    defrags: int
    steps: int
    final_tokens: int
    note: str = ""


def fact(k: int) -> str:
    return f"ledger_key_{k:02d}_{hashlib.sha256(str(k).encode()).hexdigest()[:8]}"


def _call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _plant(n: int, k: int) -> list[dict[str, Any]]:
    note = f"Configuration notes, part {k}.\nThe deploy step needs {fact(k)} for its lookup.\nNothing else here."
    return [
        _call(n, "read_file", {"path": f"notes/part{k}.txt"}),
        {"role": "tool", "tool_call_id": f"call_{n}", "content": note},
        {"role": "assistant", "content": f"Noted: the deploy step uses {fact(k)}."},
    ]


def _filler(n: int) -> list[dict[str, Any]]:
    """A batch's log read, and the agent's one-line note on it: each fold adds to the rolling summary (a
    file read, a finding), so it outgrows its budget and is defragmented; nothing here is named later."""
    rows = [f"row {i} of batch {n}: ok" for i in range(FILLER_LINES)]
    results = [
        f"result: batch_{n}_part_{j} checksum {hashlib.sha256(f'{n}.{j}'.encode()).hexdigest()[:12]}" for j in range(3)
    ]
    output = "\n".join([*results, *rows, f"error: batch_{n} finished with warnings"])
    return [
        _call(n, "read_file", {"path": f"data/batch_{n}.log"}),
        {"role": "tool", "tool_call_id": f"call_{n}", "content": output},
        {"role": "assistant", "content": f"Batch {n} finished with warnings; its three parts are checked."},
    ]


DEFRAG_REACHABLE = {"target_ratio": 0.02, "micro_compact_defrag_threshold_tokens": 200}


def decay(
    facts: int = 20, folds: int = 20, max_steps: int = 150, overrides: dict[str, Any] | None = None
) -> DecayResult:
    """Plant ``facts``, then fill until ``folds`` folds and a defrag happened after them (see above).
    ``overrides``: compression settings over serve's (:data:`DEFRAG_REACHABLE`: a tail of ~3K tokens and
    the least defrag threshold allowed, 200 tokens, so the marker leaves the protected tail and defrag runs)."""
    config = inline_config()
    if overrides:
        config = config.with_overrides(source="bench/recall.py decay", compression=overrides)
    session = Session(config)
    sizes = Sizes()
    session.extend([{"role": "user", "content": "Prepare the deploy: read the notes, then run the batches."}])
    seen = _Passes()
    step = 0
    try:
        for k in range(facts):
            step += 1
            _request(session, _plant(step, k), seen, sizes)
        seen.absorbed = seen.defrags = 0  # count only what came after the last fact
        while step < max_steps and (seen.absorbed < folds or seen.defrags < 1):
            step += 1
            _request(session, _filler(step), seen, sizes)
        prompt = session.messages
        lost = missing_from({fact(k) for k in range(facts)}, prompt)
        short = "" if seen.absorbed >= folds and seen.defrags else f"; stopped at {max_steps} steps"
        return DecayResult(facts, facts - len(lost), seen.absorbed, seen.defrags, step, sizes.tokens(prompt), short)
    finally:
        session.close()


@dataclass
class _Passes:
    absorbed: int = 0
    defrags: int = 0
    last_prompt: int = 0  # the previous request's prompt tokens: what a prefix cache reads when nothing folded


def _request(session: Session, messages: list[dict[str, Any]], seen: _Passes, sizes: Sizes) -> None:
    """Each assistant message is a reply: before it, a request (its passes counted), usage as a prefix cache
    reports it (the previous prompt read unless a pass rewrote it, the rest written)."""
    for m in messages:
        if m["role"] == "assistant":
            outcomes = [str(r.outcome) for r in session.before_request()]
            seen.absorbed += outcomes.count("absorbed") + outcomes.count("model_rejected")
            seen.defrags += outcomes.count("defrag") + outcomes.count("defrag_failed")
            total = sizes.tokens(session.messages)
            read = 0 if outcomes else min(seen.last_prompt, total)
            session.record_usage(total, cache_read_tokens=read, cache_write_tokens=total - read)
            seen.last_prompt = total
        session.append(m)
