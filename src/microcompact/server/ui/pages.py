"""The two pages: the list of conversations, and one conversation (its occupancy chart, cache and dollars
per request, the folds and batches with the price rule's numbers, the markers as the model sees them now,
and a search over the absorbed originals, each hit expandable). Built from :mod:`.data`'s dicts."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from .data import Verdict
from .html import dollars, esc, number, page, pct, table, when

CHART_W, CHART_H, PAD = 760, 220, 36


def link(session_id: str) -> str:
    return "/ui/" + quote(session_id, safe="")


def signature(figures: dict[str, Any]) -> list[Any]:
    """What changes when the conversation moves on (the script polls it)."""
    return [figures.get("requests"), figures.get("folds"), figures.get("last_at")]


def list_page(conversations: list[dict[str, Any]], nonce: str) -> str:
    headers = [
        ("conversation", "l"),
        ("client", "l"),
        ("model", "l"),
        ("API", "l"),
        ("requests", ""),
        ("occupancy now", ""),
        ("folds", ""),
        ("prompt tokens", ""),
        ("uncompacted tokens", ""),
        ("tokens saved", ""),
        ("spent", ""),
        ("uncompacted", ""),
        ("pricing", "l"),
        ("mode", "l"),
        ("would have saved", ""),
        ("last activity", "l"),
    ]
    rows = [
        (
            "conv",
            [
                f'<a class="conv" href="{esc(link(c["id"]))}">{esc(c["id"])}</a>',
                esc(c["client"]),
                esc(c["model"]),
                esc(c["api"]),
                number(c["requests"]),
                pct(c["occupancy_pct"]),
                number(c["folds"]),
                number(c["prompt_tokens"]),
                number(c["uncompacted_tokens"]),
                number(c["tokens_saved"]),
                money(c, "spent"),
                money(c, "uncompacted"),
                pricing(c),
                esc(c["mode"]),
                dollars(c["would_have_saved"]),
                when(c["last_at"]) if c["last_at"] else esc(c["updated_at"]),
            ],
        )
        for c in conversations
    ]
    body = (
        f'<div id="live"><p class="muted">{_count(len(conversations), "conversation")} in the store.</p>'
        f"{table([(h, 'id' if h == 'conversation' else c) for h, c in headers], rows)}</div>"
    )
    sig = [[c["id"], *signature(c)] for c in conversations[:50]]
    return page("conversations", body, nonce, poll="/ui/api/conversations", signature=_json(sig))


def pricing(figures: dict[str, Any]) -> str:
    """The price table a conversation's dollars come from (its model family, or a configured preset), or the
    model no price is known for."""
    if figures.get("unpriced"):
        return f'<span class="muted">unpriced: {esc(figures["unpriced"])}</span>'
    return esc(figures.get("pricing")) if figures.get("pricing") else "&ndash;"


def money(figures: dict[str, Any], name: str) -> str:
    """Dollars, or for a conversation (or request) with no price known, what its model is."""
    value = figures.get(name)
    if value is None:
        pricing = f"unpriced: {figures['unpriced']}" if figures.get("unpriced") else figures.get("pricing")
        if isinstance(pricing, str) and pricing.startswith("unpriced: "):
            return f'<span class="muted">{esc(pricing)}</span>'
    return dollars(value)


def chart(requests: list[dict[str, Any]]) -> str:
    """Occupancy per request as an inline SVG: one ``circle.pt`` per request (``fold`` when it folded)."""
    values = [r.get("occupancy_pct") for r in requests]
    top = max([100.0, *[v for v in values if isinstance(v, int | float)]])
    n = len(requests)
    step = (CHART_W - 2 * PAD) / max(1, n - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return PAD + i * step, CHART_H - PAD - (CHART_H - 2 * PAD) * v / top

    points, line = [], []
    for i, r in enumerate(requests):
        v = values[i]
        x, y = xy(i, float(v) if isinstance(v, int | float) else 0.0)
        line.append(f"{x:.1f},{y:.1f}")
        cls = "pt fold" if r.get("folded") else "pt"
        tip = f"request {r.get('request')}: {pct(values[i])}" + (" (fold)" if r.get("folded") else "")
        points.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="3.5"><title>{tip}</title></circle>')
    _, cap_y = xy(0, 100.0)
    axes = (
        f'<line class="axis" x1="{PAD}" y1="{CHART_H - PAD}" x2="{CHART_W - PAD}" y2="{CHART_H - PAD}"/>'
        f'<line class="axis" x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{CHART_H - PAD}"/>'
        f'<line class="cap" x1="{PAD}" y1="{cap_y:.1f}" x2="{CHART_W - PAD}" y2="{cap_y:.1f}"/>'
        f'<text class="lbl" x="2" y="{cap_y + 4:.1f}">100%</text>'
        f'<text class="lbl" x="2" y="{CHART_H - PAD + 4}">0%</text>'
        f'<text class="lbl" x="{CHART_W / 2 - 30:.0f}" y="{CHART_H - 8}">request (1&ndash;{n})</text>'
    )
    polyline = f'<polyline class="line" points="{" ".join(line)}"/>' if n > 1 else ""
    return (
        f'<svg id="occupancy" role="img" aria-label="occupancy per request" width="{CHART_W}" height="{CHART_H}" '
        f'viewBox="0 0 {CHART_W} {CHART_H}" xmlns="http://www.w3.org/2000/svg">{axes}{polyline}{"".join(points)}</svg>'
    )


def _requests_table(requests: list[dict[str, Any]]) -> str:
    audited = any(r.get("mode") == "audit" for r in requests)
    extra = [("would-have tokens", ""), ("would have", "")] if audited else []
    headers = [
        ("#", ""),
        ("answered", "l"),
        ("occupancy", ""),
        ("prompt tokens", ""),
        ("uncompacted tokens", ""),
        ("cache read", ""),
        ("cache written", ""),
        ("spent", ""),
        ("uncompacted", ""),
        *extra,
        ("fold", "l"),
    ]
    rows = [
        (
            "fold-row" if r.get("folded") else "",
            [
                number(r.get("request")),
                when(r.get("at")),
                pct(r.get("occupancy_pct")),
                number(r.get("prompt_tokens")),
                number(r.get("uncompacted_tokens")),
                number(r.get("cache_read_tokens")),
                number(r.get("cache_write_tokens")),
                money(r, "spent"),
                money(r, "uncompacted"),
                *([number(r.get("would_have_tokens")), dollars(r.get("would_have"))] if audited else []),
                _fold_cell(r),
            ],
        )
        for r in reversed(requests)
    ]
    return table(headers, rows)


def _fold_cell(row: dict[str, Any]) -> str:
    if not row.get("folded"):
        return ""
    return "would fold" if row.get("mode") == "audit" else "fold"


def _audit(detail: dict[str, Any]) -> str:
    """The audit's paragraph (``serve --audit``): what rewriting would have done, and the switch."""
    if not detail.get("audited_requests") and not detail.get("rewrite_switched"):
        return ""
    sid = detail["id"]
    if detail.get("rewrite_switched"):
        state, button = "<b>rewriting</b> (switched on for this conversation)", ("off", "Back to audit")
    elif detail.get("mode") == "audit":
        state, button = "<b>audit</b>: forwarded as the client sent it", ("on", "Turn rewriting on")
    else:
        state, button = "<b>rewriting</b>", ("off", "Back to audit")
    return (
        f'<p class="summary audit">Mode: {state}. {number(detail["audited_requests"])} audited requests: '
        f"{number(detail['would_have_tokens'])} prompt tokens it would have sent against "
        f"{number(detail['audited_prompt_tokens'])} sent; would have cost {dollars(detail['would_have'])}, "
        f"<b>would have saved {dollars(detail['would_have_saved'])}</b>; the folds below are the ones it would "
        f'have made. <button type="button" data-rewrite-id="{esc(sid)}" data-rewrite="{button[0]}">'
        f"{button[1]}</button> (or <code>microcompact sessions rewrite {esc(sid)}"
        f"{' --off' if button[0] == 'off' else ''}</code>)</p>"
    )


