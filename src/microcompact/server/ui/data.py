"""The figures of the conversation page, read from the store only (so every ``serve`` on one database shows
the same page): JSON-ready dicts, the same ones the page draws and ``/ui/api/...`` returns."""

from __future__ import annotations

import itertools
import math
import statistics
from datetime import datetime
from enum import StrEnum
from typing import Any

from ...bill.cost_line import SessionCost
from ...bill.fold_price import over_cap
from ...config import home_dir
from ...keys import ABSORBED_BY_KEY, REWRITE_META, ROW_KEY, SECRETS_META, STATE_KEY
from ...messages import Message, marker_kind
from ...redact import redact_message, redact_text
from ...redact.secret_memory import SecretMemory, remembering
from ...render import message_text
from ...store import _SQLStore
from ...store.request_figures import RequestFigures

MAX_TEXT = 200_000  # characters of one message the page and the JSON carry (the rest is counted, not sent)
SEARCH_LIMIT = 50


def secrets_of(store: _SQLStore, session_id: str) -> SecretMemory:
    """The conversation's secret memory: what it redacted so far stays hidden on the page too."""
    memory = SecretMemory(home_dir())
    memory.restore(store.session_meta(session_id).get(SECRETS_META))
    return memory


def text_of(message: Message, memory: SecretMemory, labels: bool = True) -> dict[str, Any]:
    """A message's plain text, redacted under ``memory`` (tool calls included; ``labels``: each block's kind
    named), cut at :data:`MAX_TEXT`, and how long it was."""
    with remembering(memory):
        text = message_text(redact_message(message), tool_calls=True, name=True, labels=labels)
    return {"text": text[:MAX_TEXT], "chars": len(text), "cut": len(text) > MAX_TEXT}


OLD_KEYS = {"cache_read": "cache_read_tokens", "cache_write": "cache_write_tokens"}  # rows stored before the rename


def _rows(store: _SQLStore, session_id: str) -> list[dict[str, Any]]:
    """The conversation's request rows, each with its cost line's keys (older rows' names mapped)."""
    rows = RequestFigures(store).of(session_id)
    for row in rows:
        for old, new in OLD_KEYS.items():
            if old in row and new not in row:
                row[new] = row.pop(old)
    return rows


def _totals(session_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a conversation's request rows add up to (:class:`SessionCost`, as ``report`` and the headers
    sum them), and where the last one left it."""
    last = rows[-1] if rows else {}
    figures = SessionCost(session_id)
    for row in rows:
        figures.add(row)
    return {
        "requests": figures.requests,
        "occupancy_pct": figures.occupancy_pct,
        "occupancy_peak": figures.occupancy_peak,
        "folds": figures.folds,
        "prompt_tokens": figures.prompt_tokens,
        "uncompacted_tokens": figures.uncompacted_tokens,
        "tokens_saved": figures.tokens_saved,
        "cache_read_tokens": figures.cache_read_tokens,
        "cache_write_tokens": figures.cache_write_tokens,
        "spent": round(figures.spent, 6) if figures.priced else None,
        "uncompacted": round(figures.uncompacted, 6) if figures.priced else None,
        "pricing": figures.pricing or None,
        "unpriced": figures.unpriced or None,
        "last_at": last.get("at"),
        "client": next((r["client"] for r in reversed(rows) if r.get("client")), None),
        "model": next((r["model"] for r in reversed(rows) if r.get("model")), None),
        "api": next((r["api"] for r in reversed(rows) if r.get("api")), None),
        **_audit_totals(rows),
        "would_have": round(figures.would_have, 6) if figures.would_have_priced else None,
        "would_have_saved": round(figures.would_have_saved, 6) if figures.would_have_priced else None,
    }


def _audit_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the audited requests (``serve --audit``) add up to in tokens: what rewriting would have sent
    (its dollars are the cost lines', :class:`SessionCost`); the mode of the last request."""
    audited = [r for r in rows if r.get("mode") == "audit"]
    return {
        "mode": "audit" if rows and rows[-1].get("mode") == "audit" else "rewriting",
        "audited_requests": len(audited),
        "audited_prompt_tokens": sum(int(r.get("prompt_tokens") or 0) for r in audited),
        "would_have_tokens": sum(int(r.get("would_have_tokens") or 0) for r in audited),
    }


def conversations(store: _SQLStore) -> list[dict[str, Any]]:
    """Every stored conversation with its totals, the most recently active first."""
    out = []
    for session in store.list_sessions():
        totals = _totals(session["id"], _rows(store, session["id"]))
        out.append(
            {
                "id": session["id"],
                "created_at": _iso(session["created_at"]),
                "updated_at": _iso(session["updated_at"]),
                "messages": session["counts"],
                **totals,
            }
        )
    out.sort(key=lambda c: (c["last_at"] or 0.0, c["updated_at"] or ""), reverse=True)
    return out


