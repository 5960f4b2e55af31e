"""Each fold's verdict on the page's JSON (``folds_detail``): its cost (cache rewrite at the premium, plus its
summarizer calls) against its saving per request over the requests made since; an audited fold is one
that would have been made."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from microcompact.server.ui.data import Verdict, folds
from support import local_http
from support.proxy_server import ProxyServer
from support.ui_pages import drive
from upstream import ScriptedUpstream

READ, PREMIUM = 0.3, 3.45  # $ per million tokens: a cache read, and a write's premium over it


def row(prompt: int, folded: bool = False, written: int = 0, **extra: Any) -> dict[str, Any]:
    base = {"prompt_tokens": prompt, "folded": folded, "cache_write_tokens": written}
    return {**base, "read_price": READ, "rewrite_premium": PREMIUM, **extra}


def conversation(after: int, summarizer: float = 0.0) -> list[dict[str, Any]]:
    """A prompt of 100K tokens folded to 40K (20K written again), then ``after`` requests."""
    passes = [{"outcome": "absorbed", "reason": "price", "summarizer_cost": summarizer}]
    fold = row(40_000, folded=True, written=20_000, passes=passes)
    return [row(90_000), row(100_000), fold, *[row(41_000 + 1_000 * n) for n in range(after)]]


def test_a_fold_pays_back_after_its_cost_over_its_saving() -> None:
    # cost: 20K x 3.45 / 1e6 = $0.069 + $0.03 summarizer; saving: 60K x 0.3 / 1e6 = $0.018 per request
    [fold] = folds(conversation(after=3, summarizer=0.03))
    assert (fold["rewrite_cost"], fold["saving_per_request"]) == (0.069, 0.018)
    assert fold["pays_back_after"] == 6 and fold["requests_since"] == 3  # ceil(0.099 / 0.018)
    assert (fold["verdict"], fold["pays_back_in"], fold["mode"]) == (Verdict.PAYING, 3, "rewrite")
    [paid] = folds(conversation(after=6, summarizer=0.03))
    assert (paid["verdict"], paid["pays_back_in"], paid["saved_since"]) == (Verdict.PAID, 0, 0.108)


def window(prompt: int, occupancy: float, folded: bool = False, **extra: Any) -> dict[str, Any]:
    """A row with what the window test reads: the view's occupancy of a 100K threshold, its counted size."""
    return row(prompt, folded, occupancy_pct=occupancy, threshold_tokens=100_000, counted_tokens=prompt, **extra)