def _folds_table(folds: list[dict[str, Any]]) -> str:
    if not folds:
        return '<p class="muted">No fold yet: the view sent is the history as it grew.</p>'
    headers = [
        ("request", ""),
        ("passes", ""),
        ("why", "l"),
        ("prompt tokens", "l"),
        ("occupancy", "l"),
        ("cache written", ""),
        ("rewrite cost", ""),
        ("summarizer cost", ""),
        ("saves per request", ""),
        ("pays back after", ""),
        ("verdict", "l"),
    ]
    rows = [
        (
            "fold",
            [
                number(f["request"]),
                number(f["passes"]),
                esc(", ".join(f["why"] + f["outcomes"])),
                f"{number(f['prompt_before'])} &rarr; {number(f['prompt_after'])}",
                f"{pct(f['occupancy_before'])} &rarr; {pct(f['occupancy_after'])}",
                number(f["cache_write"]),
                dollars(f["rewrite_cost"]),
                dollars(f["summarizer_cost"]),
                dollars(f["saving_per_request"]),
                esc(f"{f['pays_back_after']} requests") if f["pays_back_after"] is not None else "&ndash;",
                _verdict_cell(f),
            ],
        )
        for f in reversed(folds)
    ]
    return table(headers, rows)


def _verdict_cell(fold: dict[str, Any]) -> str:
    """Why the fold paid (or not yet): its cost against its saving over the requests since; a fold the window
    forced says so, with what it saved since (not when it pays back: it was not made to); "would fold" for
    an audited one."""
    since = fold["requests_since"]
    forced = f"forced by the window: {pct(fold['forced_at'])} of the threshold unfolded"
    if fold["saved_since"] is not None:
        forced += f"; saved {dollars(fold['saved_since'])} over the {number(since)} requests since"
    said = {
        Verdict.FORCED.value: forced,
        Verdict.PAID.value: f"paid: saved {dollars(fold['saved_since'])} over the {number(since)} requests since",
        Verdict.PAYING.value: f"pays back in {number(fold['pays_back_in'])} more requests ({number(since)} since)",
        Verdict.NO_SAVING.value: "no saving: the prompt did not shrink",
        Verdict.UNPRICED.value: "unpriced: no cache prices for this model",
    }.get(fold["verdict"], esc(fold["verdict"]))
    return f"<b>would fold</b>; {said}" if fold["mode"] == "audit" else said