def _iso(value: Any) -> str | None:
    """A store timestamp (a datetime, or SQLite's text) as ISO 8601 text."""
    return value.isoformat() if isinstance(value, datetime) else None if value is None else str(value)


def conversation(store: _SQLStore, session_id: str) -> dict[str, Any] | None:
    """One conversation: totals, each request's figures, the passes applied, its markers (with what each
    absorbed) and the markers as the model sees them now; None when the store has no such conversation."""
    if not store.session_versions([session_id]):
        return None
    rows = _rows(store, session_id)
    everything = store.export(session_id, include_absorbed=True)
    absorbed: dict[int, list[int]] = {}
    for m in everything:
        by = m.get(ABSORBED_BY_KEY)
        if isinstance(by, int) and not marker_kind(m):
            absorbed.setdefault(by, []).append(int(m[ROW_KEY]))
    markers = [
        {
            "row": int(m[ROW_KEY]),
            "kind": marker_kind(m),
            "state": m.get(STATE_KEY),
            "absorbed_rows": absorbed.get(int(m[ROW_KEY]), []),
            "superseded_by": m.get(ABSORBED_BY_KEY),
        }
        for m in everything
        if marker_kind(m)
    ]
    passes = [{"request": number, **p} for number, row in enumerate(rows, start=1) for p in row.get("passes") or []]
    memory = secrets_of(store, session_id)
    now = [
        {"row": int(m[ROW_KEY]), "kind": marker_kind(m), **text_of(m, memory, labels=False)}
        for m in everything
        if _active_marker(m)
    ]
    return {
        "id": session_id,
        **_totals(session_id, rows),
        "rewrite_switched": store.session_meta(session_id).get(REWRITE_META) is True,
        "messages": {
            "active": sum(1 for m in everything if m.get(STATE_KEY) == "active"),
            "absorbed": sum(1 for m in everything if m.get(STATE_KEY) == "absorbed"),
        },
        "requests_figures": [{"request": n, **r, "passes": len(r.get("passes") or [])} for n, r in enumerate(rows, 1)],
        "folds_detail": folds(rows),
        "passes": passes,
        "markers": markers,
        "markers_now": now,
    }


class Verdict(StrEnum):
    """Where a fold stands against the price rule's numbers, as the requests since it were billed."""

    FORCED = "forced"  # the window forced it (it was not made because it pays): see :func:`window_forced`
    PAID = "paid"  # what it saved on the requests since covers what it cost
    PAYING = "paying"  # not yet: ``pays_back_in`` more requests at its saving
    NO_SAVING = "no saving"  # the prompt did not shrink (it grew more than the fold took out)
    UNPRICED = "unpriced"  # no cache prices for the model, or no cache write reported


