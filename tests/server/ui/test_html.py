"""Escaping, as a property: whatever text a transcript holds, the page's HTML of it is inert (no markup
character, no control character) and reads back as the same text (control characters shown as ``\\xNN``)."""

from __future__ import annotations

import html
import re

from hypothesis import given
from hypothesis import strategies as st

from microcompact.server.ui.html import esc
from microcompact.server.ui.pages import chart

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@given(st.text(st.characters(exclude_categories=())))  # surrogates too
def test_escaped_text_is_inert_and_reads_back(text: str) -> None:
    out = esc(text)
    assert not re.search(r"[<>\"']", out) and not CONTROL.search(out)
    assert not re.search(r"&(?!(amp|lt|gt|quot|#x27);)", out), "every & starts one of the escapes"
    out.encode("utf-8")  # sendable, lone surrogates included
    sendable = text.encode("utf-8", "replace").decode("utf-8")
    assert html.unescape(out) == CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", sendable)


@given(st.lists(st.one_of(st.none(), st.floats(0, 500, allow_nan=False)), max_size=60))
def test_the_chart_draws_one_point_per_request(values: list[float | None]) -> None:
    requests = [{"request": i + 1, "occupancy_pct": v, "folded": i % 3 == 2} for i, v in enumerate(values)]
    svg = chart(requests)
    assert len(re.findall(r'<circle class="pt( fold)?"', svg)) == len(values)
    assert len(re.findall(r'<circle class="pt fold"', svg)) == sum(1 for r in requests if r["folded"])
