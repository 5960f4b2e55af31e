"""The conversation page in a real browser: Claude Code (the pinned npm package) runs a 22-step Bash loop
through ``microcompact serve`` in front of the scripted upstream; a second ``serve`` with a proxy key on the
same store then shows that conversation to headless Chromium (Debian's ``chromium``): the list's row, one
chart point per request, the folds, the marker's text, a search hit expanded to its original, hostile tool
output as text, and nothing without the key. Skipped, with the reason, without Claude Code or Chromium.

``MICROCOMPACT_UI_SCREENSHOTS=DIR`` keeps the screenshots there (the README's come from ``docs/``)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from microcompact.messages import MARKER_HEADING
from support import local_http
from support.chromium import INSTALL_HINT, dump_dom, find_chromium, screenshot
from support.claude_code import run_claude, unavailable_reason
from support.serve_process import ServeProcess
from upstream import RecordedRequest, Reply, ScriptedUpstream, Text, ToolCall, text
from upstream.scripts import offers_tool, seq_command

_missing = unavailable_reason() or (None if find_chromium() else INSTALL_HINT)
pytestmark = [pytest.mark.skipif(_missing is not None, reason=_missing or ""), pytest.mark.slow]

PROMPT = "Run the numbered steps with the Bash tool until they are done."
STEPS = 22
KEY = "page-browser-key"
HOSTILE_STEP = 2
HOSTILE = (
    "printf '<script>alert(1)</script><img src=x onerror=alert(2)>\\033[31mred\\a\\n'; "
    "head -c 20000 /dev/zero | tr '\\0' w; echo"
)


class Steps:
    """Call Bash ``steps`` times (each output ~24 KB, led by a searchable ``needlestepN``; one hostile)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.done = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        if not offers_tool(request.body, "Bash"):
            return text("Side request answered.")
        if self.done >= self.steps:
            return text("All steps are done.")
        self.done += 1
        n = self.done
        command = HOSTILE if n == HOSTILE_STEP else f"echo needlestep{n}; {seq_command(n)}"
        return Reply((Text(f"Step {n}."), ToolCall("Bash", {"command": command, "description": f"Step {n}"})))