def folds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request that sent a folded view (or, audited, would have), with the passes applied since the
    previous one and the price rule's numbers as the provider billed them: what the fold cost (the request's
    cache write, see :func:`_written`, at the rewrite premium, plus its summarizer calls), what the smaller
    prompt saves on every later request (its drop from the previous request's, at the cache read price: a
    lower bound, the request's own growth is not added), after how many requests that pays for the fold,
    and the verdict on the requests made since."""
    out: list[dict[str, Any]] = []
    passes: list[dict[str, Any]] = []
    for number, row in enumerate(rows, start=1):
        passes += row.get("passes") or []
        if not row.get("folded"):
            continue
        before = _view(rows[number - 2], "prompt_tokens") if number > 1 else None
        now = _view(row, "prompt_tokens")
        smaller = before - now if isinstance(before, int) and isinstance(now, int) else None
        read, premium = row.get("read_price"), row.get("rewrite_premium")
        written = _written(row)
        rewrite_cost = written * premium / 1e6 if isinstance(written, int) and isinstance(premium, float) else None
        saving = smaller * read / 1e6 if smaller is not None and smaller > 0 and isinstance(read, float) else None
        summarizer = sum(float(p.get("summarizer_cost") or 0) for p in passes)
        out.append(
            {
                "request": number,
                "mode": "audit" if row.get("mode") == "audit" else "rewrite",
                "prompt_before": before,
                "prompt_after": now,
                "occupancy_before": rows[number - 2].get("occupancy_pct") if number > 1 else None,
                "occupancy_after": row.get("occupancy_pct"),
                "passes": len(passes),
                "outcomes": sorted({str(p.get("outcome")) for p in passes}),
                "why": sorted({str(p.get("reason") or p.get("mode")) for p in passes}),
                "summarizer_cost": round(summarizer, 8),
                "cache_write": written,
                "rewrite_cost": None if rewrite_cost is None else round(rewrite_cost, 8),
                "saving_per_request": None if saving is None else round(saving, 8),
                **_verdict(rewrite_cost, summarizer, saving, len(rows) - number, smaller),
            }
        )
        forced = window_forced(rows, number - 1, passes)
        out[-1]["forced_at"] = forced  # the unfolded prompt, % of the threshold (None: not forced)
        if forced is not None:
            out[-1].update(verdict=Verdict.FORCED.value, pays_back_in=None)
        passes = []
    return out


def _verdict(
    rewrite_cost: float | None, summarizer: float, saving: float | None, since: int, smaller: int | None
) -> dict[str, Any]:
    """The price rule's verdict on one fold: its cost (rewrite and summarizer) against its saving per
    request over the ``since`` requests made after it."""
    cost = None if rewrite_cost is None else rewrite_cost + summarizer
    figures: dict[str, Any] = {"requests_since": since, "pays_back_after": None, "saved_since": None}
    if cost is None or (smaller is not None and smaller > 0 and saving is None):
        return {**figures, "verdict": Verdict.UNPRICED.value, "pays_back_in": None}
    if not saving:
        return {**figures, "verdict": Verdict.NO_SAVING.value, "pays_back_in": None}
    after = math.ceil(cost / saving - 1e-9)
    figures.update(pays_back_after=after, saved_since=round(saving * since, 8))
    if since >= after:
        return {**figures, "verdict": Verdict.PAID.value, "pays_back_in": 0}
    return {**figures, "verdict": Verdict.PAYING.value, "pays_back_in": after - since}


GROWTH_ROWS = 5  # the newest unfolded requests whose growth stands for the conversation's


def window_forced(rows: list[dict[str, Any]], index: int, passes: list[dict[str, Any]]) -> float | None:
    """Whether the fold of ``rows[index]`` (with ``passes`` applied since the previous fold) was forced by
    the window rather than made because it pays: a batch compaction at the threshold, or a prompt that
    without the fold would have passed the threshold within the price rule's headroom (its own cap test,
    :func:`~microcompact.bill.fold_price.over_cap`, on the unfolded prompt: the view's occupancy scaled back by
    the counted tokens the passes removed, the growth the requests before it measured). The unfolded
    prompt as a % of the threshold when forced; None when not (or when the row cannot say)."""
    row = rows[index]
    cap, after, counted = row.get("threshold_tokens"), row.get("occupancy_pct"), row.get("counted_tokens")
    if not (isinstance(cap, int) and cap > 0 and isinstance(after, int | float)):
        return None
    removed = sum(max(0, int(p.get("removed_tokens") or 0)) for p in passes)
    scale = (counted + removed) / counted if isinstance(counted, int) and counted > 0 else 1.0
    unfolded = after * scale  # % of the threshold
    if any(p.get("reason") == "threshold" for p in passes):  # the batch compaction the threshold runs
        return round(unfolded, 1)
    return round(unfolded, 1) if over_cap(round(unfolded * cap / 100), cap, _growth(rows[:index])) else None


def _growth(rows: list[dict[str, Any]]) -> float | None:
    """The prompt's growth per request, as the newest unfolded requests measured it (the median)."""
    grown = []
    for before, row in itertools.pairwise(rows):
        a, b = _view(before, "prompt_tokens"), _view(row, "prompt_tokens")
        if not row.get("folded") and isinstance(a, int) and isinstance(b, int) and b > a:
            grown.append(b - a)
    return statistics.median(grown[-GROWTH_ROWS:]) if grown else None


def _view(row: dict[str, Any], name: str) -> Any:
    """A figure of the view the request sent, or for an audited one the view it would have sent."""
    if row.get("mode") != "audit":
        return row.get(name)
    names = {
        "prompt_tokens": "would_have_tokens",
        "cache_write_tokens": "would_have_cache_write",
        "cache_read_tokens": "would_have_cache_read",
    }
    return row.get(names[name])


def _written(row: dict[str, Any]) -> int | None:
    """The prompt tokens a fold's request wrote to the cache again: as reported, or where the provider
    reports no writes (OpenAI's automatic caching bills them as plain input) the prompt not read from it."""
    written = _view(row, "cache_write_tokens")
    if isinstance(written, int):
        return written
    prompt, read = _view(row, "prompt_tokens"), _view(row, "cache_read_tokens")
    return max(0, prompt - read) if isinstance(prompt, int) and isinstance(read, int) else None


def _active_marker(message: Message) -> bool:
    return bool(marker_kind(message)) and message.get(STATE_KEY) == "active"


def search(store: _SQLStore, session_id: str, query: str) -> list[dict[str, Any]]:
    """The absorbed originals matching ``query`` (words, "quoted phrases"), best first; snippets redacted."""
    hits = store.search(session_id, query[:500], limit=SEARCH_LIMIT)
    if hits:
        with remembering(secrets_of(store, session_id)):
            for hit in hits:
                hit["snippet"] = redact_text(hit["snippet"])
    return hits


def original(store: _SQLStore, session_id: str, row: int) -> dict[str, Any] | None:
    """One stored message of the conversation (an absorbed original, usually), as text; None if not there."""
    for m in store.export(session_id, include_absorbed=True):
        if m.get(ROW_KEY) == row:
            text = text_of(m, secrets_of(store, session_id))
            return {"row": row, "role": m.get("role"), "state": m.get(STATE_KEY), **text}
    return None