def _passes_table(passes: list[dict[str, Any]]) -> str:
    if not passes:
        return '<p class="muted">No pass applied yet.</p>'
    headers = [
        ("request", ""),
        ("engine", "l"),
        ("outcome", "l"),
        ("why", "l"),
        ("tokens before", ""),
        ("after", ""),
        ("removed", ""),
        ("messages", "l"),
        ("saves per request", ""),
        ("summarizer cost", ""),
        ("read $/MTok", ""),
        ("rewrite premium $/MTok", ""),
    ]
    rows = [
        (
            "pass",
            [
                number(p.get("request")),
                esc(str(p.get("event", "")).partition("_")[0]),  # micro_compaction -> micro
                esc(p.get("outcome")),
                esc(p.get("reason") or p.get("mode")),
                number(p.get("tokens_before")),
                number(p.get("tokens_after")),
                number(p.get("removed_tokens")),
                esc(f"{p.get('messages_before')} \u2192 {p.get('messages_after')}"),
                dollars(p.get("saving_per_request")),
                dollars(p.get("summarizer_cost")),
                esc(p.get("read_price")),
                esc(p.get("rewrite_premium")),
            ],
        )
        for p in reversed(passes)
    ]
    return table(headers, rows)


def _absorbed(session_id: str, rows: list[int]) -> str:
    """How many messages a marker absorbed, each a link that opens the original."""
    links = " ".join(
        f'<a href="{esc(link(session_id))}?{esc(urlencode({"open": row}))}">{number(row)}</a>' for row in rows[:20]
    )
    return f"{number(len(rows))}" + (f" (rows {links}{' ...' if len(rows) > 20 else ''})" if rows else "")