def wait_for_rows(base_url: str, expected: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The Claude Code conversation's JSON once all its requests' figures are stored (follow-ups run after
    each answer, so the last one may land a moment after the client exits)."""
    deadline = time.monotonic() + 30
    while True:
        listed = local_http.get(f"{base_url}/ui/api/conversations", headers=headers).json()["conversations"]
        mine = [c for c in listed if (c.get("client") or "").startswith("claude-cli/")]
        if (mine and max(c["requests"] for c in mine) >= expected) or time.monotonic() > deadline:
            return max(mine, key=lambda c: c["requests"]) if mine else {}
        time.sleep(0.2)


def shots_dir(tmp_path: Path) -> Path:
    wanted = os.environ.get("MICROCOMPACT_UI_SCREENSHOTS")
    where = Path(wanted) if wanted else tmp_path / "shots"
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_claude_code_conversation_in_headless_chromium(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script = Steps(STEPS)
    home, db = tmp_path / "mc-home", tmp_path / "sessions.db"
    options = ("--db", str(db), "--anthropic-upstream", upstream.base_url, "--context-limit", "120000")
    first = ServeProcess(home, *options).start()
    try:
        run = run_claude(first.base_url, PROMPT, workdir=tmp_path / "work", home=tmp_path / "home")
        assert run.ok, run.stderr
        assert run.result is not None and run.result["num_turns"] == STEPS + 1
        loop = [r for r in upstream.generation_requests() if offers_tool(r.body, "Bash")]
        assert len(loop) == STEPS + 1
        conversation = wait_for_rows(first.base_url, len(loop))
    finally:
        assert first.stop() == 0
    assert conversation["requests"] == len(loop) and conversation["folds"] >= 1

    # Another serve on the same store, with a key: the page reads the store, not the process that wrote it.
    second = ServeProcess(home, *options, "--api-key", KEY).start()
    try:
        check_pages(second.base_url, conversation, len(loop), shots_dir(tmp_path))
    finally:
        second.stop()


def output_hits(base: str, sid: str, query: str) -> list[dict[str, Any]]:
    """The absorbed tool outputs matching ``query`` (the assistant's call that printed it matches too)."""
    params, key = {"id": sid, "q": query}, {"x-microcompact-key": KEY}
    hits = local_http.get(f"{base}/ui/api/search", params=params, headers=key).json()["hits"]
    return [h for h in hits if h["role"] != "assistant"]


def check_pages(base: str, conversation: dict[str, Any], requests: int, shots: Path) -> None:
    sid = conversation["id"]
    page = f"{base}/ui/{quote(sid, safe='')}"
    refused = dump_dom(f"{base}/ui")
    assert "needs the proxy's key" in refused and sid not in refused
    assert sid not in dump_dom(page) and sid not in dump_dom(f"{base}/ui/api/conversations")

    listing = dump_dom(f"{base}/ui?key={KEY}")
    [row] = re.findall(r'<tr class="conv">.*?</tr>', listing, re.S)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert sid in cells[0] and cells[1].startswith("claude-cli/") and cells[3] == "anthropic"
    assert cells[4] == f"{requests:,}" and int(cells[6]) == conversation["folds"]
    assert cells[12] == conversation["pricing"] and conversation["pricing"].startswith("claude-")
    screenshot(f"{base}/ui?key={KEY}", shots / "ui-conversations.png", 1500, 360)

    key = {"x-microcompact-key": KEY}
    detail = local_http.get(f"{base}/ui/api/conversation", params={"id": sid}, headers=key).json()
    [hit] = output_hits(base, sid, "needlestep1")
    opened = dump_dom(f"{page}?{urlencode({'key': KEY, 'q': 'needlestep1', 'open': hit['row']})}")
    chart = re.search(r'<svg id="occupancy".*?</svg>', opened, re.S)
    assert chart is not None and len(re.findall(r'<circle class="pt( fold)?"', chart.group())) == requests
    folds = re.findall(r'<tr class="fold">(.*?)</tr>', opened, re.S)
    assert len(folds) == conversation["folds"] == len(detail["folds_detail"])
    priced = [f for f in detail["folds_detail"] if f["rewrite_cost"] is not None and f["saving_per_request"]]
    assert priced, "Anthropic reports its cache writes: each fold's rewrite is priced against its saving"
    verdicts = [
        re.search(r"(paid: saved \$|pays back in [\d,]+ more|forced by the window: [\d.]+%|no saving|unpriced)", f)
        for f in folds
    ]
    assert all(verdicts), "each fold says why it was made"
    # A fold made because it pays says when it paid back; one the window forced says what it saved since.
    priced_verdicts = [
        f for f in folds if re.search(r"paid: saved \$|pays back in|forced by the window: .*; saved \$", f)
    ]
    assert priced_verdicts, "at least one fold's verdict is priced"
    passes = re.findall(r'<tr class="pass">(.*?)</tr>', opened, re.S)
    absorbed = [p for p in passes if ">absorbed<" in p or ">compacted<" in p]
    assert absorbed and len(passes) == len(detail["passes"])
    markers = re.findall(r'<pre class="marker">(.*?)</pre>', opened, re.S)
    assert markers and MARKER_HEADING in markers[0]
    assert detail["markers_now"][0]["text"].startswith(markers[0].split("\n", 1)[0].replace("&amp;", "&"))
    shown = re.search(
        r'<details class="hit" data-row="(\d+)" open="">.*?<pre class="original">(.*?)</pre>', opened, re.S
    )
    assert shown is not None and int(shown.group(1)) == hit["row"] and "needlestep1" in shown.group(2)
    screenshot(f"{page}?{urlencode({'key': KEY, 'q': 'needlestep1'})}", shots / "ui-conversation.png", 1280, 1700)

    [bad] = output_hits(base, sid, "onerror")
    hostile = dump_dom(f"{page}?{urlencode({'key': KEY, 'q': 'onerror', 'open': bad['row']})}")
    assert len(re.findall(r"<script\b", hostile)) == 1, "only the page's own script"
    assert (
        "<img" not in hostile and "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in hostile
    )
    assert "w" * 20_000 in hostile, "the very long line is there, whole"
    for shot in shots.glob("ui-*.png"):
        assert shot.stat().st_size > 10_000