def test_a_fold_the_window_forced_says_so_and_not_when_it_pays_back() -> None:
    # 88K, 92K, 96K: growing 4K a request; the fold took 40K out of 98K: unfolded at 98% of the threshold,
    # within two requests' growth of it, so the price rule's cap forced it whatever it pays.
    passes = [{"outcome": "absorbed", "mode": "drain", "removed_tokens": 40_000}]
    rows = [window(88_000, 88.0), window(92_000, 92.0), window(96_000, 96.0)]
    rows += [window(58_000, 58.0, folded=True, written=10_000, passes=passes), window(60_000, 60.0)]
    [fold] = folds(rows)
    assert (fold["verdict"], fold["forced_at"], fold["pays_back_in"]) == (Verdict.FORCED, 98.0, None)
    assert fold["saved_since"] is not None, "what it saved since is still said"
    # The same fold made far below the threshold was made because it pays.
    low = [window(n // 2, n / 2000) for n in (88_000, 92_000, 96_000)]
    low += [window(9_000, 9.0, folded=True, written=10_000, passes=passes), window(10_000, 10.0)]
    [paying] = folds(low)
    assert paying["forced_at"] is None and paying["verdict"] != Verdict.FORCED
    # A batch compaction at the threshold is the window's, wherever it leaves the prompt.
    batch = [{"outcome": "compacted", "reason": "threshold", "removed_tokens": 1_000}]
    [forced] = folds([window(30_000, 30.0), window(20_000, 20.0, folded=True, written=5_000, passes=batch)])
    assert forced["verdict"] == Verdict.FORCED and forced["forced_at"] == 21.0


def test_without_reported_writes_the_prompt_not_read_from_the_cache_was_written() -> None:
    # OpenAI reports cache reads only: the rest of the prompt was billed as input, written again
    [fold] = folds([row(100_000), row(40_000, folded=True, written=None, cache_read_tokens=30_000)])
    assert fold["cache_write"] == 10_000 and fold["rewrite_cost"] == 0.0345 and fold["pays_back_after"] == 2


@pytest.mark.parametrize(
    ("rows", "verdict"),
    [
        ([row(50_000), row(60_000, folded=True, written=10_000)], Verdict.NO_SAVING),  # grew past the fold
        ([row(50_000), row(20_000, folded=True, written=10_000, read_price=None)], Verdict.UNPRICED),
        ([row(50_000), row(20_000, folded=True, written=None)], Verdict.UNPRICED),  # no cache figures at all
    ],
)
def test_a_fold_without_a_saving_or_a_price_says_so(rows: list[dict[str, Any]], verdict: Verdict) -> None:
    [fold] = folds(rows)
    assert fold["verdict"] == verdict and fold["pays_back_after"] is None and fold["pays_back_in"] is None


def test_an_audited_fold_is_measured_on_the_view_it_would_have_sent() -> None:
    audited = {"mode": "audit", "would_have_tokens": 40_000, "would_have_cache_write": 20_000}
    rows = [row(90_000, mode="audit", would_have_tokens=90_000), row(100_000, mode="audit", would_have_tokens=100_000)]
    rows += [row(101_000, folded=True, written=0, **audited), row(102_000, mode="audit", would_have_tokens=41_000)]
    [fold] = folds(rows)
    assert fold["mode"] == "audit" and (fold["prompt_before"], fold["prompt_after"]) == (100_000, 40_000)
    assert fold["rewrite_cost"] == 0.069 and fold["verdict"] == Verdict.PAYING and fold["pays_back_in"] == 3


VERDICTS = re.compile(
    r"(would fold</b>; )?(paid: saved \$|pays back in [\d,]+ more requests|no saving|unpriced|forced by the window)"
)


@pytest.mark.parametrize("audit", [False, True])
def test_each_fold_row_on_the_page_says_its_verdict(upstream: ScriptedUpstream, tmp_path: Path, audit: bool) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=16_000, audit=audit) as proxy:
        session, _ = drive(proxy, history=[])
        detail = local_http.get(f"{proxy.base_url}/ui/api/conversation", params={"id": session}).json()
        page = local_http.get(f"{proxy.base_url}/ui/{quote(session, safe='')}").text
        listing = local_http.get(f"{proxy.base_url}/ui").text
    assert detail["pricing"] == "gpt-4o" and "(priced as gpt-4o)" in page
    [listed] = re.findall(r'<tr class="conv">(.*?)</tr>', listing, re.S)
    headings = re.findall(r"<th[^>]*>(.*?)</th>", listing)
    assert dict(zip(headings, re.findall(r"<td[^>]*>(.*?)</td>", listed), strict=True))["pricing"] == "gpt-4o"
    shown = re.findall(r'<tr class="fold">(.*?)</tr>', page, re.S)
    assert shown and len(shown) == len(detail["folds_detail"])
    for cells, fold in zip(shown, reversed(detail["folds_detail"]), strict=True):
        said = VERDICTS.search(cells)
        assert said is not None, cells
        assert bool(said.group(1)) == audit == (fold["mode"] == "audit")
        assert said.group(2).split()[0].rstrip(":") == {"paying": "pays", "no saving": "no"}.get(
            fold["verdict"], fold["verdict"]
        )
        if fold["verdict"] == Verdict.FORCED:
            assert "pays back in" not in cells and fold["pays_back_in"] is None
    assert any(f["verdict"] != Verdict.UNPRICED for f in detail["folds_detail"]), "the scripted model is priced"
