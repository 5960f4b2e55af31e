"""The page's switch button (``serve --audit``): the page's own script, run by Node against a real proxy with
a stand-in for the browser's document, posts the JSON that turns rewriting on for the button's conversation
and reloads the page; the store holds the flag afterwards. Skipped without ``node``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from microcompact.keys import REWRITE_META
from microcompact.server.ui.html import SCRIPT
from support.proxy_server import ProxyServer
from upstream import ScriptedUpstream

NODE = shutil.which("node")

# The browser's part, stood in for: a document whose click listener is called with the button, fetch toward
# the proxy, and a reload that prints what it was told (the page itself polls nothing here).
HARNESS = """
const base = process.argv[2];
let listener = null;
globalThis.document = {addEventListener: (kind, f) => { if (kind === 'click') listener = f; }, body: {
  getAttribute: () => null}};
globalThis.location = {reload: () => console.log('reloaded')};
const realFetch = globalThis.fetch;
globalThis.fetch = (url, options) => realFetch(base + url, options);
eval(require('fs').readFileSync(process.argv[3], 'utf8'));
const button = {getAttribute: (name) => ({'data-rewrite-id': process.argv[4], 'data-rewrite': 'on'})[name] || null};
listener({target: button});
listener({target: {getAttribute: () => null}});  // a click elsewhere posts nothing
"""


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_button_turns_rewriting_on_for_its_conversation(tmp_path: Path) -> None:
    assert NODE is not None
    script, harness = tmp_path / "page.js", tmp_path / "harness.js"
    script.write_text(SCRIPT, encoding="utf-8")
    harness.write_text(HARNESS, encoding="utf-8")
    with (
        ScriptedUpstream() as upstream,
        ProxyServer(upstream.base_url, tmp_path / "s.db", audit=True) as proxy,
    ):
        proxy.store.create_session("conversation-1")
        proxy.store.create_session("conversation-2")
        done = subprocess.run(
            [NODE, str(harness), proxy.base_url, str(script), "conversation-1"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stdout.strip() == "reloaded", done.stderr
        assert proxy.store.session_meta("conversation-1").get(REWRITE_META) is True
        assert REWRITE_META not in proxy.store.session_meta("conversation-2")
        posted = [json.loads(body) for path, body in proxy.received if path == "/ui/api/rewrite"]
    assert posted == [{"id": "conversation-1", "rewrite": True}]