def _markers(detail: dict[str, Any]) -> str:
    session_id = detail["id"]
    now = "".join(
        f'<h3 class="muted">{esc(m["kind"])} marker, row {number(m["row"])}</h3>'
        f'<pre class="marker">{esc(m["text"])}</pre>'
        + (
            f'<p class="muted">cut at {number(len(m["text"]))} of {number(m["chars"])} characters</p>'
            if m["cut"]
            else ""
        )
        for m in detail["markers_now"]
    )
    history = table(
        [("row", ""), ("kind", "l"), ("state", "l"), ("absorbed messages", "l"), ("superseded by", "")],
        [
            (
                "marker",
                [
                    number(m["row"]),
                    esc(m["kind"]),
                    esc(m["state"]),
                    _absorbed(session_id, m["absorbed_rows"]),
                    number(m["superseded_by"]),
                ],
            )
            for m in detail["markers"]
        ],
    )
    return (now or '<p class="muted">No marker: nothing folded yet.</p>') + "<h3>Every marker</h3>" + history


def _search(session_id: str, query: str, hits: list[dict[str, Any]], opened: dict[int, dict[str, Any]]) -> str:
    form = (
        f'<form method="get" action="{esc(link(session_id))}"><input type="search" name="q" value="{esc(query)}" '
        'placeholder="words or &quot;a phrase&quot;"> <button type="submit">Search</button></form>'
    )
    items = []
    for hit in hits:
        row = hit["row"]
        shown = opened.get(row)
        body = (
            f'<pre class="original">{esc(shown["text"])}</pre>'
            if shown
            else f'<a href="{esc(link(session_id))}?{esc(urlencode({"q": query, "open": row}))}">show the original</a>'
        )
        items.append(
            f'<details class="hit" data-row="{row}"{" open" if shown else ""}><summary>row {number(row)} '
            f"({esc(hit['role'])}, {esc(hit['state'])}): {esc(hit['snippet'])}</summary>{body}</details>"
        )
    listed = {hit["row"] for hit in hits}
    items += [
        f'<details class="hit" data-row="{row}" open><summary>row {number(row)} ({esc(shown["role"])}, '
        f'{esc(shown["state"])})</summary><pre class="original">{esc(shown["text"])}</pre></details>'
        for row, shown in opened.items()
        if row not in listed
    ]
    found = f'<p class="muted">{_count(len(hits), "absorbed original")} matching {esc(query)}.</p>' if query else ""
    return form + found + "".join(items)


def conversation_page(
    detail: dict[str, Any],
    nonce: str,
    query: str = "",
    hits: list[dict[str, Any]] | None = None,
    opened: dict[int, dict[str, Any]] | None = None,
) -> str:
    sid = detail["id"]
    requests = detail["requests_figures"]
    summary = (
        f'<p class="summary"><b>{number(detail["requests"])}</b> requests &middot; occupancy now '
        f"<b>{pct(detail['occupancy_pct'])}</b> (peak {pct(detail['occupancy_peak'])}) &middot; "
        f"<b>{number(detail['folds'])}</b> folds &middot; "
        f"{number(detail['prompt_tokens'])} prompt tokens against {number(detail['uncompacted_tokens'])} "
        f"uncompacted (<b>{number(detail['tokens_saved'])}</b> saved) &middot; {money(detail, 'spent')} spent "
        f"against {money(detail, 'uncompacted')} (priced as {pricing(detail)}) &middot; "
        f"{esc(detail['client'])} &middot; {esc(detail['model'])} ({esc(detail['api'])})</p>"
    )
    live = (
        f'<div id="live">{summary}{_audit(detail)}<h2>Occupancy per request</h2>{chart(requests)}'
        f"<h2>Folds</h2>{_folds_table(detail['folds_detail'])}"
        f"<h2>Passes (micro and batch, from the engine's telemetry)</h2>{_passes_table(detail['passes'])}"
        f"<h2>The markers as the model sees them now</h2>{_markers(detail)}"
        f"<h2>Requests: cache and dollars</h2>{_requests_table(requests)}</div>"
    )
    body = f"<h2>Search the absorbed originals</h2>{_search(sid, query, hits or [], opened or {})}{live}"
    poll = "/ui/api/conversation?" + urlencode({"id": sid})
    return page(sid, body, nonce, poll=poll, signature=_json(signature(detail)))


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
